// Host-memory stand-ins for a DeviceAllocator, for the layer tests that run without a GPU:
// HostBackend serves a layer's planned block from host memory (the layer only hands its
// addresses to kernels, which these tests never reach); RecordingBackend also counts the calls
// that reach it, remembers what is live, and can be told to fail, so that a test can see exactly
// what an allocator in front of it passes on.
#pragma once

#include <cstddef>
#include <new>
#include <set>

#include "core/error.h"
#include "layers/device_allocator.h"

namespace seqbench::layers::layer_test {

// Host memory in place of the device, 256-byte aligned as cudaMalloc's.
class HostBackend final : public DeviceAllocator {
 public:
  void* allocate(std::size_t bytes) override { return ::operator new (bytes, std::align_val_t{256}); }
  void deallocate(void* ptr) noexcept override {
    if (ptr != nullptr) ::operator delete (ptr, std::align_val_t{256});
  }
};

// Host memory in place of the device; counts allocate() (calls) and deallocate() (frees) and
// remembers what is live, so that a foreign or double free is seen and never reaches the heap.
// fail_next: the next allocate() throws a seqbench::Error (once); return_null: allocate()
// returns null (both still count the call).
class RecordingBackend final : public DeviceAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    ++calls;
    if (fail_next) {
      fail_next = false;
      SEQBENCH_FAIL("fake backend: out of memory for " << bytes << " bytes");
    }
    if (return_null) return nullptr;
    void* p = ::operator new (bytes, std::align_val_t{256});
    live.insert(p);
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    ++frees;
    if (live.erase(ptr)) ::operator delete (ptr, std::align_val_t{256});
  }
  int calls = 0;
  int frees = 0;
  bool fail_next = false;
  bool return_null = false;
  std::set<void*> live;
};

}  // namespace seqbench::layers::layer_test
