// The memory planner: the dry-run recorder, greedy-by-size placement, the independent verifier
// (shown able to fail), the lower bound, and the manager's run-time limits, on the CPU.
#include "layers/memory_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/device_allocator.h"
#include "tests/common/expect_error.h"

namespace seqbench::layers {
namespace {

using seqbench::testing::expect_error_all;

// "t<i>". Built by appending: GCC 12's -Wrestrict misfires on "t" + std::to_string(i).
std::string tensor_name(int i) {
  std::string name = "t";
  name += std::to_string(i);
  return name;
}

TensorLifetime lt(std::string name, std::size_t bytes, int first, int last, std::size_t alignment = 256) {
  TensorLifetime t;
  t.name = std::move(name);
  t.bytes = bytes;
  t.first_step = first;
  t.last_step = last;
  t.alignment = alignment;
  return t;
}

// Host memory standing in for the device, 256-byte aligned like cudaMalloc.
class HostAllocator final : public DeviceAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    return ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{256});
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr) ::operator delete (ptr, std::align_val_t{256});
  }
};

// Hands out a block one byte past an aligned address.
class MisalignedAllocator final : public DeviceAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    base_ = ::operator new (bytes + 256, std::align_val_t{256});
    return static_cast<char*>(base_) + 1;
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr) {
      ++frees;
      ::operator delete (base_, std::align_val_t{256});
    }
  }
  int frees = 0;

 private:
  void* base_ = nullptr;
};

// Random lifetime sets: hundreds of tensors, sizes from 1 byte to 1 MiB (odd ones included),
// 16- and 256-byte alignment, lifetimes from one step to dozens.
std::vector<TensorLifetime> random_set(std::mt19937_64& rng, int count) {
  std::uniform_int_distribution<int> start(0, 149);
  std::geometric_distribution<int> length(0.1);
  std::uniform_int_distribution<int> size_class(0, 3);
  std::uniform_int_distribution<std::size_t> small(1, 300);
  std::uniform_int_distribution<std::size_t> large(1, std::size_t{1} << 20);
  std::uniform_int_distribution<int> coin(0, 2);
  std::vector<TensorLifetime> out;
  for (int i = 0; i < count; ++i) {
    const std::size_t bytes = size_class(rng) == 0 ? small(rng) : large(rng);
    const int first = start(rng);
    out.push_back(lt(tensor_name(i), bytes, first, first + length(rng), coin(rng) == 0 ? 16 : 256));
  }
  return out;
}

TEST(AlignUp, RoundsToPowersOfTwoAndRefusesOthers) {
  EXPECT_EQ(align_up(0, 256), 0u);
  EXPECT_EQ(align_up(1, 256), 256u);
  EXPECT_EQ(align_up(256, 256), 256u);
  EXPECT_EQ(align_up(257, 16), 272u);
  EXPECT_EQ(align_up(13, 1), 13u);
  expect_error_all([] { align_up(10, 24); }, {"alignment 24", "power of two"});
  expect_error_all([] { align_up(10, 0); }, {"alignment 0"});
  expect_error_all([] { align_up(std::numeric_limits<std::size_t>::max(), 16); }, {"overflows"});
}

// ---------------------------------------------------------------------------------------------
// The recorder.

