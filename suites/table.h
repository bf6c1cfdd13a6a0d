// Paper-style speedup tables from reports: the one table printer of the project.
//
// Markdown gives, per report, a heading (suite, device or "no GPU", short git sha, timestamp),
// the skipped suites, then "### Summary": one table per experiment family, then "### Details": one
// table per experiment (a row per variant), then the memory accounting and a checks summary that
// lists the failed checks.
//
// Summary tables (the paper-style view, LightSeq2 Fig. 16-19): an experiment's family is its name
// up to the first '/' ("layernorm_fwd", "encoder_bwd", "adam"), up to the second for
// gemm_epilogue ("gemm_epilogue/bias_gelu"); families in order of first appearance, a row per
// experiment in report order. Columns: the rest of the name (the params where the name has no
// rest), the baseline's median ms (headed by the baseline's name when the family's experiments
// share it, else "baseline"), then for each non-baseline variant of the family, in order of
// appearance: median ms, speedup over the baseline, and its GB/s, % copy BW and TFLOP/s columns,
// each only where some row of the family has that rate. A variant an experiment lacks is "—".
// With PyTorch reports, the "vs torch" columns (below) of each row's best (fastest) non-baseline
// variant that is not a component (component_of), preceded by a "best" column naming it when the
// family has several such variants; a component gets no "vs torch" cells, and a line under the
// summary says what it times. CSV has a component_of column after speedup. An
// experiment the runner left out (a failed run/<suite>/<exp>/<variant> check) is in no table. CSV gives one
// RFC 4180 table (CRLF line ends, a single header row) whose rows carry the suite and device, so that several
// reports become one table; it holds the variant rows only, since a second table in the same file would no
// longer be one CSV.
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

// Given reports of suites/pytorch/ (meta.runner == kPytorchRunner, suites/report.h) next to seqbench's,
// render_tables adds a column per PyTorch variant to every seqbench variant row: "vs torch eager",
// "vs torch.compile" (always both, once any PyTorch report is given) and "vs torch <other>" for
// other variants PyTorch measured in that suite (the trainer's "torch_fused"). Each cell is the
// PyTorch variant's median over this row's median (above 1: this row is faster), matched by suite,
// device name and experiment name; "—" (empty in CSV) where PyTorch has no such experiment or
// variant. CSV then also gets a "runner" column ("seqbench" or "pytorch") after "device". Without
// PyTorch reports the tables are exactly as before.
// "markdown" or "csv"; throws seqbench::Error naming the value and the accepted ones.
TableFormat parse_table_format(std::string_view name);

// Throws seqbench::Error when a report is not a valid seqbench.report/1 document.
std::string render_tables(const std::vector<nlohmann::json>& reports, TableFormat format);

}  // namespace seqbench
