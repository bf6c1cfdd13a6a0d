// The optimizer-state file: exact round trips, atomic replacement, and rejection of every kind
// of damaged file (host only).
#include "trainer/optimizer_state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "core/error.h"
#include "tests/common/expect_error.h"

namespace seqbench::trainer {
namespace {

namespace fs = std::filesystem;

OptimizerStateSnapshot random_snapshot(std::size_t count, bool master, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  OptimizerStateSnapshot s;
  s.kind = OptimizerKind::adamw;
  s.mode = master ? PrecisionMode::master_fp32 : PrecisionMode::no_master;
  s.count = count;
  s.step = 12345;
  auto fill = [&](std::vector<float>& v) {
    v.resize(count);
    for (auto& x : v) {
      const std::uint32_t bits = static_cast<std::uint32_t>(rng()) & 0xbfffffffu;  // finite, any sign
      std::memcpy(&x, &bits, 4);
    }
  };
  fill(s.state0);
  fill(s.state1);
  if (master) fill(s.master);
  return s;
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

void expect_bitwise_equal(const OptimizerStateSnapshot& a, const OptimizerStateSnapshot& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(bits_of(a.state0), bits_of(b.state0));
  EXPECT_EQ(bits_of(a.state1), bits_of(b.state1));
  EXPECT_EQ(bits_of(a.master), bits_of(b.master));
}

using seqbench::testing::error_of;

class OptimizerStateFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ostringstream name;
    name << "seqbench_optstate_" << ::getpid() << "_"
         << ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / name.str();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }
  fs::path dir_;
};

TEST(OptimizerStateBytes, RoundTripIsBitwise) {
  for (const std::size_t count : {0u, 1u, 7u, 1000u}) {
    for (const bool master : {false, true}) {
      const OptimizerStateSnapshot s = random_snapshot(count, master, count + master);
      expect_bitwise_equal(deserialize_optimizer_state(serialize_optimizer_state(s), "test"), s);
    }
  }
}

TEST(OptimizerStateBytes, DamageIsDetected) {
  const std::string good = serialize_optimizer_state(random_snapshot(64, true, 1));
  EXPECT_NE(error_of([&] { deserialize_optimizer_state(good.substr(0, good.size() - 1), "f"); }), "");
  EXPECT_NE(error_of([&] { deserialize_optimizer_state(good.substr(0, 20), "f"); }).find("truncated"),
            std::string::npos);
  EXPECT_NE(error_of([&] { deserialize_optimizer_state("", "f"); }).find("bad magic"), std::string::npos);
  std::string flipped = good;
  flipped[100] ^= 0x10;
  EXPECT_NE(error_of([&] { deserialize_optimizer_state(flipped, "f"); }).find("hash mismatch"),
            std::string::npos);
  std::string version = good;
  version[7] = '\x02';
  EXPECT_NE(error_of([&] { deserialize_optimizer_state(version, "f"); }).find("bad magic"),
            std::string::npos);
  EXPECT_NE(error_of([&] { deserialize_optimizer_state(good + "x", "f"); }), "");
}

TEST(OptimizerStateBytes, InconsistentSnapshotsAreRejected) {
  OptimizerStateSnapshot s = random_snapshot(10, false, 2);
  s.state1.resize(9);
  EXPECT_NE(error_of([&] { serialize_optimizer_state(s); }).find("state1 has 9 elements"), std::string::npos);
  s = random_snapshot(10, false, 2);
  s.step = -1;
  EXPECT_NE(error_of([&] { serialize_optimizer_state(s); }).find("step -1"), std::string::npos);
  // The next step would count INT64_MAX + 1 (signed overflow; t < 0 gave NaN parameters).
  s.step = std::numeric_limits<std::int64_t>::max();
  EXPECT_NE(error_of([&] {
              serialize_optimizer_state(s);
            }).find("step 9223372036854775807 must be >= 0 and < 9223372036854775807"),
            std::string::npos);
  s.step = std::numeric_limits<std::int64_t>::max() - 1;
  expect_bitwise_equal(deserialize_optimizer_state(serialize_optimizer_state(s), "test"), s);
}

TEST_F(OptimizerStateFile, ADirectoryIsNamedAsOne) {
  EXPECT_NE(error_of([&] { read_optimizer_state(dir_); }).find("': it is a directory"), std::string::npos);
}

TEST_F(OptimizerStateFile, WriteReadRoundTripAndReplaceLeaveNoTemporaries) {
  const fs::path path = dir_ / "opt.state";
  const OptimizerStateSnapshot first = random_snapshot(333, true, 3);
  write_optimizer_state(path, first);
  expect_bitwise_equal(read_optimizer_state(path), first);
  const OptimizerStateSnapshot second = random_snapshot(5, false, 4);
  write_optimizer_state(path, second);  // replaces atomically
  expect_bitwise_equal(read_optimizer_state(path), second);
  EXPECT_EQ(entries(), 1u) << "a temporary file was left behind";
}

TEST_F(OptimizerStateFile, FailedWritesLeaveTheOldFileAndNoTemporaries) {
  const fs::path path = dir_ / "opt.state";
  const OptimizerStateSnapshot old = random_snapshot(10, false, 5);
  write_optimizer_state(path, old);
  OptimizerStateSnapshot bad = random_snapshot(10, false, 6);
  bad.state0.resize(3);  // rejected before anything is written
  EXPECT_THROW(write_optimizer_state(path, bad), Error);
  expect_bitwise_equal(read_optimizer_state(path), old);
  EXPECT_EQ(entries(), 1u);
  const std::string missing_dir = error_of([&] { write_optimizer_state(dir_ / "no" / "such" / "f", old); });
  EXPECT_NE(missing_dir.find("cannot write optimizer state"), std::string::npos) << missing_dir;
  EXPECT_NE(error_of([&] { read_optimizer_state(dir_ / "absent"); }).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace seqbench::trainer
