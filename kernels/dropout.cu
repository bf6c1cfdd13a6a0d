#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/dropout.h"
#include "kernels/dropout_mask.h"

namespace seqbench::kernels {

using namespace dropout_detail;

namespace {

constexpr int kThreads = 256;

// Where a flat dropout kernel gets its keep bits from.
enum class MaskSource {
  philox,  // drawn from (seed, offset); optionally written out bit-packed (forward, regenerate)
  bits,    // read from a bit-packed mask (backward)
  bytes,   // read from a uint8 mask (unfused baseline, forward and backward)
};

template <class T>
struct FlatArgs {
  T* out = nullptr;
  const T* in = nullptr;
  std::uint64_t n = 0;
  DrawThreshold keep;  // draw_threshold(p): the philox source's keep test
  float scale = 0.0f;  // dropout_keep_scale(p)
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  std::uint32_t* mask_bits_out = nullptr;       // philox: written when non-null
  const std::uint32_t* mask_bits_in = nullptr;  // bits
  const std::uint8_t* mask_bytes_in = nullptr;  // bytes
  bool vector_path = false;                     // in/out 16-byte aligned (and the byte mask K-aligned)
};

// out[i] = in[i] · (keep(i) ? scale : 0): a multiply rather than a select, so that a dropped
// inf or NaN gives NaN exactly as the reference's x ⊙ keep / (1-p) does.
//
// One thread per vector of K elements; vector v covers elements [vK, vK + K). A warp's vectors
// are 32 consecutive ones starting at a multiple of 32, so the 32/K lanes covering one 32-element
// mask word are consecutive and aligned, and an xor-shuffle butterfly over them assembles the
// word. No thread returns early: every lane must reach the shuffles.
//
// kInPlace: out == in (the regenerating backward's dx == dy). A thread reads its K elements once
// and then writes them, and no other thread touches them, so in place is race-free; the in-place
// instance declares no pointer __restrict__, so that no compiler may read `in` through the
// non-coherent read-only path. (With nvcc 13.0 the out-of-place instance reads `in` through
// ld.global.nc, which its launcher allows by refusing overlapping buffers; the in-place one uses
// plain ld.global.)
template <class T, MaskSource kSource, bool kInPlace>
__global__ void __launch_bounds__(kThreads) dropout_kernel(const FlatArgs<T> args) {
  constexpr int K = Packed<T>::kSize;
  constexpr int kLanesPerWord = 32 / K;
  std::conditional_t<kInPlace, T*, T* __restrict__> out = args.out;
  std::conditional_t<kInPlace, const T*, const T* __restrict__> in = args.in;
  const std::uint64_t vector = static_cast<std::uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::uint64_t first = vector * K;
  const int count = first < args.n ? static_cast<int>(args.n - first < K ? args.n - first : K) : 0;
  const bool whole = args.vector_path && count == K;

  std::uint32_t keep = 0;
  if (count > 0) {
    if constexpr (kSource == MaskSource::philox) {
      // first is a multiple of K (8 in 16-bit, 4 in fp32), as dropout_keep_bits_aligned<K> needs:
      // one Philox group (8 draws) a whole vector, half of it in fp32.
      keep = count == K ? dropout_keep_bits_aligned<K>(args.seed, args.offset, first, args.keep)
                        : dropout_keep_bits(args.seed, args.offset, first, count, args.keep);
    } else if constexpr (kSource == MaskSource::bits) {
      // K divides 32 and first is a multiple of K, so the K bits never straddle two words.
      keep = (args.mask_bits_in[first >> 5] >> (first & 31)) & ((1u << K) - 1u);
    } else {
      if (whole) {
        const auto bytes = Packed<std::uint8_t, K>::load(args.mask_bytes_in + first);
#pragma unroll
        for (int k = 0; k < K; ++k) keep |= (bytes.v[k] != 0 ? 1u : 0u) << k;
      } else {
        for (int k = 0; k < count; ++k) keep |= (args.mask_bytes_in[first + k] != 0 ? 1u : 0u) << k;
      }
    }
    float v[K];
    load_floats<T, K>(in + first, v, count, whole);
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] *= ((keep >> k) & 1u) != 0 ? args.scale : 0.0f;
    store_floats<T, K>(out + first, v, count, whole);
  }

