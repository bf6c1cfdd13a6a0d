#include "layers/device_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/error.h"

namespace seqbench::layers {

void* CudaAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it, or the next launch check would report this failure again
    SEQBENCH_FAIL("cudaMalloc of " << bytes << " bytes failed: " << cudaGetErrorName(status) << " ("
                                   << cudaGetErrorString(status) << ")");
  }
  return ptr;
}

void CudaAllocator::deallocate(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);  // nothing useful to do with an error on a free path
}

void* CountingAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  try {
    ptr = backend_.allocate(bytes);
  } catch (...) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.failed;
    throw;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!ptr) {
    ++stats_.failed;
    SEQBENCH_FAIL("the backend allocator returned nullptr for " << bytes << " bytes");
  }
  live_[ptr] = bytes;
  ++stats_.allocations;
  stats_.bytes_allocated += bytes;
  stats_.live_bytes += bytes;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return ptr;
}

void CountingAllocator::deallocate(void* ptr) noexcept {
  if (!ptr) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) {
      // Not ours: do not pass it on (the backend would free memory someone else owns), but make
      // the mistake visible to the test that reads the stats.
      ++stats_.unknown_frees;
      return;
    }
    stats_.live_bytes -= it->second;
    ++stats_.deallocations;
    live_.erase(it);
  }
  backend_.deallocate(ptr);
}

AllocationStats CountingAllocator::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace seqbench::layers
