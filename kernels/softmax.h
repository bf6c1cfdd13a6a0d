// Attention softmax (LightSeq2 §IV-B), forward and backward, fused, with shape-specialized
// configurations picked by a one-time tuner, and the unfused "PyTorch eager" baseline.
//
// Semantics are those of reference/softmax.h (attention_softmax_forward/backward):
//   forward:  y[r, j] = exp(z_j - max z) / Σ_k exp(z_k - max z), z_j = scale · x[r, j] for unmasked
//             keys and -inf for masked ones; a fully-masked row is all zeros (not NaN); a NaN
//             among a row's valid scores makes its valid keys NaN and leaves its masked keys 0.
//   backward: dx = scale · y ⊙ (dy - Σ_j dy_j y_j), row by row (needs only y, not the mask).
// Scores are [batch, heads, q_len, k_len] row-major; row r = (b·heads + h)·q_len + i. Key j of row r
// is masked when causal and j > i + causal_offset, or when j >= key_lengths[b]. Both masks leave a
// prefix of valid keys, so a kernel computes L = min(k_len, key_lengths[b], i + causal_offset + 1)
// (clamped to [0, k_len]) once per row, never reads the masked keys and writes zeros there.
// Every launcher is a template over T in {float, __half, __nv_bfloat16} with fp32 arithmetic.
//
// Thread mappings (SoftmaxConfig; chosen by softmax_default_config or by SoftmaxTuner):
//   * warp path (rows up to 1024): a warp owns a row, a block of `threads` holds threads/32 rows.
//     Each lane keeps `items` vectors of `vector` elements (vector j of a lane is lane + 32·k) in
//     registers: one read, one write per element, reductions by shuffles only.
//   * block path (rows up to 16384): the block (`threads` threads) owns a row, each thread keeps
//     `items` vectors in registers; reductions are shuffles plus one shared-memory exchange.
//   * multipass path (any length, the fallback beyond 16384): a block of `threads` per row; the
//     forward walks the row three times (max, exp-sum, write), the backward twice (dot, write); the
//     re-reads of one row come from L2.
// Vectors are Packed<T> (16 bytes) when k_len % Packed<T>::kSize == 0 and every tensor pointer is
// 16-byte aligned, scalars otherwise.
//
// Limits (checked; seqbench::Error names the value and the limit): extents >= 0, k_len <=
// kSoftmaxMaxKLen, rows = batch·heads·q_len <= kSoftmaxMaxRows, scale finite, |causal_offset| <=
// kSoftmaxMaxCausalOffset, pointers non-null and aligned to their element when there is work
// (rows > 0 and k_len > 0), key_lengths (device, int32 [batch]) values outside [0, k_len] are
// clamped. In-place is supported: y may be x (forward), dx may be dy or y (backward); a partial
// overlap is rejected.
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace seqbench::kernels {

inline constexpr std::int64_t kSoftmaxMaxKLen = std::int64_t{1} << 30;
inline constexpr std::int64_t kSoftmaxMaxRows = 0x7fffffff;  // rows become grid.x
inline constexpr std::int64_t kSoftmaxMaxCausalOffset = std::int64_t{1} << 40;
inline constexpr int kSoftmaxMaxWarpElems = 32;   // elements per lane on the warp path
inline constexpr int kSoftmaxMaxBlockElems = 16;  // elements per thread on the block path
inline constexpr std::int64_t kSoftmaxMaxWarpKLen = 32 * kSoftmaxMaxWarpElems;      // 1024
inline constexpr std::int64_t kSoftmaxMaxBlockKLen = 1024 * kSoftmaxMaxBlockElems;  // 16384

struct SoftmaxShape {
  std::int64_t batch = 0;
  std::int64_t heads = 0;
  std::int64_t q_len = 0;
  std::int64_t k_len = 0;
  std::int64_t rows() const { return batch * heads * q_len; }
};

struct SoftmaxMask {
  bool causal = false;
  std::int64_t causal_offset = 0;             // query i sees keys j <= i + causal_offset
  const std::int32_t* key_lengths = nullptr;  // device, [batch]; null: no length mask
};

enum class SoftmaxPath { warp, block, multipass };
const char* softmax_path_name(SoftmaxPath path);

struct SoftmaxConfig {
  SoftmaxPath path = SoftmaxPath::warp;
  int threads = 128;  // threads per block (warp path: 32 per row held by the block)
  int vector = 1;     // elements per access: Packed<T>::kSize or 1
  int items = 1;      // vectors per thread in registers (register paths); 0 on the multipass path
  // The longest row the configuration can hold (unbounded on the multipass path).
  std::int64_t capacity() const;
  std::string to_string() const;  // "block/t256/v8/i2"
  bool operator==(const SoftmaxConfig&) const = default;
};

// k_len rounded up to a power of two: configurations are tuned and cached per bucket.
std::int64_t softmax_k_len_bucket(std::int64_t k_len);

// The heuristic used without tuning, for the bucket of k_len: warp path up to 1024, block path up
// to 16384 with the fewest items that keep the block at <= 512 threads, multipass beyond (1024
// threads). `vectorizable`: k_len % Packed<T>::kSize == 0 and aligned pointers.
SoftmaxConfig softmax_default_config(DType dtype, std::int64_t k_len, bool vectorizable);

// Every configuration the tuner times for k_len's bucket; all valid for every k_len of the bucket,
// the default among them. Warp path (128 and 256 threads) up to 1024, block path for every
// power-of-two item count that fits (threads from 64 to 1024), multipass (256 and 1024 threads)
// from 2048 up.
std::vector<SoftmaxConfig> softmax_candidate_configs(DType dtype, std::int64_t k_len, bool vectorizable);

// Throws unless `config` can run rows of k_len elements of dtype (capacity, vector width, items,
// threads).
void validate_softmax_config(const SoftmaxConfig& config, DType dtype, std::int64_t k_len, bool vectorizable);

// Whether launches with these pointers and k_len can use Packed<T> accesses.
bool softmax_vectorizable(DType dtype, std::int64_t k_len, std::initializer_list<const void*> pointers);

// --- launchers --------------------------------------------------------------------------------
// Minimal traffic: forward x read + y written; backward y, dy read + dx written (rows·k_len·sizeof(T)
// each), + batch·4 bytes of key lengths. With config == nullptr the default heuristic is used.
template <class T>
void launch_softmax_forward(T* y, const T* x, const SoftmaxShape& shape, float scale, const SoftmaxMask& mask,
                            cudaStream_t stream, const SoftmaxConfig* config = nullptr);

template <class T>
void launch_softmax_backward(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale,
                             cudaStream_t stream, const SoftmaxConfig* config = nullptr);

// --- the tuner --------------------------------------------------------------------------------
// Picks, once per (dtype, direction, vectorized, k_len bucket), the fastest of
// softmax_candidate_configs: each candidate is launched once to warm up, then, in each of three
// rounds, `repetitions` times between two CUDA events on the caller's stream, on the caller's
// tensors, queued behind a short spin kernel so that the events time the GPU running them back to
// back rather than the host's launch rate; a candidate's time is its median round. The winner is
// cached and every later call with the same key launches it directly. Tuning synchronizes on its events (once
// per key; not inside a CUDA graph capture) and writes the output tensor many times, so it refuses
// in-place calls. Thread-safe. to_json() dumps the cache with every candidate's time, for reports.
class SoftmaxTuner {
 public:
  struct Key {
    DType dtype = DType::f32;
    bool backward = false;
    bool vectorized = false;
    std::int64_t bucket = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct Timing {
    SoftmaxConfig config;
    double ms = 0.0;  // per launch
  };
  struct Entry {
    SoftmaxConfig choice;
    SoftmaxConfig heuristic;  // what softmax_default_config would have used
    std::int64_t rows = 0;    // the shape it was tuned on
    std::int64_t k_len = 0;
    std::vector<Timing> timings;  // every candidate, in candidate order
  };

  explicit SoftmaxTuner(int repetitions = 5);

  template <class T>
  void forward(T* y, const T* x, const SoftmaxShape& shape, float scale, const SoftmaxMask& mask,
               cudaStream_t stream);
  template <class T>
  void backward(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale, cudaStream_t stream);

  // The cached entry for a key, or null.
  const Entry* find(const Key& key) const;
  std::size_t size() const;
  std::string to_json() const;

 private:
  int repetitions_;
  mutable std::mutex mutex_;
  std::map<Key, Entry> cache_;
};

// --- the unfused baseline ---------------------------------------------------------------------
// Eager PyTorch's decomposed attention softmax, one op per kernel, intermediates in T, the
// elementwise ops moving 16-byte vectors as eager's vectorized elementwise kernel does
// (kernels/eager_map.h), workspace from the caller (256-byte aligned, at least the bytes below, and
// apart from every tensor of the call: its first bytes are refused where they overlap one):
//   forward, 5 kernels: z = scale·x (elementwise, T) -> masked_fill(z, -inf) (elementwise, only when
//   a mask is given) -> row max (row reduce) -> e = exp(z - max) with row sums (row reduce, e in T)
//   -> y = e / sum (elementwise; 0 for fully-masked rows; in a NaN row, as in eager, the masked
//   keys are NaN too).
//   backward, 4 kernels: t = dy·y (elementwise, T) -> dot = Σ t (row reduce) -> dx = y·(dy - dot)
//   (elementwise, T) -> dx *= scale (elementwise).
std::size_t softmax_unfused_forward_workspace_bytes(DType dtype, const SoftmaxShape& shape);
std::size_t softmax_unfused_backward_workspace_bytes(DType dtype, const SoftmaxShape& shape);

template <class T>
void launch_softmax_forward_unfused(T* y, const T* x, const SoftmaxShape& shape, float scale,
                                    const SoftmaxMask& mask, void* workspace, std::size_t workspace_bytes,
                                    cudaStream_t stream);
template <class T>
void launch_softmax_backward_unfused(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale,
                                     void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace seqbench::kernels
