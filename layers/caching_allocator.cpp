#include "layers/caching_allocator.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace seqbench::layers {

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) return 0;
  const std::size_t unit = bytes <= kSmallRequest ? kSmallRound : kLargeRound;
  SEQBENCH_REQUIRE(
      bytes <= std::numeric_limits<std::size_t>::max() - (unit - 1),
      "CachingAllocator: a request of " << bytes << " bytes cannot be rounded up to a multiple of " << unit);
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::~CachingAllocator() {
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) backend_.deallocate(p);
  // Blocks still in use at destruction belong to nobody any more: give them back too.
  for (auto& [p, size] : in_use_) backend_.deallocate(p);
}

void* CachingAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t size = round_size(bytes);
  const std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.requests;
  void* p = nullptr;
  const auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    ++stats_.cache_hits;
  } else {
    p = backend_.allocate(size);  // throws on failure; nothing has changed yet
    SEQBENCH_REQUIRE(p != nullptr, "CachingAllocator: the backend returned nullptr for " << size << " bytes");
    ++stats_.device_allocations;
    stats_.reserved_bytes += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  in_use_[p] = size;
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return p;
}

void CachingAllocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    ++stats_.invalid_frees;
    return;
  }
  const std::size_t size = it->second;
  in_use_.erase(it);
  stats_.allocated_bytes -= size;
  ++stats_.frees;
  try {
    free_[size].push_back(ptr);
  } catch (...) {
    // No memory for the free-list entry: return the block to the device instead of losing it.
    stats_.reserved_bytes -= size;
    backend_.deallocate(ptr);
  }
}

CachingAllocatorStats CachingAllocator::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peaks() {
  const std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::size_t CachingAllocator::cached_blocks() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& [size, blocks] : free_) n += blocks.size();
  return n;
}

}  // namespace seqbench::layers