TEST(LifetimeRecorder, RecordsFirstAndLastUse) {
  LifetimeRecorder rec;
  const TensorId x = rec.external("x");
  const TensorId a = rec.tensor("a", 100);
  const TensorId b = rec.tensor("b", 7);
  const TensorId y = rec.external("y");
  EXPECT_EQ(rec.op("make_a", {x}, {a}), 0);
  EXPECT_EQ(rec.op("inplace_a", {a}, {a}), 1);
  EXPECT_EQ(rec.op("make_b", {a}, {b}), 2);
  EXPECT_EQ(rec.op("use_b", {b, x}, {y}), 3);
  const std::vector<TensorLifetime> l = rec.lifetimes();
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[a].name, "a");
  EXPECT_EQ(l[a].first_step, 0);
  EXPECT_EQ(l[a].last_step, 2);
  EXPECT_EQ(l[b].first_step, 2);
  EXPECT_EQ(l[b].last_step, 3);
  EXPECT_EQ(l[b].bytes, 7u);
  EXPECT_EQ(l[b].alignment, kBlockAlignment);
  EXPECT_TRUE(l[x].external);
  EXPECT_EQ(l[x].bytes, 0u);
  EXPECT_EQ(l[x].first_step, 0);
  EXPECT_EQ(l[x].last_step, 3);
  EXPECT_EQ(rec.steps(), 4);
  EXPECT_EQ(rec.ops()[1], "inplace_a");
  EXPECT_EQ(rec.name(b), "b");
}

TEST(LifetimeRecorder, RefusesDescriptionBugs) {
  {
    LifetimeRecorder rec;
    const TensorId a = rec.tensor("a", 8);
    const TensorId b = rec.tensor("b", 8);
    expect_error_all([&] { rec.op("oops", {a}, {b}); },
                     {"op 'oops'", "reads tensor 'a' before any op wrote it"});
    expect_error_all([&] { rec.op("inplace_first", {a}, {a}); }, {"'a' before any op wrote it"});
  }
  {
    LifetimeRecorder rec;
    rec.tensor("a", 8);
    expect_error_all([&] { rec.tensor("a", 16); }, {"'a' is declared twice"});
    expect_error_all([&] { rec.tensor("", 16); }, {"needs a name"});
    expect_error_all([&] { rec.op("bad_id", {}, {42}); }, {"op 'bad_id'", "tensor id 42"});
    expect_error_all([&] { rec.lifetimes(); }, {"'a' is declared but no op uses it"});
    expect_error_all([&] { rec.name(99); }, {"tensor id 99"});
  }
  expect_error_all([] { LifetimeRecorder bad(48); }, {"alignment 48"});
}

// A forward of two steps and a backward of two: what the forward writes and the backward reads
// lives to the last step; a tensor of one pass only, and an external, keep their lifetimes.
TEST(LifetimeRecorder, RetainingTheForwardKeepsWhatTheBackwardReadsToTheEnd) {
  LifetimeRecorder rec;
  const TensorId x = rec.external("x");
  const TensorId saved = rec.tensor("saved", 64);   // forward -> first backward op
  const TensorId fwd = rec.tensor("fwd_only", 64);  // forward only
  const TensorId grad = rec.tensor("grad", 64);     // backward only
  const TensorId late = rec.tensor("late", 64);     // backward only, born after saved's last read
  const TensorId dx = rec.external("dx");
  rec.op("f0", {x}, {saved, fwd});
  rec.op("f1", {fwd}, {});
  rec.op("b0", {saved}, {grad});
  rec.op("b1", {grad}, {late});
  rec.op("b2", {late}, {dx});
  const std::vector<TensorLifetime> consumed = rec.lifetimes();
  EXPECT_EQ(consumed[saved].last_step, 2);
  const std::vector<TensorLifetime> kept = rec.lifetimes_retaining_forward(2);
  EXPECT_EQ(kept[saved].first_step, 0);
  EXPECT_EQ(kept[saved].last_step, 4);
  EXPECT_EQ(kept[fwd].last_step, 1);
  EXPECT_EQ(kept[grad].first_step, 2);
  EXPECT_EQ(kept[grad].last_step, 3);
  EXPECT_EQ(kept[late].last_step, 4);
  EXPECT_EQ(kept[x].last_step, consumed[x].last_step);
  // Consumed, `late` may take `saved`'s bytes (at most two slots live at once); kept, the three
  // are live together at b1 and nothing the backward writes can sit on `saved`.
  const MemoryPlan consumed_plan = plan_memory(consumed), kept_plan = plan_memory(kept);
  EXPECT_TRUE(find_plan_violations(kept, kept_plan).empty());
  EXPECT_EQ(consumed_plan.block_bytes, 2 * kBlockAlignment);
  EXPECT_EQ(kept_plan.block_bytes, 3 * kBlockAlignment);
  // forward_steps = 0 (no forward) and = steps (no backward) change nothing.
  for (const int f : {0, 5}) {
    const std::vector<TensorLifetime> same = rec.lifetimes_retaining_forward(f);
    for (std::size_t i = 0; i < same.size(); ++i) EXPECT_EQ(same[i].last_step, consumed[i].last_step) << f;
  }
  expect_error_all([&] { rec.lifetimes_retaining_forward(6); }, {"forward_steps 6", "[0, 5]"});
  expect_error_all([&] { rec.lifetimes_retaining_forward(-1); }, {"forward_steps -1"});
}

