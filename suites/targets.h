// The issues' acceptance targets, read off reports: `seqbench targets REPORT...`.
//
// Each of issues #3 to #6 ends in "Target and how it is checked". This is that check, written once,
// so that a report from a GPU run can be judged by a command rather than by reading tables, and so
// that the judgement says what it did not see. It reads reports only; it measures nothing.
//
// The targets, per device (reports are grouped by meta.device.name):
//   #3 operators.copy_bw      every non-baseline variant of every `operators` experiment with
//                             params.elements >= kTargetLargeElements reaches kTargetOperatorCopyPct
//                             of the copy bandwidth (its pct_copy_bw, against the copy the same run
//                             measured)
//   #3 operators.faster       every non-baseline variant of every `operators` experiment has
//                             speedup > 1 (median against the unfused baseline's median)
//   #4 trainer.adam_copy_bw   the `fused` variant of every `trainer` experiment with params.optimizer
//                             "adam" and params.parameters >= kTargetLargeParameters reaches
//                             kTargetAdamCopyPct of the copy bandwidth (the issue's "fused Adam"; the
//                             other variants' GB/s are over the same minimal bytes and capped below
//                             it by construction, trainer/NOTES.md)
//   #4 trainer.adam_vs_per_tensor  the `fused` variant of every Adam experiment has speedup >=
//                             kTargetAdamSpeedup over the `per_tensor` baseline
//   #5 layers.faster          every non-baseline variant of every `layers` experiment that has
//                             params.layer (the embedding, encoder, decoder and criterion layers,
//                             forward and backward; not the GEMM-epilogue experiments) has speedup > 1
//   #5 layers.memory_ratio    every layers/memory/.../peak_ratio check passed AND its ratio (max_rel_err)
//                             is at most kMemoryRatioTarget (suites/suite_layers.h), so that a report
//                             written with a looser tolerance does not pass; every one of
//                             layer_experiments::memory_check_names() present
//   #5 layers.steady_allocations  likewise every .../steady_state_allocations check, with 0 allocations
//   #6 pytorch.columns        every experiment of the operators and trainer reports, and every layer
//                             experiment of the layers report (not the GEMM epilogues, which PyTorch has
//                             no counterpart for), has torch_eager and torch_compile measured at full
//                             shapes in the PyTorch report of the same suite, device and build
//                             (meta.source_hash, else the git sha: "in one run"). The runner's `unmapped`
//                             entries decide the rest: "skipped: ..." and "failed: ..." are misses,
//                             "not started: ..." and "not run: ..." gaps; an experiment in neither list
//                             (a filtered run) is a gap
//
// Verdicts: `met` (every case counted passed and nothing is missing), `missed` (some case failed;
// each is listed with its value and the limit), `not measured` (no case failed, but something the
// target needs is missing: the report; experiments in not_run or failed run/<suite>/... checks; only
// filtered runs; experiments without the params the target reads; no case at all; failed checks of
// the suite, its correctness checks or a check family that threw, since a speed measured on code
// whose checks fail is no evidence (not for #6); a GPU other than an H100 or H200, which the issues
// name). Which reports count: seqbench's own (PyTorch's only for #6), with a device, that say they
// ran full shapes (meta.quick false, or parts that all say so; a --quick report, or one that does not
// say, is named and left out). Two reports of one runner and suite on one device are an error.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seqbench {

inline constexpr double kTargetLargeElements = 16.0 * 1024 * 1024;  // issue #3's "16M elements"
inline constexpr double kTargetOperatorCopyPct = 80.0;
inline constexpr double kTargetLargeParameters = 100e6;  // issue #4's "100M parameters"
inline constexpr double kTargetAdamCopyPct = 85.0;
inline constexpr double kTargetAdamSpeedup = 2.0;

enum class TargetVerdict { met, missed, not_measured };
const char* target_verdict_name(TargetVerdict verdict);  // "met", "missed", "not measured"

struct TargetResult {
  int issue = 0;
  std::string id;         // "operators.copy_bw"
  std::string statement;  // the target in words
  TargetVerdict verdict = TargetVerdict::not_measured;
  std::int64_t passed = 0;  // cases that met it
  std::int64_t total = 0;   // cases counted
  std::string worst;  // the case furthest past the limit, or nearest to it when none failed, with its value
  std::vector<std::string> misses;  // every failed case: what, its value, the limit
  std::vector<std::string> gaps;    // why the verdict cannot be `met` although nothing failed
};

struct DeviceTargets {
  std::string device;                // meta.device.name
  std::vector<std::string> reports;  // one line per report used: suite, git sha, timestamp, copy GB/s
  std::vector<std::string> notes;    // e.g. the device is not an H100 or H200
  std::vector<TargetResult> targets;
};

struct TargetsEvaluation {
  std::vector<DeviceTargets> devices;  // in order of first appearance
  std::vector<std::string> ignored;    // reports left out, each with why (no device, --quick)
};

// `reports`: valid seqbench.report/1 documents; `names[i]` names reports[i] in messages (a path).
// Throws seqbench::Error when two reports of the same runner and suite are given for one device.
TargetsEvaluation evaluate_targets(const std::vector<nlohmann::json>& reports,
                                   const std::vector<std::string>& names);

// Markdown: per device a table (issue, target, verdict, cases met, worst case), then the misses and
// the gaps; the ignored reports at the end. Depends only on the evaluation.
std::string render_targets(const TargetsEvaluation& evaluation);

// 0 when there is at least one device and every target of every device is met; 1 when any is
// missed; 3 otherwise (nothing missed, something not measured, or no GPU report at all). The command
// exits 2 on bad input (a missing or invalid report, two reports of one suite), apart from these.
int targets_exit_code(const TargetsEvaluation& evaluation);

}  // namespace seqbench