  if constexpr (kSource == MaskSource::philox) {
    if (args.mask_bits_out != nullptr) {  // uniform across the grid
      const int lane = static_cast<int>(threadIdx.x) % 32;
      keep &= count == K ? ~0u : (1u << count) - 1u;  // tail: bits past n stay 0
      std::uint32_t word = keep << ((lane % kLanesPerWord) * K);
#pragma unroll
      for (int s = 1; s < kLanesPerWord; s <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, s);
      if (count > 0 && lane % kLanesPerWord == 0) args.mask_bits_out[first >> 5] = word;
    }
  }
}

// The unfused baseline's bernoulli kernel: one thread per Philox group of 8 elements.
__global__ void __launch_bounds__(kThreads)
    dropout_mask_u8_kernel(std::uint8_t* __restrict__ mask, std::uint64_t n, DrawThreshold keep_test,
                           std::uint64_t seed, std::uint64_t offset, bool word_aligned) {
  constexpr int kDraws = 8;  // a Philox group's dropout draws (core/philox.h)
  const std::uint64_t group = static_cast<std::uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::uint64_t first = group * kDraws;
  if (first >= n) return;
  const PhiloxWords words = philox_group(seed, offset, group);
  std::uint8_t keep[kDraws];
#pragma unroll
  for (int k = 0; k < kDraws; ++k) {
    keep[k] = draw_passes(dropout_draw(words, static_cast<unsigned>(k)), keep_test) ? 1 : 0;
  }
  if (word_aligned && first + kDraws <= n) {
    auto* words_out = reinterpret_cast<std::uint32_t*>(mask + first);
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      words_out[w] = static_cast<std::uint32_t>(keep[4 * w]) |
                     (static_cast<std::uint32_t>(keep[4 * w + 1]) << 8) |
                     (static_cast<std::uint32_t>(keep[4 * w + 2]) << 16) |
                     (static_cast<std::uint32_t>(keep[4 * w + 3]) << 24);
    }
  } else {
    for (int k = 0; k < kDraws && first + k < n; ++k) mask[first + k] = keep[k];
  }
}

// Grid x is at most 2^31 - 1 blocks of kThreads vectors.
template <class T>
constexpr std::uint64_t max_flat_elements() {
  return std::uint64_t{0x7fffffff} * kThreads * Packed<T>::kSize;
}

// With `out_may_be_in`, out may be in itself (in place), but not overlap it otherwise.
template <class T>
void require_flat_tensors(T* out, const T* in, std::size_t n, const char* op, const char* out_name,
                          const char* in_name, bool out_may_be_in = false) {
  SEQBENCH_REQUIRE(n <= max_flat_elements<T>(), op << ": n = " << n << " > " << max_flat_elements<T>());
  require_non_null(out, op, out_name);
  require_non_null(in, op, in_name);
  if (out_may_be_in)
    require_same_or_disjoint(out, in, n * sizeof(T), op, out_name, in_name);
  else
    require_disjoint(out, n * sizeof(T), in, n * sizeof(T), op, out_name, in_name);
}

// kInPlace: see dropout_kernel; the caller has checked that args.out == args.in.
template <class T, MaskSource kSource, bool kInPlace = false>
void launch_flat(const FlatArgs<T>& args, cudaStream_t stream) {
  constexpr int K = Packed<T>::kSize;
  const std::uint64_t vectors = (args.n + K - 1) / K;
  const std::uint64_t blocks = (vectors + kThreads - 1) / kThreads;
  dropout_kernel<T, kSource, kInPlace><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void launch_dropout_fwd(T* y, const T* x, std::size_t n, const DropoutConfig& config, void* mask,
                        std::size_t mask_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("dropout_fwd");
  constexpr const char* op = "dropout_fwd";
  require_dropout_probability(config.p, op);
  if (n == 0) return;
  require_flat_tensors(y, x, n, op, "y", "x");
  if (mask != nullptr) {
    SEQBENCH_REQUIRE(mask_bytes >= dropout_mask_bytes(n), op << ": mask buffer of " << mask_bytes
                                                             << " bytes, needs dropout_mask_bytes(" << n
                                                             << ") = " << dropout_mask_bytes(n));
    SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(mask) % 4 == 0, op << ": mask is not 4-byte aligned");
    require_disjoint(mask, dropout_mask_bytes(n), x, n * sizeof(T), op, "mask", "x");
    require_disjoint(mask, dropout_mask_bytes(n), y, n * sizeof(T), op, "mask", "y");
  }
  FlatArgs<T> args;
  args.out = y;
  args.in = x;
  args.n = n;
  args.keep = draw_threshold(config.p);
  args.scale = dropout_keep_scale(config.p);
  args.seed = config.seed;
  args.offset = config.offset;
  args.mask_bits_out = static_cast<std::uint32_t*>(mask);
  args.vector_path = is_vector_aligned(x) && is_vector_aligned(y);
  launch_flat<T, MaskSource::philox>(args, stream);
}

