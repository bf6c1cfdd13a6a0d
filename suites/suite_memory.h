// The `memory` suite, CPU part: LightSeq2's Fig. 8 accounting, computed by the memory planner
// (layers/memory_planner.h) from the layers' dry runs (layers/layer_temporaries.h), for every
// model preset at a few (batch tokens, sequence length) points. Needs no GPU.
//
// Because a report's experiments are timings, the accounting reaches the report in two forms:
//   * checks (memory_checks), one set per preset:
//       memory/<preset>/attention_backward_formula  planner == 9BLH + BL²N (naive) and
//                                                   3BLH + max(3BLH, BL²N) (managed), tolerance 0
//       memory/<preset>/planner_no_overlap          the independent O(n²) verifier finds nothing
//       memory/<preset>/block_bounds                max-live lower bound <= block <= naive sum
//     plus the planner's self-tests (memory/planner/...): random lifetime sets, a planted overlap
//     the verifier must catch, and an over-limit request the manager must refuse;
//   * the numbers themselves (memory_accounting), a JSON array meant for an optional top-level
//     "accounting" section of the report and for the tables.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"

namespace seqbench {

SuiteSpec memory_suite(const SuiteOptions& options);

// One entry per (case, preset, point), in a fixed order:
//   { "name": "attention_backward" | "encoder_layer" | "decoder_layer" | "model",
//     "params": { "preset", "batch_tokens", "batch_size", "seq_len", "hidden", "ffn", "heads",
//                 "dtype", "pre_layer_norm", "encoder_layers", "decoder_layers", "tensors",
//                 "steps" },
//     "naive_bytes":       every tensor in its own allocation (sum of 256-byte-aligned sizes),
//     "managed_bytes":     the planner's one block,
//     "lower_bound_bytes": the most bytes live at one step (no placement can do better),
//     "ratio":             managed_bytes / naive_bytes,
//     "formula": { "naive_bytes", "managed_bytes" }   attention_backward only: the paper's
//                                                     closed forms, unaligned }
// Bytes are integers. The params of "encoder_layer", "decoder_layer" and "attention_backward"
// describe one layer; those of "model" the preset's whole stack (its encoder_layers and
// decoder_layers). Throws seqbench::Error if a plan fails its check (that would be a planner bug).
nlohmann::json memory_accounting(const SuiteOptions& options);

// The checks listed above; `seed` drives the random lifetime sets.
std::vector<CheckResult> memory_checks(const SuiteOptions& options, std::uint64_t seed);

}  // namespace seqbench
