// CachingAllocator: the eager-like baseline's device allocator, modelled on PyTorch's
// CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) in the respects that decide memory
// use and allocation counts:
//
//   - Sizes round up to a size class: requests up to kSmallRequest (1 MiB) to a multiple of
//     kSmallRound (512 B, PyTorch's kMinBlockSize), larger ones to a multiple of kLargeRound
//     (2 MiB, PyTorch's kLargeBuffer granularity for large segments).
//   - A freed block goes to its size class's free list and is handed out again to the next
//     request of that class, without reaching the device. Only a request whose class has no free
//     block reaches the backend (a real device allocation).
//   - Memory is never returned to the device before the allocator is destroyed (PyTorch keeps its
//     cache until empty_cache(), which eager training loops do not call).
//
// Simplifications (each makes the baseline cheaper in memory or allocations, never dearer than
// the exact-class policy): no block splitting or coalescing (a block serves only its own class,
// so a step whose shapes all appeared before allocates nothing, as in PyTorch's steady state);
// one stream (a block freed on the host is reused by later work on the same stream, which stream
// order makes safe: the layers run everything on the caller's one stream).
//
// Statistics, in PyTorch's terms: allocated bytes (the rounded sizes of the blocks handed out and
// not freed: torch.cuda.memory_allocated) and their peak (max_memory_allocated), reserved bytes
// (everything obtained from the backend: memory_reserved) and its peak, and the backend calls
// themselves. Wrap the backend in a CountingAllocator to count them the way the managed layers
// are counted (layers/device_allocator.h).
//
// Host-side bookkeeping only; thread-safe (one mutex). A pointer freed twice, or never handed
// out, is counted (invalid_frees) and otherwise ignored: a cached block is never listed twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "layers/device_allocator.h"

namespace seqbench::layers {

struct CachingAllocatorStats {
  std::uint64_t requests = 0;            // allocate() calls with bytes > 0
  std::uint64_t cache_hits = 0;          // requests served from a free list
  std::uint64_t device_allocations = 0;  // requests that reached the backend
  std::uint64_t frees = 0;               // deallocate() of a block in use
  std::uint64_t invalid_frees = 0;       // deallocate() of a pointer not in use (double or foreign)
  std::size_t allocated_bytes = 0;       // rounded bytes of the blocks in use
  std::size_t peak_allocated_bytes = 0;
  std::size_t reserved_bytes = 0;  // bytes obtained from the backend (in use + cached)
  std::size_t peak_reserved_bytes = 0;
};

class CachingAllocator final : public DeviceAllocator {
 public:
  static constexpr std::size_t kSmallRound = 512;
  static constexpr std::size_t kSmallRequest = std::size_t{1} << 20;
  static constexpr std::size_t kLargeRound = std::size_t{2} << 20;

  // `backend` must outlive the allocator; every block goes back to it at destruction.
  explicit CachingAllocator(DeviceAllocator& backend) : backend_(backend) {}
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The size class of a request: 0 for 0; otherwise rounded up as above. Throws seqbench::Error
  // naming the size when rounding would overflow.
  static std::size_t round_size(std::size_t bytes);

  // A block of round_size(bytes) bytes (aligned as the backend's), or nullptr for 0 bytes.
  void* allocate(std::size_t bytes) override;
  // Returns the block to its free list; nullptr is a no-op.
  void deallocate(void* ptr) noexcept override;

  CachingAllocatorStats stats() const;
  // Starts a new peak window: the peaks become the current values (torch.cuda.reset_peak_memory_stats).
  void reset_peaks();
  // Blocks cached in free lists now.
  std::size_t cached_blocks() const;

 private:
  DeviceAllocator& backend_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> in_use_;   // block -> size class
  std::map<std::size_t, std::vector<void*>> free_;  // size class -> cached blocks
  CachingAllocatorStats stats_;
};

}  // namespace seqbench::layers