// A backward op that writes a kept tensor in place would hand a second backward the first one's
// values: refused, naming the tensor and the op.
TEST(LifetimeRecorder, RetainingTheForwardRefusesABackwardThatOverwritesWhatItKeeps) {
  LifetimeRecorder rec;
  const TensorId x = rec.external("x");
  const TensorId probs = rec.tensor("probs", 64);
  const TensorId dx = rec.external("dx");
  rec.op("softmax", {x}, {probs});
  rec.op("softmax_bwd_in_place", {probs}, {probs});
  rec.op("out", {probs}, {dx});
  EXPECT_NO_THROW(rec.lifetimes());
  expect_error_all([&] { rec.lifetimes_retaining_forward(1); },
                   {"'probs'", "'softmax_bwd_in_place'", "step 1", "second backward"});
}

// ---------------------------------------------------------------------------------------------
// The planner.

TEST(PlanMemory, TensorsNeverLiveTogetherShareBytes) {
  const std::vector<TensorLifetime> t = {lt("a", 1000, 0, 1), lt("b", 1000, 2, 3), lt("c", 1000, 4, 5)};
  const MemoryPlan p = plan_memory(t);
  EXPECT_EQ(p.offsets, (std::vector<std::size_t>{0, 0, 0}));
  EXPECT_EQ(p.block_bytes, 1024u);  // one 256-aligned slot
  EXPECT_TRUE(find_plan_violations(t, p).empty());
}

TEST(PlanMemory, LifetimesAreInclusive) {
  // a ends at step 2, b starts at step 2: the op of step 2 reads one and writes the other, so
  // they must not share bytes; c starts at step 3 and may take a's place.
  const std::vector<TensorLifetime> t = {lt("a", 512, 0, 2), lt("b", 512, 2, 4), lt("c", 512, 3, 5)};
  const MemoryPlan p = plan_memory(t);
  EXPECT_NE(p.offsets[0], p.offsets[1]);
  EXPECT_EQ(p.offsets[2], p.offsets[0]);
  EXPECT_EQ(p.block_bytes, 1024u);
  EXPECT_TRUE(find_plan_violations(t, p).empty());
  EXPECT_EQ(max_live_bytes(t, false), 1024u);
}

TEST(PlanMemory, LargestFirstAtTheLowestGapThatFits) {
  // big lives throughout; small1 and small2 do not overlap each other, so both sit right above
  // big; mid overlaps both smalls and goes above them.
  const std::vector<TensorLifetime> t = {lt("small1", 100, 0, 1), lt("big", 4096, 0, 9),
                                         lt("small2", 100, 2, 3), lt("mid", 1000, 0, 3)};
  const MemoryPlan p = plan_memory(t);
  EXPECT_EQ(p.offsets[1], 0u);     // big first, at 0
  EXPECT_EQ(p.offsets[3], 4096u);  // mid next, above big
  EXPECT_EQ(p.offsets[0], 5120u);  // smalls above mid's 1024-byte slot
  EXPECT_EQ(p.offsets[2], 5120u);
  EXPECT_EQ(p.block_bytes, 5376u);
  EXPECT_TRUE(find_plan_violations(t, p).empty());
}

