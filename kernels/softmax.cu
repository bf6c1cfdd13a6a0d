// Attention softmax kernels: register paths (warp / block team), the multipass fallback, the
// tuner, and the unfused eager-like baseline. Thread mappings are documented in kernels/softmax.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <type_traits>
#include <vector>

#include "core/byte_range.h"
#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/dispatch_items.h"
#include "kernels/eager_map.h"
#include "kernels/packed.h"
#include "kernels/reduce.cuh"
#include "kernels/softmax.h"
#include "kernels/spin_wait.cuh"

namespace seqbench::kernels {
namespace {

constexpr int kMaxWarpPathThreads = 256;  // warp path: up to 8 rows per block
constexpr int kMaxBlockThreads = 1024;
constexpr int kPreferredBlockThreads = 512;
constexpr int kDefaultWarpPathThreads = 128;
constexpr int kDefaultMultipassThreads = 1024;
constexpr int kUnfusedThreads = 256;
constexpr std::size_t kUnfusedAlign = 256;

// Which keys of a row are valid: a prefix [0, valid(row)).
struct RowMask {
  std::int64_t rows_per_batch = 1;  // heads · q_len
  std::int64_t q_len = 1;
  int k_len = 0;
  bool causal = false;
  std::int64_t causal_offset = 0;
  const std::int32_t* key_lengths = nullptr;

  __device__ __forceinline__ int valid(std::int64_t row) const {
    std::int64_t n = k_len;
    if (key_lengths) {
      const std::int64_t len = key_lengths[row / rows_per_batch];
      n = min(n, max(len, std::int64_t{0}));
    }
    if (causal) n = min(n, max(row % q_len + causal_offset + 1, std::int64_t{0}));
    return static_cast<int>(n);
  }
};

template <class T>
struct ForwardArgs {
  T* y;  // may equal x: no __restrict__ on either
  const T* x;
  std::int64_t rows;
  RowMask mask;
  float scale;
};

template <class T>
struct BackwardArgs {
  T* dx;  // may equal dy or y
  const T* dy;
  const T* y;
  std::int64_t rows;
  int k_len;
  float scale;
};

// Stores zeros over [0, k_len) of a row, in the thread's vectors of the register layout.
template <class T, int kVec, int kItems>
__device__ __forceinline__ void store_zero_row(T* row, int lane, int team, int k_len) {
  Packed<T, kVec> zero;
#pragma unroll
  for (int i = 0; i < kVec; ++i) zero.v[i] = from_float<T>(0.0f);
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < k_len) zero.store(row + col);
  }
}

// ---------------------------------------------------------------------------------------------
// Register paths

template <class T, int kVec, int kItems, bool kWarpTeam>
__global__ void __launch_bounds__(kWarpTeam ? kMaxWarpPathThreads : kMaxBlockThreads)
    softmax_forward_kernel(ForwardArgs<T> a) {
  using V = Packed<T, kVec>;
  using TeamT = Team<kWarpTeam>;
  const int team = TeamT::size(), lane = TeamT::lane();
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * TeamT::per_block() + TeamT::index();
  if (row >= a.rows) return;  // warp path only (no block barriers there)
  const int k_len = a.mask.k_len;
  const int valid = a.mask.valid(row);
  const T* xr = a.x + row * k_len;
  T* yr = a.y + row * k_len;

  float v[kItems][kVec];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < valid) {  // masked keys are never read
      const V p = V::load(xr + col);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        v[k][i] = col + i < valid ? a.scale * to_float(p.v[i]) : -INFINITY;
        m = max_propagate_nan(m, v[k][i]);  // a NaN score makes the row NaN, never "fully masked"
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[k][i] = -INFINITY;
    }
  }
  m = team_max<kWarpTeam>(m);
  if (m == -INFINITY) {  // fully masked: zeros by definition (the team agrees, so this is uniform)
    store_zero_row<T, kVec, kItems>(yr, lane, team, k_len);
    return;
  }
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if ((lane + k * team) * kVec < valid) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        v[k][i] = expf(v[k][i] - m);  // exp(-inf) = 0 for the masked tail of a vector
        s += v[k][i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[k][i] = 0.0f;
    }
  }
  s = team_sum<kWarpTeam>(s);
  const float inv = 1.0f / s;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < k_len) {
      V out;
      // Masked keys are written as zeros even when the row is NaN (inv is NaN then), as the
      // multipass path does: v is 0 there, but 0 · NaN is NaN.
#pragma unroll
      for (int i = 0; i < kVec; ++i) out.v[i] = from_float<T>(col + i < valid ? v[k][i] * inv : 0.0f);
      out.store(yr + col);
    }
  }
}

