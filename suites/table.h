// Paper-style speedup tables from reports: the one table printer of the project.
//
// Markdown gives, per report, a heading (suite, device or "no GPU", short git sha, timestamp),
// the skipped suites, one table per experiment (a row per variant) and a checks summary that
// lists the failed checks. CSV gives one RFC 4180 table (CRLF line ends, a single header row)
// whose rows carry the suite and device, so that several reports become one table; it holds the
// variant rows only, since a second table in the same file would no longer be one CSV.
//
// Numbers: times in ms to 3 significant figures, GB/s with no decimals, % of copy bandwidth with
// one, TFLOP/s to 3 significant figures, speedup with two (and a "×" in Markdown). A null value
// prints as "—" in Markdown and as an empty field in CSV. The output depends only on the input.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace seqbench {

enum class TableFormat { markdown, csv };

// meta.runner of the reports that suites/pytorch/ writes. Given such reports next to seqbench's,
// render_tables adds a column per PyTorch variant to every seqbench variant row: "vs torch eager",
// "vs torch.compile" (always both, once any PyTorch report is given) and "vs torch <other>" for
// other variants PyTorch measured in that suite (the trainer's "torch_fused"). Each cell is the
// PyTorch variant's median over this row's median (above 1: this row is faster), matched by suite,
// device name and experiment name; "—" (empty in CSV) where PyTorch has no such experiment or
// variant. CSV then also gets a "runner" column ("seqbench" or "pytorch") after "device". Without
// PyTorch reports the tables are exactly as before.
inline constexpr const char* kPytorchRunner = "pytorch";

// "markdown" or "csv"; throws seqbench::Error naming the value and the accepted ones.
TableFormat parse_table_format(std::string_view name);

// Throws seqbench::Error when a report is not a valid seqbench.report/1 document.
std::string render_tables(const std::vector<nlohmann::json>& reports, TableFormat format);

}  // namespace seqbench
