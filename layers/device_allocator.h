// Device allocation behind one small interface, so that every allocation the layers make can be
// counted: the managed layers allocate their planned block once and then nothing in steady-state
// steps, and CountingAllocator is how a test or a suite proves it (allocations before the loop ==
// allocations after it). The eager-like baseline routes its caching allocator through the same
// interface, so both sides are counted the same way.
//
// Kept apart from the memory planner (which is pure host logic) because it is the one place that
// talks to the CUDA runtime; CountingAllocator is tested on the CPU with a fake backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace seqbench::layers {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Returns `bytes` of device memory aligned to at least 256 bytes (cudaMalloc's guarantee), or
  // nullptr for 0 bytes. Throws seqbench::Error naming the size on failure.
  virtual void* allocate(std::size_t bytes) = 0;
  // Frees what allocate() returned; nullptr is a no-op. Never throws (destructors call it).
  virtual void deallocate(void* ptr) noexcept = 0;
};

// cudaMalloc / cudaFree. Each call is a real device allocation: set-up paths only.
class CudaAllocator final : public DeviceAllocator {
 public:
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr) noexcept override;
};

struct AllocationStats {
  std::uint64_t allocations = 0;    // successful allocate() calls with bytes > 0
  std::uint64_t deallocations = 0;  // deallocate() calls on a pointer this allocator handed out
  std::uint64_t failed = 0;         // allocate() calls the backend refused (threw or gave nullptr)
  std::uint64_t unknown_frees = 0;  // deallocate() of a pointer this allocator never handed out
  std::size_t bytes_allocated = 0;  // total over all allocations, freed or not
  std::size_t live_bytes = 0;       // allocated and not yet freed
  std::size_t peak_live_bytes = 0;  // the highest live_bytes reached
};

// Forwards to a backend and counts. Zero-byte requests return nullptr without reaching the
// backend and count as nothing: nothing was allocated. Thread-safe.
class CountingAllocator final : public DeviceAllocator {
 public:
  explicit CountingAllocator(DeviceAllocator& backend) : backend_(backend) {}
  CountingAllocator(const CountingAllocator&) = delete;
  CountingAllocator& operator=(const CountingAllocator&) = delete;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr) noexcept override;

  AllocationStats stats() const;

 private:
  DeviceAllocator& backend_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::size_t> live_;
  AllocationStats stats_;
};

}  // namespace seqbench::layers