template <class T, int kVec, int kItems, bool kWarpTeam>
__global__ void __launch_bounds__(kWarpTeam ? kMaxWarpPathThreads : kMaxBlockThreads)
    softmax_backward_kernel(BackwardArgs<T> a) {
  using V = Packed<T, kVec>;
  using TeamT = Team<kWarpTeam>;
  const int team = TeamT::size(), lane = TeamT::lane();
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * TeamT::per_block() + TeamT::index();
  if (row >= a.rows) return;
  const T* yr = a.y + row * a.k_len;
  const T* dyr = a.dy + row * a.k_len;
  T* dxr = a.dx + row * a.k_len;

  float y[kItems][kVec], dy[kItems][kVec];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < a.k_len) {
      const V py = V::load(yr + col), pd = V::load(dyr + col);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        y[k][i] = to_float(py.v[i]);
        dy[k][i] = to_float(pd.v[i]);
        dot = fmaf(y[k][i], dy[k][i], dot);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) y[k][i] = dy[k][i] = 0.0f;
    }
  }
  dot = team_sum<kWarpTeam>(dot);
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int col = (lane + k * team) * kVec;
    if (col < a.k_len) {
      V out;
#pragma unroll
      for (int i = 0; i < kVec; ++i) out.v[i] = from_float<T>(a.scale * (y[k][i] * (dy[k][i] - dot)));
      out.store(dxr + col);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Multipass fallback: one block per row, any length.

template <class T, int kVec>
__global__ void __launch_bounds__(kMaxBlockThreads) softmax_forward_multipass_kernel(ForwardArgs<T> a) {
  using V = Packed<T, kVec>;
  const std::int64_t row = blockIdx.x;
  const int k_len = a.mask.k_len;
  const int valid = a.mask.valid(row);
  const T* xr = a.x + row * k_len;
  T* yr = a.y + row * k_len;
  const int stride = static_cast<int>(blockDim.x);

  float m = -INFINITY;
  for (int j = threadIdx.x; j * kVec < valid; j += stride) {
    const V p = V::load(xr + j * kVec);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (j * kVec + i < valid) m = max_propagate_nan(m, a.scale * to_float(p.v[i]));
  }
  m = block_reduce_max(m);
  if (m == -INFINITY) {
    for (int j = threadIdx.x; j * kVec < k_len; j += stride) {
      V zero;
#pragma unroll
      for (int i = 0; i < kVec; ++i) zero.v[i] = from_float<T>(0.0f);
      zero.store(yr + j * kVec);
    }
    return;
  }
  float s = 0.0f;
  for (int j = threadIdx.x; j * kVec < valid; j += stride) {
    const V p = V::load(xr + j * kVec);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (j * kVec + i < valid) s += expf(a.scale * to_float(p.v[i]) - m);
  }
  s = block_reduce_sum(s);  // its barriers also end every read of pass 2 before pass 3 writes
  const float inv = 1.0f / s;
  for (int j = threadIdx.x; j * kVec < k_len; j += stride) {
    const int col = j * kVec;
    V p;
    if (col < valid) p = V::load(xr + col);
    V out;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      // p.v[i] is read only where col + i < valid, so where col < valid loaded p (the analyzer
      // cannot relate the two conditions).
      // NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage)
      out.v[i] = from_float<T>(col + i < valid ? expf(a.scale * to_float(p.v[i]) - m) * inv : 0.0f);
    out.store(yr + col);
  }
}

template <class T, int kVec>
__global__ void __launch_bounds__(kMaxBlockThreads) softmax_backward_multipass_kernel(BackwardArgs<T> a) {
  using V = Packed<T, kVec>;
  const std::int64_t row = blockIdx.x;
  const T* yr = a.y + row * a.k_len;
  const T* dyr = a.dy + row * a.k_len;
  T* dxr = a.dx + row * a.k_len;
  const int stride = static_cast<int>(blockDim.x);
  float dot = 0.0f;
  for (int j = threadIdx.x; j * kVec < a.k_len; j += stride) {
    const V py = V::load(yr + j * kVec), pd = V::load(dyr + j * kVec);
#pragma unroll
    for (int i = 0; i < kVec; ++i) dot = fmaf(to_float(py.v[i]), to_float(pd.v[i]), dot);
  }
  dot = block_reduce_sum(dot);  // every read of pass 1 is done before pass 2 writes (in-place)
  for (int j = threadIdx.x; j * kVec < a.k_len; j += stride) {
    const V py = V::load(yr + j * kVec), pd = V::load(dyr + j * kVec);
    V out;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      out.v[i] = from_float<T>(a.scale * (to_float(py.v[i]) * (to_float(pd.v[i]) - dot)));
    out.store(dxr + j * kVec);
  }
}

// ---------------------------------------------------------------------------------------------
// The unfused baseline. Pointers that may alias (in-place use) carry no __restrict__. The
// elementwise ops are eager::launch_map functors (kernels/eager_map.h: 16-byte vectors, one thread
// per vector, in place allowed); the row reductions are one block per row.

struct Scale {  // scale·x (also in place)
  float scale;
  __device__ float operator()(float x, float, std::int64_t, std::int64_t) const { return scale * x; }
};

struct MaskFill {  // masked_fill(z, -inf) in place; reads its input like any out-of-place op would
  RowMask mask;
  __device__ float operator()(float z, float, std::int64_t row, std::int64_t col) const {
    return col < mask.valid(row) ? z : -INFINITY;
  }
};

struct DivideBySum {  // y = e / sum; sum == 0 only for fully-masked rows
  const float* sum;
  __device__ float operator()(float e, float, std::int64_t row, std::int64_t) const {
    const float s = sum[row];
    return s == 0.0f ? 0.0f : e / s;
  }
};

struct Multiply {  // t = a·b
  __device__ float operator()(float a, float b, std::int64_t, std::int64_t) const { return a * b; }
};

struct SubtractDotTimesY {  // dx = y·(dy - dot)
  const float* dot;
  __device__ float operator()(float y, float dy, std::int64_t row, std::int64_t) const {
    return y * (dy - dot[row]);
  }
};

template <class T>
__global__ void unfused_row_max_kernel(float* __restrict__ mx, const T* __restrict__ z, int k_len) {
  const T* zr = z + static_cast<std::int64_t>(blockIdx.x) * k_len;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) m = max_propagate_nan(m, to_float(zr[j]));
  m = block_reduce_max(m);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

// e = exp(z - max) in place (stored in T) and the row sum of the stored values.
template <class T>
__global__ void unfused_exp_sum_kernel(T* __restrict__ z, float* __restrict__ sum,
                                       const float* __restrict__ mx, int k_len) {
  T* zr = z + static_cast<std::int64_t>(blockIdx.x) * k_len;
  const float m = mx[blockIdx.x];
  float s = 0.0f;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
    const T e = from_float<T>(m == -INFINITY ? 0.0f : expf(to_float(zr[j]) - m));
    zr[j] = e;
    s += to_float(e);
  }
  s = block_reduce_sum(s);
  if (threadIdx.x == 0) sum[blockIdx.x] = s;
}

