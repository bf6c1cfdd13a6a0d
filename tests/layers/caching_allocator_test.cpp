// CachingAllocator on a fake backend: size classes, reuse without device allocations, the
// PyTorch-style allocated/reserved peaks, and that a double or foreign free never lists a block
// twice.
#include "layers/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "layers/device_allocator.h"
#include "tests/layers/fake_allocators.h"

namespace seqbench::layers {
namespace {

using FakeBackend = layer_test::RecordingBackend;

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(CachingAllocator, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 0u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), kMiB);          // the largest small request
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), 2 * kMiB);  // large: 2 MiB granules
  EXPECT_EQ(CachingAllocator::round_size(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(2 * kMiB + 1), 4 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(100 * kMiB + 3), 102 * kMiB);
  EXPECT_THROW(CachingAllocator::round_size(SIZE_MAX), std::exception);
}

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameClass) {
  FakeBackend backend;
  {
    CachingAllocator cache(backend);
    EXPECT_EQ(cache.allocate(0), nullptr);
    void* a = cache.allocate(1000);  // class 1024
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(backend.calls, 1);
    cache.deallocate(a);
    void* b = cache.allocate(600);  // also class 1024: the cached block, no backend call
    EXPECT_EQ(b, a);
    EXPECT_EQ(backend.calls, 1);
    void* c = cache.allocate(1500);  // class 1536: a new block
    EXPECT_NE(c, a);
    EXPECT_EQ(backend.calls, 2);
    cache.deallocate(b);
    cache.deallocate(c);
    EXPECT_EQ(backend.frees, 0);  // nothing goes back to the device while the cache lives
    EXPECT_EQ(cache.cached_blocks(), 2u);
    const CachingAllocatorStats s = cache.stats();
    EXPECT_EQ(s.requests, 3u);
    EXPECT_EQ(s.cache_hits, 1u);
    EXPECT_EQ(s.device_allocations, 2u);
    EXPECT_EQ(s.frees, 3u);
    EXPECT_EQ(s.allocated_bytes, 0u);
    EXPECT_EQ(s.reserved_bytes, 1024u + 1536u);
  }
  EXPECT_EQ(backend.frees, 2);  // destruction returns every block
  EXPECT_TRUE(backend.live.empty());
}

TEST(CachingAllocator, SteadyStateLoopAllocatesNothing) {
  FakeBackend backend;
  CountingAllocator counter(backend);
  CachingAllocator cache(counter);
  const std::size_t sizes[] = {3 * kMiB, 100, 5 * kMiB + 7, 4096, 3 * kMiB};
  for (int step = 0; step < 5; ++step) {
    void* p[5];
    for (int i = 0; i < 5; ++i) p[i] = cache.allocate(sizes[i]);
    for (int i = 4; i >= 0; --i) cache.deallocate(p[i]);
    if (step == 0) {
      EXPECT_EQ(counter.stats().allocations, 5u);  // two blocks of the 4 MiB class live at once
    }
  }
  EXPECT_EQ(counter.stats().allocations, 5u);
  const CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.device_allocations, 5u);
  EXPECT_EQ(s.cache_hits, 20u);
  EXPECT_EQ(s.reserved_bytes, counter.stats().live_bytes);
}

TEST(CachingAllocator, PeaksFollowPyTorchsAllocatedAndReserved) {
  FakeBackend backend;
  CachingAllocator cache(backend);
  void* a = cache.allocate(3 * kMiB);  // 4 MiB
  void* b = cache.allocate(1);         // 512
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 4 * kMiB + 512);
  EXPECT_EQ(s.peak_allocated_bytes, 4 * kMiB + 512);
  cache.deallocate(a);
  void* c = cache.allocate(2 * kMiB);  // a new class: reserved grows, allocated does not pass its peak
  s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 2 * kMiB + 512);
  EXPECT_EQ(s.peak_allocated_bytes, 4 * kMiB + 512);
  EXPECT_EQ(s.reserved_bytes, 6 * kMiB + 512);
  EXPECT_EQ(s.peak_reserved_bytes, 6 * kMiB + 512);
  cache.reset_peaks();
  s = cache.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 2 * kMiB + 512);
  EXPECT_EQ(s.peak_reserved_bytes, 6 * kMiB + 512);
  cache.deallocate(b);
  cache.deallocate(c);
}

TEST(CachingAllocator, DoubleAndForeignFreesAreCountedNotCached) {
  FakeBackend backend;
  CachingAllocator cache(backend);
  void* a = cache.allocate(700);
  cache.deallocate(a);
  cache.deallocate(a);  // double free
  int foreign = 0;
  cache.deallocate(&foreign);
  cache.deallocate(nullptr);  // no-op
  const CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.invalid_frees, 2u);
  EXPECT_EQ(cache.cached_blocks(), 1u);
  void* b = cache.allocate(700);
  void* c = cache.allocate(700);  // the block was cached once: the second request is new
  EXPECT_EQ(b, a);
  EXPECT_NE(c, a);
  EXPECT_EQ(backend.calls, 2);
  cache.deallocate(b);
  cache.deallocate(c);
}

}  // namespace
}  // namespace seqbench::layers