TEST(PlanMemory, FillsAGapBetweenTensors) {
  // low and high are placed first (largest); the gap between them is exactly 1024 bytes at the
  // steps where "fit" lives, so it goes there rather than on top.
  std::vector<TensorLifetime> t = {lt("low", 4096, 0, 9), lt("top", 8192, 0, 2), lt("fit", 1024, 3, 5),
                                   lt("high", 2048, 3, 9)};
  const MemoryPlan p = plan_memory(t);
  // top (8192) at 0 overlaps low in time, so low (4096) goes to 8192; high (2048, steps 3..9)
  // does not overlap top: it overlaps low only, so it takes 0; fit (steps 3..5) overlaps low
  // and high: the gap [2048, 8192) fits it at 2048.
  EXPECT_EQ(p.offsets[1], 0u);
  EXPECT_EQ(p.offsets[0], 8192u);
  EXPECT_EQ(p.offsets[3], 0u);
  EXPECT_EQ(p.offsets[2], 2048u);
  EXPECT_EQ(p.block_bytes, 12288u);
  EXPECT_TRUE(find_plan_violations(t, p).empty());
}

TEST(PlanMemory, RespectsEachTensorsAlignment) {
  const std::vector<TensorLifetime> t = {lt("v", 17, 0, 3, 16), lt("w", 5, 0, 3, 16),
                                         lt("b", 300, 0, 3, 256)};
  const MemoryPlan p = plan_memory(t);
  EXPECT_EQ(p.offsets[2], 0u);  // 512-byte slot
  EXPECT_EQ(p.offsets[0], 512u);
  EXPECT_EQ(p.offsets[1], 544u);  // v's slot is 32 bytes
  EXPECT_EQ(p.block_bytes, 560u);
  EXPECT_TRUE(find_plan_violations(t, p).empty());
}

TEST(PlanMemory, EmptyAndExternalTensorsOccupyNothing) {
  std::vector<TensorLifetime> t = {lt("empty", 0, 0, 5), lt("a", 100, 0, 5)};
  t.push_back(lt("ext", 0, 0, 5));
  t.back().external = true;
  const MemoryPlan p = plan_memory(t);
  EXPECT_EQ(p.offsets, (std::vector<std::size_t>{0, 0, 0}));
  EXPECT_EQ(p.block_bytes, 256u);
  EXPECT_TRUE(find_plan_violations(t, p).empty());
  EXPECT_EQ(plan_memory({}).block_bytes, 0u);
}

TEST(PlanMemory, RefusesInvalidLifetimes) {
  expect_error_all([] { plan_memory({lt("a", 8, 3, 2)}); }, {"'a'", "first_step 3 is after last_step 2"});
  expect_error_all([] { plan_memory({lt("a", 8, -1, 2)}); }, {"'a'", "first_step -1 is negative"});
  expect_error_all([] { plan_memory({lt("a", 8, 0, 2, 100)}); }, {"'a'", "alignment 100"});
  TensorLifetime ext = lt("x", 8, 0, 1);
  ext.external = true;
  expect_error_all([&] { plan_memory({ext}); }, {"'x'", "external", "8 bytes"});
}