template <class T>
__global__ void unfused_row_sum_kernel(float* __restrict__ out, const T* __restrict__ t, int k_len) {
  const T* tr = t + static_cast<std::int64_t>(blockIdx.x) * k_len;
  float s = 0.0f;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) s += to_float(tr[j]);
  s = block_reduce_sum(s);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// ---------------------------------------------------------------------------------------------
// Host side

int vector_width(DType dtype) {
  return kVectorBytes / static_cast<int>(dtype_size(dtype));
}

bool is_pow2(std::int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

int max_elems(SoftmaxPath path) {
  return path == SoftmaxPath::warp ? kSoftmaxMaxWarpElems : kSoftmaxMaxBlockElems;
}

std::size_t align_up(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

bool partially_overlap(const void* a, const void* b, std::size_t bytes) {
  return a != b && bytes_overlap(a, bytes, b, bytes);
}

void require_aligned(const char* what, const char* name, const void* ptr, std::size_t alignment) {
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0,
                   what << ": " << name << " (" << ptr << ") is not aligned to " << alignment << " bytes");
}

template <class T>
void require_tensor(const char* what, const char* name, const void* ptr) {
  SEQBENCH_REQUIRE(ptr != nullptr, what << ": " << name << " is null");
  require_aligned(what, name, ptr, alignof(T));
}

// Shape checks shared by every launcher; returns whether there is anything to compute.
bool require_shape(const char* what, const SoftmaxShape& s, float scale) {
  SEQBENCH_REQUIRE(s.batch >= 0 && s.heads >= 0 && s.q_len >= 0 && s.k_len >= 0,
                   what << ": shape [" << s.batch << ", " << s.heads << ", " << s.q_len << ", " << s.k_len
                        << "] has a negative extent");
  SEQBENCH_REQUIRE(s.k_len <= kSoftmaxMaxKLen,
                   what << ": k_len " << s.k_len << " exceeds " << kSoftmaxMaxKLen);
  // rows = batch·heads·q_len without overflowing int64 on the way.
  const auto fits = [](std::int64_t a, std::int64_t b) { return a == 0 || b <= kSoftmaxMaxRows / a; };
  SEQBENCH_REQUIRE(fits(s.batch, s.heads) && fits(s.batch * s.heads, s.q_len),
                   what << ": rows = batch*heads*q_len = " << s.batch << "*" << s.heads << "*" << s.q_len
                        << " exceeds " << kSoftmaxMaxRows);
  SEQBENCH_REQUIRE(std::isfinite(scale), what << ": scale " << scale << " must be finite");
  return s.rows() > 0 && s.k_len > 0;
}

template <class T>
bool validate_forward(const char* what, const T* y, const T* x, const SoftmaxShape& shape, float scale,
                      const SoftmaxMask& mask) {
  const bool work = require_shape(what, shape, scale);
  SEQBENCH_REQUIRE(
      mask.causal_offset >= -kSoftmaxMaxCausalOffset && mask.causal_offset <= kSoftmaxMaxCausalOffset,
      what << ": causal_offset " << mask.causal_offset << " outside [-" << kSoftmaxMaxCausalOffset << ", "
           << kSoftmaxMaxCausalOffset << "]");
  if (!work) return false;
  require_tensor<T>(what, "y", y);
  require_tensor<T>(what, "x", x);
  if (mask.key_lengths) require_aligned(what, "key_lengths", mask.key_lengths, alignof(std::int32_t));
  const std::size_t bytes =
      static_cast<std::size_t>(shape.rows()) * static_cast<std::size_t>(shape.k_len) * sizeof(T);
  SEQBENCH_REQUIRE(!partially_overlap(y, x, bytes),
                   what << ": y partially overlaps x (in-place needs y == x exactly)");
  return true;
}

template <class T>
bool validate_backward(const char* what, const T* dx, const T* dy, const T* y, const SoftmaxShape& shape,
                       float scale) {
  if (!require_shape(what, shape, scale)) return false;
  require_tensor<T>(what, "dx", dx);
  require_tensor<T>(what, "dy", dy);
  require_tensor<T>(what, "y", y);
  const std::size_t bytes =
      static_cast<std::size_t>(shape.rows()) * static_cast<std::size_t>(shape.k_len) * sizeof(T);
  SEQBENCH_REQUIRE(!partially_overlap(dx, dy, bytes), what << ": dx partially overlaps dy");
  SEQBENCH_REQUIRE(!partially_overlap(dx, y, bytes), what << ": dx partially overlaps y");
  return true;
}

RowMask row_mask(const SoftmaxShape& shape, const SoftmaxMask& mask) {
  RowMask m;
  m.rows_per_batch = shape.heads * shape.q_len;
  m.q_len = shape.q_len;
  m.k_len = static_cast<int>(shape.k_len);
  m.causal = mask.causal;
  m.causal_offset = mask.causal_offset;
  m.key_lengths = mask.key_lengths;
  return m;
}

// Calls launch.multipass<kVec>() or launch.registers<kVec, kItems, kWarpTeam>() for `config`.
template <class T, class Launch>
void dispatch(const SoftmaxConfig& config, Launch&& launch) {
  constexpr int kFull = Packed<T>::kSize;
  const auto by_vector = [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    switch (config.path) {
      case SoftmaxPath::multipass:
        launch.template multipass<kVec>();
        return;
      case SoftmaxPath::warp:
        dispatch_items<kVec, kSoftmaxMaxWarpElems>(config.items, "softmax", [&](auto items) {
          launch.template registers<kVec, decltype(items)::value, true>();
        });
        return;
      case SoftmaxPath::block:
        dispatch_items<kVec, kSoftmaxMaxBlockElems>(config.items, "softmax", [&](auto items) {
          launch.template registers<kVec, decltype(items)::value, false>();
        });
        return;
    }
  };
  if (config.vector == kFull)
    by_vector(std::integral_constant<int, kFull>{});
  else
    by_vector(std::integral_constant<int, 1>{});
}

unsigned register_grid(const SoftmaxConfig& c, std::int64_t rows) {
  const int per_block = c.path == SoftmaxPath::warp ? c.threads / kWarp : 1;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

template <class T>
struct ForwardLaunch {
  const SoftmaxConfig& config;
  const ForwardArgs<T>& args;
  cudaStream_t stream;
  template <int kVec>
  void multipass() const {
    softmax_forward_multipass_kernel<T, kVec>
        <<<static_cast<unsigned>(args.rows), config.threads, 0, stream>>>(args);
  }
  template <int kVec, int kItems, bool kWarpTeam>
  void registers() const {
    softmax_forward_kernel<T, kVec, kItems, kWarpTeam>
        <<<register_grid(config, args.rows), config.threads, 0, stream>>>(args);
  }
};

template <class T>
struct BackwardLaunch {
  const SoftmaxConfig& config;
  const BackwardArgs<T>& args;
  cudaStream_t stream;
  template <int kVec>
  void multipass() const {
    softmax_backward_multipass_kernel<T, kVec>
        <<<static_cast<unsigned>(args.rows), config.threads, 0, stream>>>(args);
  }
  template <int kVec, int kItems, bool kWarpTeam>
  void registers() const {
    softmax_backward_kernel<T, kVec, kItems, kWarpTeam>
        <<<register_grid(config, args.rows), config.threads, 0, stream>>>(args);
  }
};

// The launch itself, after validation and with a validated config.
template <class T>
void forward_with(T* y, const T* x, const SoftmaxShape& shape, float scale, const SoftmaxMask& mask,
                  cudaStream_t stream, const SoftmaxConfig& config) {
  const ForwardArgs<T> args{y, x, shape.rows(), row_mask(shape, mask), scale};
  dispatch<T>(config, ForwardLaunch<T>{config, args, stream});
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward_with(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale,
                   cudaStream_t stream, const SoftmaxConfig& config) {
  const BackwardArgs<T> args{dx, dy, y, shape.rows(), static_cast<int>(shape.k_len), scale};
  dispatch<T>(config, BackwardLaunch<T>{config, args, stream});
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

std::string json_config(const SoftmaxConfig& c) {
  std::ostringstream os;
  os << "{\"path\": \"" << softmax_path_name(c.path) << "\", \"threads\": " << c.threads
     << ", \"vector\": " << c.vector << ", \"items\": " << c.items << ", \"name\": \"" << c.to_string()
     << "\"}";
  return os.str();
}

int unfused_row_threads(std::int64_t k_len) {
  const std::int64_t t = (k_len + kWarp - 1) / kWarp * kWarp;
  return static_cast<int>(t < kUnfusedThreads ? t : kUnfusedThreads);
}

void require_workspace(const char* what, const void* workspace, std::size_t bytes, std::size_t needed) {
  if (needed == 0) return;
  SEQBENCH_REQUIRE(workspace != nullptr, what << ": workspace is null, " << needed << " bytes are needed");
  SEQBENCH_REQUIRE(bytes >= needed,
                   what << ": workspace has " << bytes << " bytes, " << needed << " are needed");
  require_aligned(what, "workspace", workspace, kUnfusedAlign);
}

std::size_t tensor_bytes(DType dtype, const SoftmaxShape& s) {
  return static_cast<std::size_t>(s.rows()) * static_cast<std::size_t>(s.k_len) * dtype_size(dtype);
}

// The unfused launchers write their intermediates (z, t, the row statistics) into the workspace
// while later kernels still read the tensors: a workspace on any of them changes the result.
void require_workspace_disjoint(const char* what, const void* workspace, std::size_t needed, const char* name,
                                const void* tensor, std::size_t tensor_bytes) {
  SEQBENCH_REQUIRE(tensor == nullptr || !bytes_overlap(workspace, needed, tensor, tensor_bytes),
                   what << ": workspace (its first " << needed << " bytes) overlaps " << name);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Configurations

const char* softmax_path_name(SoftmaxPath path) {
  switch (path) {
    case SoftmaxPath::warp:
      return "warp";
    case SoftmaxPath::block:
      return "block";
    case SoftmaxPath::multipass:
      return "multipass";
  }
  return "?";
}

std::int64_t SoftmaxConfig::capacity() const {
  switch (path) {
    case SoftmaxPath::warp:
      return static_cast<std::int64_t>(kWarp) * items * vector;
    case SoftmaxPath::block:
      return static_cast<std::int64_t>(threads) * items * vector;
    case SoftmaxPath::multipass:
      break;
  }
  return kSoftmaxMaxKLen;
}

std::string SoftmaxConfig::to_string() const {
  std::ostringstream os;
  os << softmax_path_name(path) << "/t" << threads << "/v" << vector << "/i" << items;
  return os.str();
}

std::int64_t softmax_k_len_bucket(std::int64_t k_len) {
  SEQBENCH_REQUIRE(k_len >= 0 && k_len <= kSoftmaxMaxKLen,
                   "softmax_k_len_bucket: k_len " << k_len << " outside [0, " << kSoftmaxMaxKLen << "]");
  std::int64_t b = 1;
  while (b < k_len) b *= 2;
  return b;
}

bool softmax_vectorizable(DType dtype, std::int64_t k_len, std::initializer_list<const void*> pointers) {
  if (k_len % vector_width(dtype) != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % kVectorBytes != 0) return false;
  return true;
}

SoftmaxConfig softmax_default_config(DType dtype, std::int64_t k_len, bool vectorizable) {
  const std::int64_t bucket = softmax_k_len_bucket(k_len);
  SoftmaxConfig c;
  c.vector = vectorizable && k_len % vector_width(dtype) == 0 ? vector_width(dtype) : 1;
  const std::int64_t vectors = (bucket + c.vector - 1) / c.vector;
  if (bucket <= kSoftmaxMaxWarpKLen) {
    c.path = SoftmaxPath::warp;
    c.threads = kDefaultWarpPathThreads;
    c.items = 1;
    while (static_cast<std::int64_t>(kWarp) * c.items < vectors) c.items *= 2;
    return c;
  }
  if (bucket <= kSoftmaxMaxBlockKLen) {
    c.path = SoftmaxPath::block;
    const int max_items = kSoftmaxMaxBlockElems / c.vector;
    c.items = 1;
    while (c.items < max_items && vectors / c.items > kPreferredBlockThreads) c.items *= 2;
    c.threads = static_cast<int>(vectors / c.items);  // a power of two in [64, 1024]
    return c;
  }
  c.path = SoftmaxPath::multipass;
  c.threads = kDefaultMultipassThreads;
  c.items = 0;
  return c;
}

std::vector<SoftmaxConfig> softmax_candidate_configs(DType dtype, std::int64_t k_len, bool vectorizable) {
  const std::int64_t bucket = softmax_k_len_bucket(k_len);
  const int vector = vectorizable && k_len % vector_width(dtype) == 0 ? vector_width(dtype) : 1;
  const std::int64_t vectors = (bucket + vector - 1) / vector;
  std::vector<SoftmaxConfig> out;
  if (bucket <= kSoftmaxMaxWarpKLen) {
    int items = 1;
    while (static_cast<std::int64_t>(kWarp) * items < vectors) items *= 2;
    for (const int threads : {kDefaultWarpPathThreads, kMaxWarpPathThreads})
      out.push_back({SoftmaxPath::warp, threads, vector, items});
  }
  // Block path: every power-of-two item count; threads = vectors / items, a power of two.
  for (int items = 1; items * vector <= kSoftmaxMaxBlockElems; items *= 2) {
    const std::int64_t threads = (vectors + items - 1) / items;
    if (threads < 2 * kWarp || threads > kMaxBlockThreads) continue;
    out.push_back({SoftmaxPath::block, static_cast<int>(threads), vector, items});
  }
  if (bucket > kSoftmaxMaxWarpKLen) {
    for (const int threads : {256, kDefaultMultipassThreads})
      out.push_back({SoftmaxPath::multipass, threads, vector, 0});
  }
  return out;
}

void validate_softmax_config(const SoftmaxConfig& c, DType dtype, std::int64_t k_len, bool vectorizable) {
  // An out-of-range path would pass the checks below (capacity() falls through) and launch nothing.
  SEQBENCH_REQUIRE(
      c.path == SoftmaxPath::warp || c.path == SoftmaxPath::block || c.path == SoftmaxPath::multipass,
      "softmax config: path " << static_cast<int>(c.path) << " is not warp (0), block (1) or multipass (2)");
  const int full = vector_width(dtype);
  SEQBENCH_REQUIRE(c.vector == 1 || c.vector == full,
                   "softmax config " << c.to_string() << ": vector " << c.vector << " must be 1 or " << full);
  SEQBENCH_REQUIRE(c.vector == 1 || (vectorizable && k_len % full == 0),
                   "softmax config " << c.to_string() << ": vector " << c.vector << " needs k_len % " << full
                                     << " == 0 and 16-byte aligned tensors (k_len " << k_len << ")");
  const int max_threads = c.path == SoftmaxPath::warp ? kMaxWarpPathThreads : kMaxBlockThreads;
  SEQBENCH_REQUIRE(c.threads >= kWarp && c.threads <= max_threads && c.threads % kWarp == 0,
                   "softmax config " << c.to_string() << ": threads " << c.threads
                                     << " must be a multiple of 32 in [32, " << max_threads << "]");
  if (c.path == SoftmaxPath::multipass) return;
  SEQBENCH_REQUIRE(is_pow2(c.items) && c.items * c.vector <= max_elems(c.path),
                   "softmax config " << c.to_string() << ": items " << c.items
                                     << " must be a power of two with items*vector <= " << max_elems(c.path));
  SEQBENCH_REQUIRE(c.capacity() >= k_len, "softmax config " << c.to_string() << " holds " << c.capacity()
                                                            << " elements per row, k_len is " << k_len);
}

// ---------------------------------------------------------------------------------------------
// Launchers

template <class T>
void launch_softmax_forward(T* y, const T* x, const SoftmaxShape& shape, float scale, const SoftmaxMask& mask,
                            cudaStream_t stream, const SoftmaxConfig* config) {
  SEQBENCH_NVTX_RANGE("softmax_fwd");
  constexpr DType kDType = DTypeTraits<T>::dtype;
  if (!validate_forward("softmax_forward", y, x, shape, scale, mask)) return;
  const bool vec = softmax_vectorizable(kDType, shape.k_len, {y, x});
  const SoftmaxConfig c = config ? *config : softmax_default_config(kDType, shape.k_len, vec);
  validate_softmax_config(c, kDType, shape.k_len, vec);
  forward_with(y, x, shape, scale, mask, stream, c);
}

template <class T>
void launch_softmax_backward(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale,
                             cudaStream_t stream, const SoftmaxConfig* config) {
  SEQBENCH_NVTX_RANGE("softmax_bwd");
  constexpr DType kDType = DTypeTraits<T>::dtype;
  if (!validate_backward("softmax_backward", dx, dy, y, shape, scale)) return;
  const bool vec = softmax_vectorizable(kDType, shape.k_len, {dx, dy, y});
  const SoftmaxConfig c = config ? *config : softmax_default_config(kDType, shape.k_len, vec);
  validate_softmax_config(c, kDType, shape.k_len, vec);
  backward_with(dx, dy, y, shape, scale, stream, c);
}

// ---------------------------------------------------------------------------------------------
// Tuner

SoftmaxTuner::SoftmaxTuner(int repetitions) : repetitions_(repetitions) {
  SEQBENCH_REQUIRE(repetitions >= 1 && repetitions <= 1000,
                   "SoftmaxTuner: repetitions " << repetitions << " must be in [1, 1000]");
}

namespace {

// Keeps the stream busy for `ns` nanoseconds of the global timer (one thread of one block): the
// tuner enqueues a candidate's timed launches behind it, so that the GPU reaches them only once
// they are all queued and the events around them measure the launches running back to back, not
// the host's launch rate (at small shapes a softmax lasts about as long as a launch costs the
// host, and every candidate would time alike).
__global__ void tuner_hold_kernel(unsigned long long ns) {
  spin_for_ns(ns);
}

// Rounds over all candidates: a candidate's time is the median of its rounds, so one disturbed
// measurement does not decide the choice.
constexpr int kTunerRounds = 3;
// The hold before a round's timed launches: more than the host needs to enqueue them (a launch
// with its argument checks costs the host a few microseconds).
constexpr unsigned long long kTunerHoldBaseNs = 50'000, kTunerHoldPerLaunchNs = 20'000;

// Times every candidate on the caller's stream: one warm-up launch each, then kTunerRounds rounds
// in which each candidate's `repetitions` launches are queued behind a hold kernel and timed
// between two events. Returns the entry with the fastest median as its choice.
template <class Run>
SoftmaxTuner::Entry tune(const std::vector<SoftmaxConfig>& candidates, const SoftmaxConfig& heuristic,
                         int repetitions, cudaStream_t stream, Run&& run) {
  SoftmaxTuner::Entry entry;
  entry.heuristic = heuristic;
  Event start, stop;
  for (const SoftmaxConfig& c : candidates) run(c);
  std::vector<std::vector<double>> rounds(candidates.size());
  const unsigned long long hold_ns =
      kTunerHoldBaseNs + kTunerHoldPerLaunchNs * static_cast<unsigned long long>(repetitions);
  for (int round = 0; round < kTunerRounds; ++round) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      tuner_hold_kernel<<<1, 1, 0, stream>>>(hold_ns);
      SEQBENCH_CUDA_CHECK_LAUNCH();
      start.record(stream);
      for (int r = 0; r < repetitions; ++r) run(candidates[i]);
      stop.record(stream);
      stop.synchronize();
      rounds[i].push_back(static_cast<double>(stop.elapsed_ms_since(start)) / repetitions);
    }
  }
  double best = INFINITY;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    std::sort(rounds[i].begin(), rounds[i].end());
    const double ms = rounds[i][rounds[i].size() / 2];
    entry.timings.push_back({candidates[i], ms});
    if (ms < best) {
      best = ms;
      entry.choice = candidates[i];
    }
  }
  return entry;
}

}  // namespace

template <class T>
void SoftmaxTuner::forward(T* y, const T* x, const SoftmaxShape& shape, float scale, const SoftmaxMask& mask,
                           cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("softmax_fwd_tuned");
  constexpr DType kDType = DTypeTraits<T>::dtype;
  if (!validate_forward("SoftmaxTuner::forward", y, x, shape, scale, mask)) return;
  const bool vec = softmax_vectorizable(kDType, shape.k_len, {y, x});
  const Key key{kDType, false, vec, softmax_k_len_bucket(shape.k_len)};
  SoftmaxConfig config;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      SEQBENCH_REQUIRE(
          static_cast<const void*>(y) != static_cast<const void*>(x),
          "SoftmaxTuner::forward: tuning writes y repeatedly, so it cannot run in place (y == x)");
      Entry e = tune(softmax_candidate_configs(kDType, shape.k_len, vec),
                     softmax_default_config(kDType, shape.k_len, vec), repetitions_, stream,
                     [&](const SoftmaxConfig& c) { forward_with(y, x, shape, scale, mask, stream, c); });
      e.rows = shape.rows();
      e.k_len = shape.k_len;
      it = cache_.emplace(key, std::move(e)).first;
    }
    config = it->second.choice;
  }
  validate_softmax_config(config, kDType, shape.k_len, vec);
  forward_with(y, x, shape, scale, mask, stream, config);
}

