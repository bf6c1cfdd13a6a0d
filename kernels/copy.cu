#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/copy.h"

namespace seqbench::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 4;

// Moves `vectors` 16-byte vectors, then the `tail` bytes after them. Both pointers are 16-byte
// aligned at `dst`/`src` (the launcher peels the unaligned head).
__global__ void copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, std::size_t vectors,
                            unsigned char* __restrict__ tail_dst, const unsigned char* __restrict__ tail_src,
                            std::size_t tail) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = first; i < vectors; i += stride) dst[i] = src[i];
  if (first < tail) tail_dst[first] = tail_src[first];  // tail < 16 <= threads in the grid
}

int grid_size() {
  int device = 0, sms = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms * kBlocksPerSm;
}

}  // namespace

void launch_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("copy");
  if (bytes == 0) return;
  SEQBENCH_REQUIRE(dst != nullptr && src != nullptr, "copy: null pointer for " << bytes << " bytes");
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  SEQBENCH_REQUIRE(d + bytes <= s || s + bytes <= d, "copy: source and destination overlap");

  // Vectorize only when both pointers share their alignment modulo 16; otherwise the bytewise
  // path below is what any copy would do.
  std::size_t head = (16 - d % 16) % 16;
  if (d % 16 != s % 16) head = bytes;
  head = head < bytes ? head : bytes;
  if (head > 0) {
    SEQBENCH_CUDA_CHECK(cudaMemcpyAsync(dst, src, head, cudaMemcpyDeviceToDevice, stream));
  }
  const std::size_t rest = bytes - head;
  const std::size_t vectors = rest / 16;
  const std::size_t tail = rest % 16;
  if (vectors == 0 && tail == 0) return;
  auto* vdst = reinterpret_cast<uint4*>(static_cast<unsigned char*>(dst) + head);
  auto* vsrc = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(src) + head);
  copy_kernel<<<grid_size(), kThreads, 0, stream>>>(
      vdst, vsrc, vectors, reinterpret_cast<unsigned char*>(vdst + vectors),
      reinterpret_cast<const unsigned char*>(vsrc + vectors), tail);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace seqbench::kernels
