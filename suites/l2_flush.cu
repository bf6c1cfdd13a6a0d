#include <cstdint>

#include "core/cuda_check.h"
#include "core/error.h"
#include "suites/l2_flush.h"

namespace seqbench {
namespace {

// Never the XOR of a zeroed buffer's vectors (0): the store is dead at run time but not to the
// compiler.
constexpr unsigned int kNeverXor = 0x9E3779B9u;

__global__ void l2_flush_read_kernel(const uint4* __restrict__ buffer, std::size_t vectors,
                                     unsigned int* __restrict__ sink) {
  unsigned int x = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride) {
    const uint4 v = buffer[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == kNeverXor) *sink = x;
}

}  // namespace

void launch_l2_flush_read(const void* buffer, std::size_t bytes, unsigned int* sink, cudaStream_t stream) {
  SEQBENCH_REQUIRE(buffer != nullptr && sink != nullptr, "launch_l2_flush_read: null buffer or sink");
  SEQBENCH_REQUIRE(bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(buffer) % 16 == 0,
                   "launch_l2_flush_read: buffer ("
                       << buffer << ", " << bytes << " bytes) must be 16-byte aligned and a multiple of 16");
  if (bytes == 0) return;
  int device = 0, sms = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  constexpr int kThreads = 256;
  const std::size_t vectors = bytes / 16;
  const std::size_t wanted = (vectors + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < static_cast<std::size_t>(sms) * 8 ? wanted : sms * 8);
  l2_flush_read_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint4*>(buffer), vectors, sink);
  SEQBENCH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace seqbench