template <class T>
void SoftmaxTuner::backward(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale,
                            cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("softmax_bwd_tuned");
  constexpr DType kDType = DTypeTraits<T>::dtype;
  if (!validate_backward("SoftmaxTuner::backward", dx, dy, y, shape, scale)) return;
  const bool vec = softmax_vectorizable(kDType, shape.k_len, {dx, dy, y});
  const Key key{kDType, true, vec, softmax_k_len_bucket(shape.k_len)};
  SoftmaxConfig config;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      SEQBENCH_REQUIRE(static_cast<const void*>(dx) != static_cast<const void*>(dy) &&
                           static_cast<const void*>(dx) != static_cast<const void*>(y),
                       "SoftmaxTuner::backward: tuning writes dx repeatedly, so it cannot run in place");
      Entry e = tune(softmax_candidate_configs(kDType, shape.k_len, vec),
                     softmax_default_config(kDType, shape.k_len, vec), repetitions_, stream,
                     [&](const SoftmaxConfig& c) { backward_with(dx, dy, y, shape, scale, stream, c); });
      e.rows = shape.rows();
      e.k_len = shape.k_len;
      it = cache_.emplace(key, std::move(e)).first;
    }
    config = it->second.choice;
  }
  validate_softmax_config(config, kDType, shape.k_len, vec);
  backward_with(dx, dy, y, shape, scale, stream, config);
}