TEST(PlanMemory, KeepsTheBetterOfItsTwoTieBreaks) {
  // Three slots of 512 and one of 256 (steps inclusive); at most 1024 bytes live at once (steps 1
  // and 3). Longest-lifetime-first places b [3,5] at 0, a [2,3] at 512, d [1,1] at 0, and then c
  // [1,2] overlaps d at 0 and a at 512: 1024 + 256. Earliest-first-use-first places d, then a
  // (free of d) at 0, b above a at 512, and c fits at 512 beside b (never live together): 1024.
  const std::vector<TensorLifetime> t = {lt("a", 512, 2, 3), lt("b", 512, 3, 5), lt("c", 256, 1, 2),
                                         lt("d", 512, 1, 1)};
  const MemoryPlan p = plan_memory(t);
  EXPECT_EQ(max_live_bytes(t, true), 1024u);
  EXPECT_EQ(p.block_bytes, 1024u);
  EXPECT_TRUE(find_plan_violations(t, p).empty());
}

TEST(PlanMemory, IsDeterministic) {
  std::mt19937_64 rng(7);
  const std::vector<TensorLifetime> t = random_set(rng, 300);
  const MemoryPlan a = plan_memory(t);
  const MemoryPlan b = plan_memory(t);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.block_bytes, b.block_bytes);
}

// The central property, over many random sets: the verifier finds nothing, the block is never
// below the max-live lower bound, never above the sum of the allocations, and close to the bound.
TEST(PlanMemory, RandomSetsAreSoundAndNearTheLowerBound) {
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<int> count(100, 600);
  double worst = 0;
  double total_ratio = 0;
  const int rounds = 200;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<TensorLifetime> t = random_set(rng, count(rng));
    const MemoryPlan p = plan_memory(t);
    const std::vector<std::string> problems = find_plan_violations(t, p);
    ASSERT_TRUE(problems.empty()) << "round " << round << ": " << problems.front();
    const std::size_t raw = max_live_bytes(t, false);
    const std::size_t padded = max_live_bytes(t, true);
    ASSERT_LE(raw, padded);
    ASSERT_GE(p.block_bytes, padded) << "round " << round;
    ASSERT_LE(p.block_bytes, naive_bytes(t)) << "round " << round;
    const double ratio = static_cast<double>(p.block_bytes) / static_cast<double>(padded);
    worst = std::max(worst, ratio);
    total_ratio += ratio;
  }
  // The bound is not always reachable (placement is NP-hard), so these are regression bounds,
  // set from measurement with this seed: worst 1.24, mean 1.056. A planner that degraded to
  // stacking tensors would land near naive_bytes, many times above.
  EXPECT_LE(worst, 1.35);
  EXPECT_LE(total_ratio / rounds, 1.10);
  RecordProperty("worst_ratio", std::to_string(worst));
  RecordProperty("mean_ratio", std::to_string(total_ratio / rounds));
  std::cout << "block / max-live bound: worst " << worst << ", mean " << total_ratio / rounds << "\n";
}

// ---------------------------------------------------------------------------------------------
// The verifier must be able to fail.

