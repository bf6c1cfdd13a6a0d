// CountingAllocator on a fake backend: what it counts, and that it never hides a mistake.
#include "layers/device_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "tests/layers/fake_allocators.h"

namespace seqbench::layers {
namespace {

// Host memory in place of the device; remembers what is live so that the test can see exactly
// which calls reached it.
using FakeBackend = layer_test::RecordingBackend;

TEST(CountingAllocator, CountsAllocationsFreesAndBytes) {
  FakeBackend backend;
  CountingAllocator counter(backend);
  void* a = counter.allocate(1000);
  void* b = counter.allocate(24);
  AllocationStats s = counter.stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.deallocations, 0u);
  EXPECT_EQ(s.bytes_allocated, 1024u);
  EXPECT_EQ(s.live_bytes, 1024u);
  EXPECT_EQ(s.peak_live_bytes, 1024u);
  counter.deallocate(a);
  void* c = counter.allocate(10);
  s = counter.stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.deallocations, 1u);
  EXPECT_EQ(s.bytes_allocated, 1034u);
  EXPECT_EQ(s.live_bytes, 34u);
  EXPECT_EQ(s.peak_live_bytes, 1024u);  // the peak is kept after frees
  counter.deallocate(b);
  counter.deallocate(c);
  EXPECT_EQ(counter.stats().live_bytes, 0u);
  EXPECT_EQ(backend.calls, 3);
  EXPECT_EQ(backend.frees, 3);
  EXPECT_TRUE(backend.live.empty());
}

TEST(CountingAllocator, ZeroBytesAndNullAreNothing) {
  FakeBackend backend;
  CountingAllocator counter(backend);
  EXPECT_EQ(counter.allocate(0), nullptr);
  counter.deallocate(nullptr);
  const AllocationStats s = counter.stats();
  EXPECT_EQ(s.allocations, 0u);
  EXPECT_EQ(s.deallocations, 0u);
  EXPECT_EQ(s.unknown_frees, 0u);
  EXPECT_EQ(backend.calls, 0);
  EXPECT_EQ(backend.frees, 0);
}

TEST(CountingAllocator, AForeignPointerIsCountedAndNotPassedOn) {
  FakeBackend backend;
  CountingAllocator counter(backend);
  int on_stack = 0;
  counter.deallocate(&on_stack);
  void* a = counter.allocate(8);
  counter.deallocate(a);
  counter.deallocate(a);  // a double free is a foreign pointer by then
  const AllocationStats s = counter.stats();
  EXPECT_EQ(s.unknown_frees, 2u);
  EXPECT_EQ(s.deallocations, 1u);
  EXPECT_EQ(backend.frees, 1);
}

TEST(CountingAllocator, BackendFailuresPropagateAndAreCounted) {
  FakeBackend backend;
  CountingAllocator counter(backend);
  backend.fail_next = true;
  try {
    counter.allocate(123);
    ADD_FAILURE() << "expected the backend's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("123 bytes"), std::string::npos) << e.what();
  }
  backend.return_null = true;
  try {
    counter.allocate(77);
    ADD_FAILURE() << "expected an error for a null block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nullptr for 77 bytes"), std::string::npos) << e.what();
  }
  const AllocationStats s = counter.stats();
  EXPECT_EQ(s.failed, 2u);
  EXPECT_EQ(s.allocations, 0u);
  EXPECT_EQ(s.live_bytes, 0u);
}

TEST(CountingAllocator, SteadyStateIsVisibleAsNoNewAllocations) {
  FakeBackend backend;
  CountingAllocator counter(backend);
  void* block = counter.allocate(1 << 20);  // the set-up allocation
  const AllocationStats before = counter.stats();
  for (int step = 0; step < 1000; ++step) static_cast<char*>(block)[step] = static_cast<char>(step);
  EXPECT_EQ(counter.stats().allocations, before.allocations);
  void* leak = counter.allocate(16);  // one allocation inside the loop is caught
  EXPECT_EQ(counter.stats().allocations, before.allocations + 1);
  counter.deallocate(leak);
  counter.deallocate(block);
}

TEST(CudaAllocator, ZeroBytesNeedNoDevice) {
  CudaAllocator cuda;
  EXPECT_EQ(cuda.allocate(0), nullptr);
  cuda.deallocate(nullptr);  // no CUDA call either
}

}  // namespace
}  // namespace seqbench::layers