const SoftmaxTuner::Entry* SoftmaxTuner::find(const Key& key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : &it->second;
}

std::size_t SoftmaxTuner::size() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

std::string SoftmaxTuner::to_json() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  os << "{\"repetitions\": " << repetitions_ << ", \"entries\": [";
  bool first = true;
  for (const auto& [key, e] : cache_) {
    os << (first ? "" : ", ") << "{\"dtype\": \"" << dtype_name(key.dtype) << "\", \"direction\": \""
       << (key.backward ? "backward" : "forward")
       << "\", \"vectorized\": " << (key.vectorized ? "true" : "false")
       << ", \"k_len_bucket\": " << key.bucket << ", \"tuned_on\": {\"rows\": " << e.rows
       << ", \"k_len\": " << e.k_len << "}, \"choice\": " << json_config(e.choice)
       << ", \"heuristic\": " << json_config(e.heuristic) << ", \"timings_ms\": [";
    for (std::size_t i = 0; i < e.timings.size(); ++i)
      os << (i ? ", " : "") << "{\"config\": \"" << e.timings[i].config.to_string()
         << "\", \"ms\": " << e.timings[i].ms << "}";
    os << "]}";
    first = false;
  }
  os << "]}";
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// The unfused baseline

namespace {
struct UnfusedForwardLayout {
  std::size_t z = 0, max = 0, sum = 0, total = 0;
};
UnfusedForwardLayout unfused_forward_layout(DType dtype, const SoftmaxShape& s) {
  UnfusedForwardLayout l;
  const auto rows = static_cast<std::size_t>(s.rows());
  l.max = align_up(tensor_bytes(dtype, s), kUnfusedAlign);
  l.sum = l.max + align_up(rows * sizeof(float), kUnfusedAlign);
  l.total = rows == 0 || s.k_len == 0 ? 0 : l.sum + align_up(rows * sizeof(float), kUnfusedAlign);
  return l;
}
}  // namespace