template <class T>
void launch_dropout_bwd(T* dx, const T* dy, std::size_t n, float p, const void* mask, std::size_t mask_bytes,
                        cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("dropout_bwd");
  constexpr const char* op = "dropout_bwd";
  require_dropout_probability(p, op);
  if (n == 0) return;
  require_flat_tensors(dx, dy, n, op, "dx", "dy");
  require_non_null(mask, op, "mask");
  SEQBENCH_REQUIRE(mask_bytes >= dropout_mask_bytes(n), op << ": mask buffer of " << mask_bytes
                                                           << " bytes, needs dropout_mask_bytes(" << n
                                                           << ") = " << dropout_mask_bytes(n));
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(mask) % 4 == 0, op << ": mask is not 4-byte aligned");
  require_disjoint(dx, n * sizeof(T), mask, dropout_mask_bytes(n), op, "dx", "mask");
  FlatArgs<T> args;
  args.out = dx;
  args.in = dy;
  args.n = n;
  args.keep = draw_threshold(p);
  args.scale = dropout_keep_scale(p);
  args.mask_bits_in = static_cast<const std::uint32_t*>(mask);
  args.vector_path = is_vector_aligned(dx) && is_vector_aligned(dy);
  launch_flat<T, MaskSource::bits>(args, stream);
}

template <class T>
void launch_dropout_bwd_regenerate(T* dx, const T* dy, std::size_t n, const DropoutConfig& config,
                                   cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("dropout_bwd_regenerate");
  constexpr const char* op = "dropout_bwd_regenerate";
  require_dropout_probability(config.p, op);
  if (n == 0) return;
  require_flat_tensors(dx, dy, n, op, "dx", "dy", /*out_may_be_in=*/true);
  FlatArgs<T> args;
  args.out = dx;
  args.in = dy;
  args.n = n;
  args.keep = draw_threshold(config.p);
  args.scale = dropout_keep_scale(config.p);
  args.seed = config.seed;
  args.offset = config.offset;
  args.vector_path = is_vector_aligned(dx) && is_vector_aligned(dy);
  if (dx == dy)
    launch_flat<T, MaskSource::philox, true>(args, stream);
  else
    launch_flat<T, MaskSource::philox>(args, stream);
}

void launch_dropout_mask_u8(std::uint8_t* mask, std::size_t n, const DropoutConfig& config,
                            cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("dropout_mask_u8");
  constexpr const char* op = "dropout_mask_u8";
  require_dropout_probability(config.p, op);
  if (n == 0) return;
  const std::uint64_t max_n = std::uint64_t{0x7fffffff} * kThreads * 8;  // 8 elements a thread
  SEQBENCH_REQUIRE(n <= max_n, op << ": n = " << n << " > " << max_n);
  require_non_null(mask, op, "mask");
  const std::uint64_t groups = (n + 7) / 8;
  const std::uint64_t blocks = (groups + kThreads - 1) / kThreads;
  dropout_mask_u8_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      mask, n, draw_threshold(config.p), config.seed, config.offset,
      reinterpret_cast<std::uintptr_t>(mask) % 4 == 0);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_dropout_apply_u8(T* y, const T* x, const std::uint8_t* mask, std::size_t n, float p,
                             cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("dropout_apply_u8");
  constexpr const char* op = "dropout_apply_u8";
  require_dropout_probability(p, op);
  if (n == 0) return;
  require_flat_tensors(y, x, n, op, "y", "x");
  require_non_null(mask, op, "mask");
  require_disjoint(y, n * sizeof(T), mask, n, op, "y", "mask");
  constexpr int K = Packed<T>::kSize;
  FlatArgs<T> args;
  args.out = y;
  args.in = x;
  args.n = n;
  args.keep = draw_threshold(p);
  args.scale = dropout_keep_scale(p);
  args.mask_bytes_in = mask;
  args.vector_path =
      is_vector_aligned(x) && is_vector_aligned(y) && reinterpret_cast<std::uintptr_t>(mask) % K == 0;
  launch_flat<T, MaskSource::bytes>(args, stream);
}

// The explicit instantiations, in one place.
#define SEQBENCH_DROPOUT_INSTANTIATE(T)                                                                    \
  template void launch_dropout_fwd<T>(T*, const T*, std::size_t, const DropoutConfig&, void*, std::size_t, \
                                      cudaStream_t);                                                       \
  template void launch_dropout_bwd<T>(T*, const T*, std::size_t, float, const void*, std::size_t,          \
                                      cudaStream_t);                                                       \
  template void launch_dropout_bwd_regenerate<T>(T*, const T*, std::size_t, const DropoutConfig&,          \
                                                 cudaStream_t);                                            \
  template void launch_dropout_apply_u8<T>(T*, const T*, const std::uint8_t*, std::size_t, float,          \
                                           cudaStream_t);

SEQBENCH_DROPOUT_INSTANTIATE(float)
SEQBENCH_DROPOUT_INSTANTIATE(__half)
SEQBENCH_DROPOUT_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_DROPOUT_INSTANTIATE

}  // namespace seqbench::kernels
