// The report: one JSON document per suite run, schema "seqbench.report/1".
//
// reports/README.md documents every field (types, units, meaning); validate_report() is the
// executable form of that page, and every document this project writes or reads goes through it.
// In short:
//   { "schema": "seqbench.report/1", "suite": "...",
//     "meta": { seqbench_version, git_sha, git_dirty, timestamp, host, seed,
//               build: {type, flags, cuda_architectures}, device: null | {...} },
//     "experiments": [ { name, params, baseline, variants: [ {name, samples, median_ms, ...} ] } ],
//     "checks": [ { name, passed, max_abs_err, max_rel_err, tolerance, detail? } ],
//     "skipped": [ { suite, reason } ]   (optional) }
//
// Forward compatibility: members the schema does not name are allowed anywhere and ignored, so a
// newer writer may add fields without breaking older readers. Removing or retyping a field needs
// a new schema string ("seqbench.report/2").
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/check_result.h"
#include "suites/sample_stats.h"

namespace seqbench {

inline constexpr const char* kReportSchema = "seqbench.report/1";
// How deeply arrays and objects may nest in a report (the schema itself needs 6; params and notes
// are free-form). Deeper, validate_report refuses it before anything recurses into it.
inline constexpr std::size_t kMaxReportDepth = 64;

// Every way `report` departs from the schema, each as "path: problem", for example
// "experiments[2].variants[0].median_ms: missing" or
// "meta.device.sm_count: expected integer, got string". Empty means valid. Never throws.
// A document whose "schema" names another version yields that one problem only: the rest of its
// layout is unknown to this reader; so does one nested deeper than kMaxReportDepth. Experiment
// names must be unique (merges, tables and targets key on them).
std::vector<std::string> validate_report(const nlohmann::json& report);

// Throws seqbench::Error "<what> does not match seqbench.report/1: p1; p2; p3 (and N more)" when
// validate_report finds problems; `what` names the document ("report 'x.json'").
void require_valid_report(const nlohmann::json& report, const std::string& what);

// One variant of an experiment, from its timing samples. bytes is the minimal traffic (bytes read
// plus written) and flops the arithmetic of one call; either may be 0 when it has no meaning, and
// then gbps / tflops are null. copy_gbps is the device's measured copy bandwidth, when known, for
// pct_copy_bw. "speedup" is left null until finalize_speedups() fills it.
// Throws seqbench::Error on a median that is not positive and finite, on negative or non-finite
// bytes or flops, or on a copy_gbps that is not positive and finite.
nlohmann::json make_variant(const std::string& name, const SampleStats& stats, double bytes, double flops,
                            std::optional<double> copy_gbps);

// Sets every variant's "speedup" to baseline median / variant median (the baseline's own is 1).
// Throws seqbench::Error when the experiment names no baseline, the baseline is not among its
// variants, or a median is missing or not positive.
void finalize_speedups(nlohmann::json& experiment);

// The report form of a check. JSON cannot hold NaN or infinity, so a non-finite error or tolerance
// becomes null; validate_report then requires such a check (null max_abs_err or tolerance) to
// have passed = false. detail is written only when non-empty.
nlohmann::json check_to_json(const CheckResult& check);

// Writes `text` so that `path` holds either its old content or all of `text`, never a part: the
// text goes to a uniquely named temporary file in the same directory, is flushed and fsync'ed,
// then renamed over `path`. On any failure the temporary is removed and seqbench::Error names the
// path and the OS reason. The directory must exist; this function creates none (whether to is the
// caller's decision).
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// write_file_atomic of the document, indented by 2, with a final newline. Invalid UTF-8 in a
// string is written as U+FFFD rather than failing the whole run.
void write_json_atomic(const std::filesystem::path& path, const nlohmann::json& doc);

// --- reading reports ----------------------------------------------------------------------------
// meta.runner of the reports that suites/pytorch/ writes (absent in seqbench's own).
inline constexpr const char* kPytorchRunner = "pytorch";
bool is_pytorch_report(const nlohmann::json& report);

// meta.device.name, or "no GPU" for a run without one.
std::string report_device_name(const nlohmann::json& meta);

// A variant's component_of: the whole variant it times a part of; empty for a whole variant.
std::string report_component_of(const nlohmann::json& variant);

// The first 7 hex digits of meta.git_sha ("unknown" as it is), with "-dirty" for a dirty tree.
std::string report_short_sha(const nlohmann::json& meta);

// Whether a report's numbers are of --quick shapes: meta.quick where it says, else what every entry
// of meta.parts says alike (suites/pytorch records it there); nullopt when unknown (older reports).
std::optional<bool> report_quick(const nlohmann::json& meta);

// A PyTorch variant's quick flag: its part's (meta.parts[id == variant.part]), else its report's.
std::optional<bool> variant_quick(const nlohmann::json& meta, const nlohmann::json& variant);

// Reads and validates a report. Throws seqbench::Error with a one-line message when the file is
// missing ("report 'x.json' not found"), unreadable, not JSON (with the byte offset), or not a
// valid seqbench.report/1 document (the first few problems).
nlohmann::json read_report(const std::filesystem::path& path);

}  // namespace seqbench