std::size_t softmax_unfused_forward_workspace_bytes(DType dtype, const SoftmaxShape& shape) {
  require_shape("softmax_unfused_forward_workspace_bytes", shape, 1.0f);
  return unfused_forward_layout(dtype, shape).total;
}

std::size_t softmax_unfused_backward_workspace_bytes(DType dtype, const SoftmaxShape& shape) {
  if (!require_shape("softmax_unfused_backward_workspace_bytes", shape, 1.0f)) return 0;
  return align_up(tensor_bytes(dtype, shape), kUnfusedAlign) +
         align_up(static_cast<std::size_t>(shape.rows()) * sizeof(float), kUnfusedAlign);
}

template <class T>
void launch_softmax_forward_unfused(T* y, const T* x, const SoftmaxShape& shape, float scale,
                                    const SoftmaxMask& mask, void* workspace, std::size_t workspace_bytes,
                                    cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("softmax_fwd_unfused");
  constexpr const char* kWhat = "softmax_forward_unfused";
  if (!validate_forward(kWhat, y, x, shape, scale, mask)) return;
  const UnfusedForwardLayout l = unfused_forward_layout(DTypeTraits<T>::dtype, shape);
  require_workspace(kWhat, workspace, workspace_bytes, l.total);
  const std::size_t bytes = tensor_bytes(DTypeTraits<T>::dtype, shape);
  require_workspace_disjoint(kWhat, workspace, l.total, "x", x, bytes);
  require_workspace_disjoint(kWhat, workspace, l.total, "y", y, bytes);
  require_workspace_disjoint(kWhat, workspace, l.total, "key_lengths", mask.key_lengths,
                             static_cast<std::size_t>(shape.batch) * sizeof(std::int32_t));
  auto* base = static_cast<unsigned char*>(workspace);
  T* z = reinterpret_cast<T*>(base + l.z);
  auto* mx = reinterpret_cast<float*>(base + l.max);
  auto* sum = reinterpret_cast<float*>(base + l.sum);
  const std::int64_t rows = shape.rows(), n = rows * shape.k_len;
  const int k_len = static_cast<int>(shape.k_len);
  const int row_threads = unfused_row_threads(shape.k_len);
  eager::launch_map<T, 1>(kWhat, z, x, nullptr, n, k_len, Scale{scale}, stream);
  if (mask.causal || mask.key_lengths)
    eager::launch_map<T, 1>(kWhat, z, z, nullptr, n, k_len, MaskFill{row_mask(shape, mask)}, stream);
  unfused_row_max_kernel<T><<<static_cast<unsigned>(rows), row_threads, 0, stream>>>(mx, z, k_len);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  unfused_exp_sum_kernel<T><<<static_cast<unsigned>(rows), row_threads, 0, stream>>>(z, sum, mx, k_len);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  eager::launch_map<T, 1>(kWhat, y, z, nullptr, n, k_len, DivideBySum{sum}, stream);
}

