#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/packed.h"
#include "trainer/convert.h"
#include "trainer/grid.h"

namespace seqbench::trainer {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

// Elements per vector: 16 bytes of the wider of the two types.
template <class Dst, class Src>
inline constexpr int kConvertVector = kernels::kVectorBytes /
                                      static_cast<int>(sizeof(Dst) > sizeof(Src) ? sizeof(Dst) : sizeof(Src));

template <class Dst, class Src>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, std::size_t count, bool vectorized,
                   const StepControl* __restrict__ control, ConvertScaling scaling) {
  float multiplier = 1.0f;
  if (scaling != ConvertScaling::none) {
    if (control->found_inf) return;  // the same word for every thread: the whole grid returns
    if (scaling == ConvertScaling::unscale) multiplier = control->grad_multiplier;
  }
  constexpr int V = kConvertVector<Dst, Src>;
  using SrcPack = kernels::Packed<Src, V>;
  using DstPack = kernels::Packed<Dst, V>;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t vectors = vectorized ? count / V : 0;
  for (std::size_t v = first; v < vectors; v += stride) {
    const SrcPack in = SrcPack::load(src + v * V);
    DstPack out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = from_float<Dst>(rn::mul(to_float<Src>(in.v[k]), multiplier));
    out.store(dst + v * V);
  }
  for (std::size_t i = vectors * V + first; i < count; i += stride)
    dst[i] = from_float<Dst>(rn::mul(to_float<Src>(src[i]), multiplier));
}

template <class Dst, class Src>
void launch_typed(Dst* dst, const Src* src, std::size_t count, const StepControl* control,
                  ConvertScaling scaling, cudaStream_t stream) {
  constexpr int V = kConvertVector<Dst, Src>;
  const bool vectorized = kernels::is_vector_aligned(dst) && kernels::is_vector_aligned(src);
  const std::size_t items = vectorized ? count / V + count % V : count;
  convert_kernel<Dst, Src><<<grid_stride_blocks(items, kThreads, kBlocksPerSm), kThreads, 0, stream>>>(
      dst, src, count, vectorized, control, scaling);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count,
                    const StepControl* control, ConvertScaling scaling, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("trainer_convert");
  if (count == 0) return;
  SEQBENCH_REQUIRE(dst != nullptr && src != nullptr, "convert: null pointer (dst " << dst << ", src " << src
                                                                                   << ") for " << count
                                                                                   << " elements");
  SEQBENCH_REQUIRE(scaling == ConvertScaling::none || control != nullptr,
                   "convert: scaling other than none needs the device StepControl, got null");
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  // The kernels access whole elements (a misaligned one faults on the device).
  SEQBENCH_REQUIRE(d % dtype_size(dst_dtype) == 0, "convert: dst " << dst << " is not aligned to its "
                                                                   << dtype_size(dst_dtype) << "-byte "
                                                                   << dtype_name(dst_dtype) << " elements");
  SEQBENCH_REQUIRE(s % dtype_size(src_dtype) == 0, "convert: src " << src << " is not aligned to its "
                                                                   << dtype_size(src_dtype) << "-byte "
                                                                   << dtype_name(src_dtype) << " elements");
  const std::size_t dst_bytes = count * dtype_size(dst_dtype), src_bytes = count * dtype_size(src_dtype);
  SEQBENCH_REQUIRE(d + dst_bytes <= s || s + src_bytes <= d,
                   "convert: destination [" << dst << ", +" << dst_bytes << ") overlaps source [" << src
                                            << ", +" << src_bytes << ")");
  dispatch_dtype(dst_dtype, [&](auto dst_tag) {
    using Dst = decltype(dst_tag);
    dispatch_dtype(src_dtype, [&](auto src_tag) {
      using Src = decltype(src_tag);
      launch_typed(static_cast<Dst*>(dst), static_cast<const Src*>(src), count, control, scaling, stream);
    });
  });
}

}  // namespace seqbench::trainer
