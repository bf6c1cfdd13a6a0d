// The optimizer's state as host data, and its file format, for checkpoints.
//
// A snapshot holds everything a step depends on besides the parameters: the step count t, the
// fp32 state buffers (m and v, or the momentum buffer) and, in master_fp32 mode, the fp32 master
// weights (which cannot be rebuilt from the fp16/bf16 parameters without losing their low bits).
// Restoring a snapshot and stepping gives bitwise the result of never having stopped.
//
// File format (little-endian), version 1:
//   "seqbopt\x01"  u32 kind  u32 mode  u64 count  i64 step  u64 n_state0  u64 n_state1  u64 n_master
//   f32 state0[n_state0]  f32 state1[n_state1]  f32 master[n_master]
//   u64 FNV-1a hash of every byte before it
// Each array is either empty (the configuration has no such buffer) or `count` long.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/update_rule.h"

namespace seqbench::trainer {

struct OptimizerStateSnapshot {
  OptimizerKind kind = OptimizerKind::adam;
  PrecisionMode mode = PrecisionMode::no_master;
  std::uint64_t count = 0;  // elements per buffer (the workspace's padded total)
  std::int64_t step = 0;
  std::vector<float> state0;
  std::vector<float> state1;
  std::vector<float> master;

  bool operator==(const OptimizerStateSnapshot&) const = default;  // float ==: use only for finite values
};

// Throws seqbench::Error when an array is neither empty nor `count` long, or step < 0.
void validate_snapshot(const OptimizerStateSnapshot& snapshot);

std::string serialize_optimizer_state(const OptimizerStateSnapshot& snapshot);
// Throws seqbench::Error naming `what` and the problem: bad magic or version, truncation,
// trailing bytes, hash mismatch, inconsistent sizes.
OptimizerStateSnapshot deserialize_optimizer_state(std::string_view bytes, const std::string& what);

// Writes atomically: a temporary file beside `path`, fsync, rename. A failure leaves no partial
// file (and an existing file at `path` untouched). Throws seqbench::Error naming the path.
void write_optimizer_state(const std::filesystem::path& path, const OptimizerStateSnapshot& snapshot);
OptimizerStateSnapshot read_optimizer_state(const std::filesystem::path& path);

}  // namespace seqbench::trainer