template <class T>
void launch_softmax_backward_unfused(T* dx, const T* dy, const T* y, const SoftmaxShape& shape, float scale,
                                     void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("softmax_bwd_unfused");
  constexpr const char* kWhat = "softmax_backward_unfused";
  if (!validate_backward(kWhat, dx, dy, y, shape, scale)) return;
  const std::size_t needed = softmax_unfused_backward_workspace_bytes(DTypeTraits<T>::dtype, shape);
  require_workspace(kWhat, workspace, workspace_bytes, needed);
  const std::size_t bytes = tensor_bytes(DTypeTraits<T>::dtype, shape);
  require_workspace_disjoint(kWhat, workspace, needed, "dx", dx, bytes);
  require_workspace_disjoint(kWhat, workspace, needed, "dy", dy, bytes);
  require_workspace_disjoint(kWhat, workspace, needed, "y", y, bytes);
  auto* base = static_cast<unsigned char*>(workspace);
  T* t = reinterpret_cast<T*>(base);
  auto* dot =
      reinterpret_cast<float*>(base + align_up(tensor_bytes(DTypeTraits<T>::dtype, shape), kUnfusedAlign));
  const std::int64_t rows = shape.rows(), n = rows * shape.k_len;
  const int k_len = static_cast<int>(shape.k_len);
  eager::launch_map<T, 2>(kWhat, t, dy, y, n, k_len, Multiply{}, stream);
  unfused_row_sum_kernel<T>
      <<<static_cast<unsigned>(rows), unfused_row_threads(shape.k_len), 0, stream>>>(dot, t, k_len);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  eager::launch_map<T, 2>(kWhat, dx, y, dy, n, k_len, SubtractDotTimesY{dot}, stream);
  eager::launch_map<T, 1>(kWhat, dx, dx, nullptr, n, k_len, Scale{scale}, stream);
}

