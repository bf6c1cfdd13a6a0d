// The unfused baselines' elementwise ops, in the shape of PyTorch eager's vectorized elementwise
// kernel: one op per kernel, intermediates in T, and each thread moving 16-byte vectors. An unfused
// baseline with one scalar element per thread would keep too few bytes in flight to approach an
// H100's copy bandwidth, and would make the fused kernels' speed-ups look larger than they are
// against the eager code they stand for.
//
//   out[i] = fn(in0[i], in1[i], row, col)  for i in [0, n), row = i / row_len, col = i % row_len
//
// in T, computed in float (in1 reads as 0 when kInputs == 1). Thread mapping: thread v of the grid
// takes the K = Packed<T>::kSize elements [v·K, v·K + K) ∩ [0, n); when out, in0 and in1 are
// 16-byte aligned and all K are there it moves them with one 16-byte load per input and one
// 16-byte store, otherwise element by element. The row of its first element is one division; the
// rest step the column. fn is called only for elements in [0, n), so it may read per-row or
// per-column parameters without a guard. out may equal in0 or in1 (in place): a thread reads all
// its elements before it writes any, and no other thread touches them.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/packed.h"

namespace seqbench::kernels::eager {

template <class T>
struct MapArgs {
  T* out;
  const T* in0;
  const T* in1;  // null when kInputs == 1
  std::int64_t n;
  std::int64_t row_len;  // >= 1
  bool vector;           // every pointer 16-byte aligned
};

// Thread v's elements (host-and-device, so that CPU tests run the very code a thread runs).
template <class T, int kInputs, class Fn>
SEQBENCH_HD inline void map_vector(const MapArgs<T>& a, const Fn& fn, std::int64_t v) {
  constexpr int K = Packed<T>::kSize;
  const std::int64_t i0 = v * K;
  if (i0 >= a.n) return;
  const int count = a.n - i0 < K ? static_cast<int>(a.n - i0) : K;
  const bool whole = a.vector && count == K;
  float x0[K], x1[K];
  load_floats<T, K>(a.in0 + i0, x0, count, whole);
  if constexpr (kInputs == 2) {
    load_floats<T, K>(a.in1 + i0, x1, count, whole);
  } else {
    SEQBENCH_DEVICE_UNROLL
    for (int k = 0; k < K; ++k) x1[k] = 0.0f;
  }
  std::int64_t row = i0 / a.row_len;
  std::int64_t col = i0 - row * a.row_len;
  float out[K];
  SEQBENCH_DEVICE_UNROLL
  for (int k = 0; k < K; ++k) {
    out[k] = k < count ? fn(x0[k], x1[k], row, col) : 0.0f;
    if (++col == a.row_len) {
      col = 0;
      ++row;
    }
  }
  store_floats<T, K>(a.out + i0, out, count, whole);
}

}  // namespace seqbench::kernels::eager

#if defined(__CUDACC__)

#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "core/error.h"

namespace seqbench::kernels::eager {

inline constexpr int kMapThreads = 256;

template <class T, int kInputs, class Fn>
__global__ void __launch_bounds__(kMapThreads) map_kernel(const MapArgs<T> a, const Fn fn) {
  map_vector<T, kInputs>(a, fn, static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
}

// Launches out[i] = fn(in0[i], in1[i], i / row_len, i % row_len) over n >= 0 elements (nothing
// when n = 0); `what` names the op in the grid-limit error.
template <class T, int kInputs, class Fn>
void launch_map(const char* what, T* out, const T* in0, const T* in1, std::int64_t n, std::int64_t row_len,
                const Fn& fn, cudaStream_t stream) {
  static_assert(kInputs == 1 || kInputs == 2);
  if (n <= 0) return;
  SEQBENCH_REQUIRE(row_len >= 1, what << ": row length " << row_len << " must be >= 1");
  constexpr std::int64_t K = Packed<T>::kSize;
  const std::int64_t blocks = ((n + K - 1) / K + kMapThreads - 1) / kMapThreads;
  SEQBENCH_REQUIRE(blocks <= 0x7fffffff, what << ": " << n << " elements need " << blocks
                                              << " blocks, more than the grid limit 2147483647");
  const MapArgs<T> a{
      out,     in0,
      in1,     n,
      row_len, is_vector_aligned(out) && is_vector_aligned(in0) && (kInputs == 1 || is_vector_aligned(in1))};
  map_kernel<T, kInputs, Fn><<<static_cast<unsigned>(blocks), kMapThreads, 0, stream>>>(a, fn);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace seqbench::kernels::eager

#endif  // __CUDACC__