TEST(PlanVerifier, CatchesAPlantedOverlapAndNamesBothTensors) {
  const std::vector<TensorLifetime> t = {lt("a", 1000, 0, 2), lt("b", 1000, 2, 3), lt("c", 1000, 3, 4)};
  MemoryPlan p = plan_memory(t);
  ASSERT_TRUE(find_plan_violations(t, p).empty());
  p.offsets[1] = 768;  // b on a's last 232 bytes, and both live at step 2
  p.block_bytes = std::max<std::size_t>(p.block_bytes, 768 + 1024);
  p.offsets[2] = p.offsets[0];  // c on a: legal, a is dead by step 3 (but c meets b at step 3)
  const std::vector<std::string> problems = find_plan_violations(t, p);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("'a'"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("'b'"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("[0, 1000)"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("[768, 1768)"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("'b'"), std::string::npos) << problems[1];
  EXPECT_NE(problems[1].find("'c'"), std::string::npos) << problems[1];
  expect_error_all([&] { check_plan(t, p); }, {"memory plan check failed", "'a'", "'b'", "'c'"});
}

TEST(PlanVerifier, ByteRangesThatOnlyTouchDoNotOverlap) {
  const std::vector<TensorLifetime> t = {lt("a", 256, 0, 1), lt("b", 256, 0, 1)};
  MemoryPlan p{{0, 256}, 512};
  EXPECT_TRUE(find_plan_violations(t, p).empty());
  p.offsets[1] = 0;
  EXPECT_EQ(find_plan_violations(t, p).size(), 1u);
  // One byte of overlap is enough (alignment 1 so that the offset itself is legal).
  std::vector<TensorLifetime> u = {lt("a", 256, 0, 1, 1), lt("b", 256, 0, 1, 1)};
  EXPECT_EQ(find_plan_violations(u, MemoryPlan{{0, 255}, 511}).size(), 1u);
}

TEST(PlanVerifier, CatchesMisalignmentOverrunAndCountMismatch) {
  const std::vector<TensorLifetime> t = {lt("a", 100, 0, 1), lt("b", 100, 2, 3)};
  EXPECT_NE(find_plan_violations(t, MemoryPlan{{0, 16}, 512})[0].find("not a multiple of its alignment 256"),
            std::string::npos);
  EXPECT_NE(find_plan_violations(t, MemoryPlan{{0, 256}, 300})[0].find("ends past the block of 300"),
            std::string::npos);
  EXPECT_NE(find_plan_violations(t, MemoryPlan{{0}, 512})[0].find("1 offsets for 2 tensors"),
            std::string::npos);
  // A corrupt offset near SIZE_MAX is reported, not wrapped around.
  const std::size_t huge = std::numeric_limits<std::size_t>::max() - 255;
  EXPECT_FALSE(find_plan_violations(t, MemoryPlan{{0, huge}, 512}).empty());
}

TEST(PlanVerifier, LimitsTheListAndCountsTheRest) {
  std::vector<TensorLifetime> t;
  for (int i = 0; i < 6; ++i) t.push_back(lt(tensor_name(i), 256, 0, 0));
  const MemoryPlan p{std::vector<std::size_t>(6, 0), 256};  // 15 overlapping pairs
  const std::vector<std::string> problems = find_plan_violations(t, p, 4);
  ASSERT_EQ(problems.size(), 5u);
  EXPECT_EQ(problems.back(), "... and 11 more");
}

// Every random plan, used on real memory: at each step, tensors born at that step are filled
// with their own pattern, and every tensor still live must hold its pattern intact. A plan that
// let two live tensors share a byte fails here independently of the verifier.
TEST(PlanVerifier, RandomPlansKeepEveryLiveTensorIntactInMemory) {
  std::mt19937_64 rng(99);
  HostAllocator host;
  for (int round = 0; round < 10; ++round) {
    const std::vector<TensorLifetime> t = random_set(rng, 150);
    MemoryManager m(t, host);
    int last = 0;
    for (const TensorLifetime& x : t) last = std::max(last, x.last_step);
    for (int step = 0; step <= last; ++step) {
      m.set_step(step);
      for (TensorId i = 0; i < t.size(); ++i)
        if (t[i].first_step == step)
          std::memset(m.get(i, t[i].bytes), static_cast<int>(i % 251) + 1, t[i].bytes);
      for (TensorId i = 0; i < t.size(); ++i) {
        if (t[i].first_step > step || t[i].last_step < step) continue;
        const auto* bytes = static_cast<const unsigned char*>(m.get(i, t[i].bytes));
        const auto expected = static_cast<unsigned char>(i % 251 + 1);
        const bool intact =
            std::all_of(bytes, bytes + t[i].bytes, [&](unsigned char b) { return b == expected; });
        ASSERT_TRUE(intact) << "round " << round << ": tensor " << t[i].name << " clobbered by step " << step;
      }
    }
  }
}

TEST(MaxLiveBytes, SumsTheTensorsLiveAtEachStep) {
  const std::vector<TensorLifetime> t = {lt("a", 100, 0, 4), lt("b", 300, 1, 2), lt("c", 50, 2, 3),
                                         lt("d", 1000, 5, 5)};
  // step 2: a + b + c = 450 (raw); slots: 256 + 512 + 256 = 1024; step 5: d alone (1000 / 1024).
  EXPECT_EQ(max_live_bytes(t, false), 1000u);
  EXPECT_EQ(max_live_bytes(t, true), 1024u);
  EXPECT_EQ(naive_bytes(t), 256u + 512u + 256u + 1024u);
  EXPECT_EQ(max_live_bytes({}, true), 0u);
}

// ---------------------------------------------------------------------------------------------
// The manager.

TEST(MemoryManager, AllocatesOneBlockOnceAndNothingInSteadyState) {
  HostAllocator host;
  CountingAllocator counter(host);
  std::mt19937_64 rng(3);
  const std::vector<TensorLifetime> t = random_set(rng, 200);
  {
    MemoryManager m(t, counter);
    EXPECT_EQ(counter.stats().allocations, 1u);
    EXPECT_EQ(counter.stats().bytes_allocated, m.block_bytes());
    EXPECT_EQ(m.block_bytes(), plan_memory(t).block_bytes);
    const AllocationStats before = counter.stats();
    for (int iteration = 0; iteration < 50; ++iteration)
      for (TensorId i = 0; i < t.size(); ++i) {
        void* p = m.get(i, t[i].bytes / (1 + iteration % 3));  // variable-length batches
        EXPECT_EQ(p, static_cast<char*>(m.block()) + m.plan().offsets[i]);
      }
    EXPECT_EQ(counter.stats().allocations, before.allocations);
  }
  EXPECT_EQ(counter.stats().deallocations, 1u);
  EXPECT_EQ(counter.stats().live_bytes, 0u);
}

TEST(MemoryManager, ARequestAboveThePlanNamesTheRequestAndTheLimit) {
  HostAllocator host;
  LifetimeRecorder rec;
  const TensorId x = rec.external("x");
  const TensorId h = rec.tensor("enc0.attn.d_probs", 4096);
  rec.op("a", {x}, {h});
  rec.op("b", {h}, {x});
  MemoryManager m(rec.lifetimes(), host);
  EXPECT_NE(m.get(h, 4096), nullptr);
  expect_error_all([&] { m.get(h, 4097); },
                   {"'enc0.attn.d_probs'", "requested 4097 bytes", "planned maximum of 4096"});
  expect_error_all([&] { m.get(x, 8); }, {"'x' is external"});
  expect_error_all([&] { m.get(7, 8); }, {"tensor id 7", "2 planned"});
  EXPECT_EQ(m.id("enc0.attn.d_probs"), h);
  expect_error_all([&] { m.id("nope"); }, {"'nope'"});
}

TEST(MemoryManager, CheckingModeRefusesATensorOutsideItsLifetime) {
  HostAllocator host;
  MemoryManager m({lt("a", 64, 2, 4)}, host);
  EXPECT_NO_THROW(m.get(0, 64));  // no step announced: no lifetime check
  m.set_step(2);
  EXPECT_NO_THROW(m.get(0, 64));
  m.set_step(4);
  EXPECT_NO_THROW(m.get(0, 64));
  m.set_step(5);
  expect_error_all([&] { m.get(0, 64); }, {"'a'", "step 5", "lifetime 2..4", "differs from the dry run"});
  m.set_step(1);
  expect_error_all([&] { m.get(0, 64); }, {"step 1"});
  m.set_step(-1);
  EXPECT_NO_THROW(m.get(0, 64));
}

TEST(MemoryManager, RefusesAMisalignedBlockAndFreesIt) {
  MisalignedAllocator bad;
  expect_error_all([&] { MemoryManager m({lt("a", 64, 0, 1)}, bad); }, {"not aligned to 256"});
  EXPECT_EQ(bad.frees, 1);
}

}  // namespace
}  // namespace seqbench::layers