// ---------------------------------------------------------------------------------------------
// Explicit instantiations: the one place the three element types are named.

#define SEQBENCH_SOFTMAX_INSTANTIATE(T)                                                                      \
  template void launch_softmax_forward<T>(T*, const T*, const SoftmaxShape&, float, const SoftmaxMask&,      \
                                          cudaStream_t, const SoftmaxConfig*);                               \
  template void launch_softmax_backward<T>(T*, const T*, const T*, const SoftmaxShape&, float, cudaStream_t, \
                                           const SoftmaxConfig*);                                            \
  template void SoftmaxTuner::forward<T>(T*, const T*, const SoftmaxShape&, float, const SoftmaxMask&,       \
                                         cudaStream_t);                                                      \
  template void SoftmaxTuner::backward<T>(T*, const T*, const T*, const SoftmaxShape&, float, cudaStream_t); \
  template void launch_softmax_forward_unfused<T>(T*, const T*, const SoftmaxShape&, float,                  \
                                                  const SoftmaxMask&, void*, std::size_t, cudaStream_t);     \
  template void launch_softmax_backward_unfused<T>(T*, const T*, const T*, const SoftmaxShape&, float,       \
                                                   void*, std::size_t, cudaStream_t);

SEQBENCH_SOFTMAX_INSTANTIATE(float)
SEQBENCH_SOFTMAX_INSTANTIATE(__half)
SEQBENCH_SOFTMAX_INSTANTIATE(__nv_bfloat16)

#undef SEQBENCH_SOFTMAX_INSTANTIATE

}  // namespace seqbench::kernels
