// A DeviceAllocator decorator for the GPU layer tests: every block it hands out is filled with
// one byte (0xFF gives NaN in all three float formats) before the layer sees it, so a kernel that
// reads a temporary's element no op wrote (an unwritten tail, a padded row) reads NaN or a marker
// the two sides of a bitwise comparison do not share, instead of cudaMalloc's leftovers or zeros,
// and fails the test.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/cuda_check.h"
#include "layers/device_allocator.h"

namespace seqbench::layers {

class PoisoningAllocator final : public DeviceAllocator {
 public:
  PoisoningAllocator(DeviceAllocator& inner, unsigned char byte) : inner_(inner), byte_(byte) {}

  void* allocate(std::size_t bytes) override {
    void* p = inner_.allocate(bytes);
    // The legacy default stream: ordered before the tests' blocking streams' later work.
    if (p != nullptr) SEQBENCH_CUDA_CHECK(cudaMemset(p, byte_, bytes));
    return p;
  }
  void deallocate(void* ptr) noexcept override { inner_.deallocate(ptr); }

 private:
  DeviceAllocator& inner_;
  unsigned char byte_;
};

}  // namespace seqbench::layers
