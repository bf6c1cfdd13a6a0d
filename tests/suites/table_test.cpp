#include "suites/table.h"

#include <gtest/gtest.h>

#include "suites/report.h"
#include "suites_test_util.h"

namespace seqbench {
namespace {

using nlohmann::json;
using testing::contains;
using testing::error_message;
using testing::valid_report;

// valid_report() plus an experiment whose params and variant name need quoting in CSV and
// escaping in Markdown, and whose rates are partly null; and a failing check whose detail holds a
// pipe and a line break.
json gpu_report() {
  json r = valid_report();
  r["experiments"].push_back(json::parse(R"json({
    "name": "gemm", "params": {"m": 8192, "note": "a \"b\", c|d", "tf32": false},
    "baseline": "cublas",
    "variants": [
      {"name": "cublas", "samples": 50, "median_ms": 1.39, "p20_ms": 1.38, "p80_ms": 1.41, "cv": 0.01,
       "bytes": 0, "flops": 1.1e12, "gbps": null, "tflops": 791.37, "pct_copy_bw": null, "speedup": 1},
      {"name": "tuned, \"v2\"", "samples": 50, "median_ms": 1234.56, "p20_ms": 12.345, "p80_ms": 2000.4,
       "cv": 0.5, "bytes": 0, "flops": 1.1e12, "gbps": null, "tflops": 0.000891, "pct_copy_bw": null,
       "speedup": 0.001126}
    ]
  })json"));
  r["checks"][1]["detail"] = "max |err| at row 7\nsee log";
  return r;
}

// No device, a dirty tree, one CPU-timed experiment, a skipped suite and only passing checks.
json cpu_report() {
  return json::parse(R"json({
    "schema": "seqbench.report/1", "suite": "softmax",
    "meta": {"seqbench_version": "0.1.0", "git_sha": "unknown", "git_dirty": true,
             "timestamp": "2026-11-22T11:00:00+01:00", "host": "laptop", "seed": 0,
             "build": {"type": "Debug", "flags": "", "cuda_architectures": "90"}, "device": null},
    "experiments": [{"name": "softmax_ref", "params": {}, "baseline": "eager", "variants": [
      {"name": "eager", "samples": 1, "median_ms": 3, "p20_ms": 3, "p80_ms": 3, "cv": 0,
       "bytes": 1e6, "flops": 0, "gbps": 0.333333, "tflops": null, "pct_copy_bw": null, "speedup": 1}]}],
    "checks": [{"name": "softmax rows sum to 1", "passed": true, "max_abs_err": 1e-7, "max_rel_err": 1e-7,
                "tolerance": 1e-6}],
    "skipped": [{"suite": "decoding", "reason": "needs a GPU: no CUDA device"}]
  })json");
}

// What suites/pytorch/ writes for valid_report()'s experiment on the same device: eager 0.031 ms,
// torch.compile 0.0124 ms, and a variant of another name.
json torch_report() {
  json r = valid_report();
  r["meta"]["runner"] = "pytorch";
  r["meta"]["frameworks"] = {{"torch", "2.11.0"}, {"triton", "3.5.0"}, {"cudnn", nullptr}};
  r["checks"] = json::array();
  r["experiments"][0] = json::parse(R"json({
    "name": "layernorm_fwd", "params": {"rows": 4096, "cols": 1024, "dtype": "bf16"},
    "baseline": "torch_eager",
    "variants": [
      {"name": "torch_eager", "samples": 100, "median_ms": 0.031, "p20_ms": 0.030, "p80_ms": 0.032, "cv": 0.01,
       "bytes": 16781312, "flops": 0, "gbps": 541.3, "tflops": null, "pct_copy_bw": 18.35, "speedup": 1},
      {"name": "torch_compile", "samples": 100, "median_ms": 0.0124, "p20_ms": 0.0123, "p80_ms": 0.0125,
       "cv": 0.01, "bytes": 16781312, "flops": 0, "gbps": 1353.3, "tflops": null, "pct_copy_bw": 45.87,
       "speedup": 2.5},
      {"name": "torch_fused", "samples": 100, "median_ms": 0.0502, "p20_ms": 0.05, "p80_ms": 0.051, "cv": 0.01,
       "bytes": 16781312, "flops": 0, "gbps": 334.3, "tflops": null, "pct_copy_bw": 11.33, "speedup": 0.62}
    ]})json");
  return r;
}

// A variant as the runner writes it on valid_report()'s device (copy bandwidth 2950 GB/s): rates
// from bytes and flops, null where the amount is 0; p20 = p80 = median.
json variant(const std::string& name, double median_ms, double bytes, double flops, double speedup) {
  const double seconds = median_ms * 1e-3;
  const json gbps = bytes > 0 ? json(bytes / seconds / 1e9) : json(nullptr);
  return {{"name", name},
          {"samples", 100},
          {"median_ms", median_ms},
          {"p20_ms", median_ms},
          {"p80_ms", median_ms},
          {"cv", 0.01},
          {"bytes", bytes},
          {"flops", flops},
          {"gbps", gbps},
          {"tflops", flops > 0 ? json(flops / seconds / 1e12) : json(nullptr)},
          {"pct_copy_bw", gbps.is_null() ? json(nullptr) : json(gbps.get<double>() / 2950.0 * 100.0)},
          {"speedup", speedup}};
}

json experiment(const std::string& name, const std::string& baseline, std::vector<json> variants) {
  return {{"name", name}, {"params", {{"dtype", "bf16"}}}, {"baseline", baseline}, {"variants", variants}};
}

// Named as the suites name them: two LayerNorm experiments, and GEMM epilogues (bytes 0: no GB/s)
// of two ops, which are two families; the second bias_gelu shape has a third variant.
json family_report() {
  json r = valid_report();
  r["checks"] = json::array();
  r["experiments"] = {
      experiment("layernorm_fwd/bf16/rows=4096,cols=1024", "unfused",
                 {variant("unfused", 0.025, 16e6, 0, 1), variant("fused", 0.00625, 16e6, 0, 4)}),
      experiment("gemm_epilogue/bias_gelu/bf16/m=4096,n=4096,k=1024", "separate",
                 {variant("separate", 0.5, 0, 3.4e10, 1), variant("epilogue", 0.4, 0, 3.4e10, 1.25)}),
      experiment("layernorm_fwd/f16/rows=4096,cols=1024", "unfused",
                 {variant("unfused", 0.02, 16e6, 0, 1), variant("fused", 0.01, 16e6, 0, 2)}),
      experiment("gemm_epilogue/bias_gelu/bf16/m=8192,n=4096,k=1024", "separate",
                 {variant("separate", 1, 0, 6.8e10, 1), variant("epilogue", 0.8, 0, 6.8e10, 1.25),
                  variant("epilogue_aux", 0.5, 0, 6.8e10, 2)}),
      experiment("gemm_epilogue/bias_relu/bf16/m=4096,n=4096,k=1024", "separate",
                 {variant("separate", 0.5, 0, 3.4e10, 1), variant("epilogue", 0.25, 0, 3.4e10, 2)}),
  };
  return r;
}

TEST(RenderTables, SummaryHasOneTablePerFamilyBeforeTheDetails) {
  const std::string md = render_tables({family_report()}, TableFormat::markdown);
  // clang-format off
  const std::string expected =
      "## layernorm — NVIDIA H100 80GB HBM3 — 3f5c2a9 — 2026-11-22T10:00:00Z\n"
      "\n"
      "### Summary\n"
      "\n"
      "| layernorm_fwd | unfused ms | fused ms | fused speedup | fused GB/s | fused % copy BW |\n"
      "|---|---:|---:|---:|---:|---:|\n"
      "| bf16/rows=4096,cols=1024 | 0.0250 | 0.00625 | 4.00× | 2560 | 86.8 |\n"
      "| f16/rows=4096,cols=1024 | 0.0200 | 0.0100 | 2.00× | 1600 | 54.2 |\n"
      "\n"
      "| gemm_epilogue/bias_gelu | separate ms | epilogue ms | epilogue speedup | epilogue TFLOP/s | epilogue_aux ms | epilogue_aux speedup | epilogue_aux TFLOP/s |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n"
      "| bf16/m=4096,n=4096,k=1024 | 0.500 | 0.400 | 1.25× | 85.0 | — | — | — |\n"
      "| bf16/m=8192,n=4096,k=1024 | 1.00 | 0.800 | 1.25× | 85.0 | 0.500 | 2.00× | 136 |\n"
      "\n"
      "| gemm_epilogue/bias_relu | separate ms | epilogue ms | epilogue speedup | epilogue TFLOP/s |\n"
      "|---|---:|---:|---:|---:|\n"
      "| bf16/m=4096,n=4096,k=1024 | 0.500 | 0.250 | 2.00× | 136 |\n"
      "\n"
      "### Details\n"
      "\n";
  // clang-format on
  EXPECT_EQ(md.substr(0, expected.size()), expected);
  // The details follow in report order, a table per experiment.
  EXPECT_TRUE(
      contains(md, "| gemm_epilogue/bias_relu/bf16/m=4096,n=4096,k=1024 | dtype=bf16 | epilogue | 0.250 |"));
  EXPECT_TRUE(md.ends_with("\nChecks: none.\n"));
}

TEST(RenderTables, SummaryJoinsPytorchForTheBestVariant) {
  // PyTorch measured two of the experiments: eager 1.5 ms and compile 0.75 ms for the large
  // bias_gelu shape, whose best variant is epilogue_aux (0.5 ms); eager only for LayerNorm f16.
  json torch = family_report();
  torch["meta"]["runner"] = "pytorch";
  torch["experiments"] = {
      experiment("gemm_epilogue/bias_gelu/bf16/m=8192,n=4096,k=1024", "torch_eager",
                 {variant("torch_eager", 1.5, 0, 6.8e10, 1), variant("torch_compile", 0.75, 0, 6.8e10, 2)}),
      experiment("layernorm_fwd/f16/rows=4096,cols=1024", "torch_eager",
                 {variant("torch_eager", 0.04, 16e6, 0, 1)}),
  };
  const std::string md = render_tables({family_report(), torch}, TableFormat::markdown);
  // clang-format off
  EXPECT_TRUE(contains(md,
      "| layernorm_fwd | unfused ms | fused ms | fused speedup | fused GB/s | fused % copy BW | vs torch eager | vs torch.compile |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n"
      "| bf16/rows=4096,cols=1024 | 0.0250 | 0.00625 | 4.00× | 2560 | 86.8 | — | — |\n"
      "| f16/rows=4096,cols=1024 | 0.0200 | 0.0100 | 2.00× | 1600 | 54.2 | 4.00× | — |\n"));
  // Several non-baseline variants: a "best" column names the one the torch columns compare.
  EXPECT_TRUE(contains(md,
      "| gemm_epilogue/bias_gelu | separate ms | epilogue ms | epilogue speedup | epilogue TFLOP/s | epilogue_aux ms | epilogue_aux speedup | epilogue_aux TFLOP/s | best | vs torch eager | vs torch.compile |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n"
      "| bf16/m=4096,n=4096,k=1024 | 0.500 | 0.400 | 1.25× | 85.0 | — | — | — | epilogue | — | — |\n"
      "| bf16/m=8192,n=4096,k=1024 | 1.00 | 0.800 | 1.25× | 85.0 | 0.500 | 2.00× | 136 | epilogue_aux | 3.00× | 1.50× |\n"));
  // The same numbers as the best variant's row in the details.
  EXPECT_TRUE(contains(md, "| epilogue_aux | 0.500 | 0.500–0.500 | — | — | 136 | 2.00× | 3.00× | 1.50× |\n"));
  // The PyTorch report's own summary has no torch columns.
  EXPECT_TRUE(contains(md,
      "| gemm_epilogue/bias_gelu | torch_eager ms | torch_compile ms | torch_compile speedup | torch_compile TFLOP/s |\n"
      "|---|---:|---:|---:|---:|\n"
      "| bf16/m=8192,n=4096,k=1024 | 1.50 | 0.750 | 2.00× | 90.7 |\n"));
  EXPECT_TRUE(contains(md,
      "| layernorm_fwd | torch_eager ms |\n"
      "|---|---:|\n"
      "| f16/rows=4096,cols=1024 | 0.0400 |\n"));
  // clang-format on
}

// A component (component_of: a stage left out) is shown with its numbers but is never the best,
// never set against PyTorch, and the summary says what it is, once per family.
TEST(RenderTables, AComponentIsNeverTheBestNorSetAgainstPytorch) {
  json r = valid_report();
  r["checks"] = json::array();
  json part = variant("fused_update_only", 0.5, 22e6, 0, 4);
  part["component_of"] = "fused";
  r["experiments"] = {experiment("adam/bert-base", "per_tensor",
                                 {variant("per_tensor", 2, 22e6, 0, 1), variant("fused", 0.6, 22e6, 0, 3.33),
                                  variant("fused_master", 0.7, 22e6, 0, 2.86), part})};
  json torch = r;
  torch["meta"]["runner"] = "pytorch";
  torch["experiments"] = {
      experiment("adam/bert-base", "torch_eager",
                 {variant("torch_eager", 1.2, 22e6, 0, 1), variant("torch_compile", 0.9, 22e6, 0, 1.33)})};
  ASSERT_NO_THROW(require_valid_report(r, "the component report"));
  const std::string md = render_tables({r, torch}, TableFormat::markdown);
  // clang-format off
  EXPECT_TRUE(contains(md,
      "| bert-base | 2.00 | 0.600 | 3.33× | 37 | 1.2 | 0.700 | 2.86× | 31 | 1.1 | 0.500 | 4.00× | 44 | 1.5 | fused | 2.00× | 1.50× |\n"))
      << md;
  EXPECT_TRUE(contains(md,
      "\n`fused_update_only` times a part of `fused`, not the whole operation: its speedup is not a result and "
      "it is never the best; `fused` minus it is the time of what it leaves out.\n"))
      << md;
  // In the details, its "vs torch" cells are empty; the whole variant's are not.
  EXPECT_TRUE(contains(md, "| fused_update_only | 0.500 | 0.500–0.500 | 44 | 1.5 | — | 4.00× | — | — |\n")) << md;
  EXPECT_TRUE(contains(md, "| fused | 0.600 | 0.600–0.600 | 37 | 1.2 | — | 3.33× | 2.00× | 1.50× |\n")) << md;
  // CSV names the whole in its component_of column (empty for a whole variant).
  const std::string csv = render_tables({r, torch}, TableFormat::csv);
  EXPECT_TRUE(contains(csv, ",fused_update_only,0.500,0.500,0.500,44,1.5,,4.00,fused,,\r\n")) << csv;
  EXPECT_TRUE(contains(csv, ",fused,0.600,0.600,0.600,37,1.2,,3.33,,2.00,1.50\r\n")) << csv;
  // clang-format on
}

// What the "vs torch" numbers are against: the PyTorch variants' distinct notes, once, under the
// summary of the report they join (not under the PyTorch report's own, which has no such columns).
TEST(RenderTables, SummarySaysWhatThePytorchVariantsNote) {
  json torch = family_report();
  torch["meta"]["runner"] = "pytorch";
  json eager = variant("torch_eager", 0.04, 16e6, 0, 1);
  eager["note"] = "fp32 params, grads and state (torch.amp)";
  json compiled = variant("torch_compile", 0.03, 16e6, 0, 1);
  compiled["note"] = "fp32 params, grads and state (torch.amp)";  // the same note: said once
  json other = variant("torch_eager", 0.05, 16e6, 0, 1);
  other["note"] = "CUDA graph refused (x); timed without";
  torch["experiments"] = {
      experiment("layernorm_fwd/f16/rows=4096,cols=1024", "torch_eager", {eager, compiled}),
      experiment("layernorm_fwd/bf16/rows=4096,cols=1024", "torch_eager", {other})};
  const std::string md = render_tables({family_report(), torch}, TableFormat::markdown);
  const std::string line =
      "The PyTorch variants' notes: fp32 params, grads and state (torch.amp); CUDA graph refused (x); timed "
      "without.\n\n### Details";
  EXPECT_TRUE(contains(md, line)) << md;
  EXPECT_EQ(md.find(line), md.rfind(line)) << md;  // once: the PyTorch report's own tables do not repeat it
  // Without notes, no line.
  torch["experiments"] = {experiment("layernorm_fwd/f16/rows=4096,cols=1024", "torch_eager",
                                     {variant("torch_eager", 0.04, 16e6, 0, 1)})};
  EXPECT_FALSE(contains(render_tables({family_report(), torch}, TableFormat::markdown), "variants' notes"));
}

TEST(RenderTables, SummaryLeavesOutAFailedExperiment) {
  // The runner records a variant that threw as a failed check run/<suite>/<exp>/<variant> and
  // leaves the whole experiment out of the report: it is in no summary and no details.
  json r = family_report();
  r["experiments"].erase(4);  // gemm_epilogue/bias_relu
  r["experiments"].erase(2);  // layernorm_fwd/f16
  r["checks"].push_back({{"name", "run/layers/gemm_epilogue/bias_relu/bf16/m=4096,n=4096,k=1024/epilogue"},
                         {"passed", false},
                         {"max_abs_err", nullptr},
                         {"max_rel_err", nullptr},
                         {"tolerance", nullptr},
                         {"detail", "cuBLASLt has no algorithm"}});
  const std::string md = render_tables({r}, TableFormat::markdown);
  EXPECT_FALSE(contains(md, "| gemm_epilogue/bias_relu |"));
  EXPECT_FALSE(contains(md, "| f16/rows=4096"));
  EXPECT_FALSE(contains(md, "layernorm_fwd/f16/"));
  EXPECT_TRUE(contains(md, "| bf16/rows=4096,cols=1024 | 0.0250 | 0.00625 | 4.00× | 2560 | 86.8 |\n\n"));
  EXPECT_TRUE(contains(md, "| gemm_epilogue/bias_gelu | separate ms |"));
  EXPECT_TRUE(
      contains(md,
               "| run/layers/gemm_epilogue/bias_relu/bf16/m=4096,n=4096,k=1024/epilogue | — | — | — | "
               "cuBLASLt has no algorithm |\n"));
}

TEST(RenderTables, SummaryAcrossBaselineNames) {
  // Experiments of one family with different baselines: the column says "baseline", and a
  // variant that is one experiment's baseline is no other column in that row.
  json r = family_report();
  r["experiments"] = {
      experiment("adam/base", "eager", {variant("eager", 2, 0, 0, 1), variant("fused", 1, 0, 0, 2)}),
      experiment("adam/big", "fused", {variant("fused", 4, 0, 0, 1), variant("eager", 8, 0, 0, 0.5)})};
  // clang-format off
  EXPECT_TRUE(contains(render_tables({r}, TableFormat::markdown),
      "| adam | baseline ms | fused ms | fused speedup | eager ms | eager speedup |\n"
      "|---|---:|---:|---:|---:|---:|\n"
      "| base | 2.00 | 1.00 | 2.00× | — | — |\n"
      "| big | 4.00 | — | — | 8.00 | 0.50× |\n"));
  // clang-format on
}

TEST(RenderTables, JoinsPytorchReportsIntoSpeedupColumns) {
  json mine = valid_report();
  mine["checks"] = json::array();
  // clang-format off
  const std::string expected =
      "## layernorm — NVIDIA H100 80GB HBM3 — 3f5c2a9 — 2026-11-22T10:00:00Z\n"
      "\n"
      "### Summary\n"
      "\n"
      "| layernorm_fwd | eager ms | fused ms | fused speedup | fused GB/s | fused % copy BW | vs torch eager | vs torch.compile | vs torch fused |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      "| cols=1024, dtype=bf16, rows=4096 | 0.0251 | 0.00620 | 4.05× | 2707 | 91.8 | 5.00× | 2.00× | 8.10× |\n"
      "\n"
      "### Details\n"
      "\n"
      "| experiment | params | variant | median ms | p20–p80 ms | GB/s | % copy BW | TFLOP/s | speedup | vs torch eager | vs torch.compile | vs torch fused |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | eager | 0.0251 | 0.0249–0.0254 | 669 | 22.7 | — | 1.00× | 1.24× | 0.49× | 2.00× |\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | fused | 0.00620 | 0.00610–0.00630 | 2707 | 91.8 | — | 4.05× | 5.00× | 2.00× | 8.10× |\n"
      "\n"
      "Checks: none.\n"
      "\n"
      "## layernorm (PyTorch 2.11.0) — NVIDIA H100 80GB HBM3 — 3f5c2a9 — 2026-11-22T10:00:00Z\n"
      "\n"
      "### Summary\n"
      "\n"
      "| layernorm_fwd | torch_eager ms | torch_compile ms | torch_compile speedup | torch_compile GB/s | torch_compile % copy BW | torch_fused ms | torch_fused speedup | torch_fused GB/s | torch_fused % copy BW |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      "| cols=1024, dtype=bf16, rows=4096 | 0.0310 | 0.0124 | 2.50× | 1353 | 45.9 | 0.0502 | 0.62× | 334 | 11.3 |\n"
      "\n"
      "### Details\n"
      "\n"
      "| experiment | params | variant | median ms | p20–p80 ms | GB/s | % copy BW | TFLOP/s | speedup |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | torch_eager | 0.0310 | 0.0300–0.0320 | 541 | 18.4 | — | 1.00× |\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | torch_compile | 0.0124 | 0.0123–0.0125 | 1353 | 45.9 | — | 2.50× |\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | torch_fused | 0.0502 | 0.0500–0.0510 | 334 | 11.3 | — | 0.62× |\n"
      "\n"
      "Checks: none.\n";
  // clang-format on
  EXPECT_EQ(render_tables({mine, torch_report()}, TableFormat::markdown), expected);
  // The order of the inputs does not matter for the join.
  EXPECT_TRUE(
      contains(render_tables({torch_report(), mine}, TableFormat::markdown),
               "| fused | 0.00620 | 0.00610–0.00630 | 2707 | 91.8 | — | 4.05× | 5.00× | 2.00× | 8.10× |"));
}

TEST(RenderTables, MarksSpeedupsWhoseTwoSidesWereTimedDifferently) {
  // seqbench replayed CUDA graphs; torch's eager variant launched directly, its compiled one was
  // graphed, and its fused one does not say.
  json mine = valid_report();
  mine["checks"] = json::array();
  for (json& v : mine["experiments"][0]["variants"]) v["cuda_graph"] = true;
  json torch = torch_report();
  torch["experiments"][0]["variants"][0]["cuda_graph"] = false;
  torch["experiments"][0]["variants"][1]["cuda_graph"] = true;
  ASSERT_TRUE(validate_report(mine).empty());
  ASSERT_TRUE(validate_report(torch).empty());
  const std::string md = render_tables({mine, torch}, TableFormat::markdown);
  EXPECT_TRUE(contains(md, "| 91.8 | — | 4.05× | 5.00×† | 2.00× | 8.10× |\n")) << md;  // details
  EXPECT_TRUE(contains(md, "| 91.8 | 5.00×† | 2.00× | 8.10× |\n")) << md;              // summary
  EXPECT_TRUE(
      contains(md, "† The two sides of this speedup were timed differently: one replayed a CUDA graph"))
      << md;
  // CSV keeps the numbers alone.
  EXPECT_FALSE(contains(render_tables({mine, torch}, TableFormat::csv), "†"));
  // Timed alike, or not said: no mark and no legend.
  torch["experiments"][0]["variants"][0]["cuda_graph"] = true;
  EXPECT_FALSE(contains(render_tables({mine, torch}, TableFormat::markdown), "†"));
  EXPECT_FALSE(contains(render_tables({valid_report(), torch_report()}, TableFormat::markdown), "†"));
  // Both graphed, but their samples held different numbers of calls (copies of the inputs).
  for (json& v : mine["experiments"][0]["variants"]) v["calls_per_sample"] = 8;
  torch["experiments"][0]["variants"][0]["calls_per_sample"] = 1;
  torch["experiments"][0]["variants"][1]["calls_per_sample"] = 8;
  torch["experiments"][0]["variants"][2]["calls_per_sample"] = 8;
  ASSERT_TRUE(validate_report(mine).empty());
  ASSERT_TRUE(validate_report(torch).empty());
  const std::string calls = render_tables({mine, torch}, TableFormat::markdown);
  EXPECT_TRUE(contains(calls, "| 91.8 | 5.00×† | 2.00× | 8.10× |\n")) << calls;
  EXPECT_TRUE(contains(calls, "or their samples held different numbers of calls (`calls_per_sample`)"))
      << calls;
  torch["experiments"][0]["variants"][0]["calls_per_sample"] = 8;
  EXPECT_FALSE(contains(render_tables({mine, torch}, TableFormat::markdown), "†"));
  // A report older than the field timed one call a sample: against 8 that differs, against 1 not.
  torch["experiments"][0]["variants"][0].erase("calls_per_sample");
  EXPECT_TRUE(
      contains(render_tables({mine, torch}, TableFormat::markdown), "| 91.8 | 5.00×† | 2.00× | 8.10× |\n"));
  for (json& v : mine["experiments"][0]["variants"]) v["calls_per_sample"] = 1;
  torch["experiments"][0]["variants"][1]["calls_per_sample"] = 1;
  torch["experiments"][0]["variants"][2].erase("calls_per_sample");
  EXPECT_FALSE(contains(render_tables({mine, torch}, TableFormat::markdown), "†"));
}

TEST(RenderTables, PytorchColumnsOnlyWhereTheDeviceAndNameMatch) {
  json other_device = torch_report();
  other_device["meta"]["device"]["name"] = "NVIDIA H200";
  const std::string md = render_tables({valid_report(), other_device}, TableFormat::markdown);
  // The columns are there (a PyTorch report was given), but nothing on this device matches.
  EXPECT_TRUE(contains(md, "| speedup | vs torch eager | vs torch.compile | vs torch fused |"));
  EXPECT_TRUE(contains(md, "| 4.05× | — | — | — |"));

  json renamed = torch_report();
  renamed["experiments"][0]["name"] = "layernorm_bwd";
  EXPECT_TRUE(
      contains(render_tables({valid_report(), renamed}, TableFormat::markdown), "| 4.05× | — | — | — |"));

  // Another suite's PyTorch report adds only the two standard columns here.
  json other_suite = torch_report();
  other_suite["suite"] = "trainer";
  const std::string md2 = render_tables({valid_report(), other_suite}, TableFormat::markdown);
  EXPECT_TRUE(contains(md2, "| speedup | vs torch eager | vs torch.compile |\n"));
  EXPECT_TRUE(contains(md2, "| 4.05× | — | — |\n"));
}

TEST(RenderTables, NeverPairsQuickWithFullNumbers) {
  // Review H: the C++ side full, the PyTorch side --quick (or the other way round): no "vs torch" cell.
  json mine = valid_report();
  mine["meta"]["quick"] = false;
  json torch = torch_report();
  torch["meta"]["parts"] = json::array({{{"id", "p1"}, {"quick", true}}});
  EXPECT_TRUE(contains(render_tables({mine, torch}, TableFormat::markdown), "| 4.05× | — | — | — |"));
  // The same setting on both sides pairs as before; so does a side that does not say (older reports).
  torch["meta"]["parts"][0]["quick"] = false;
  EXPECT_FALSE(contains(render_tables({mine, torch}, TableFormat::markdown), "| 4.05× | — | — | — |"));
  mine["meta"].erase("quick");
  torch["meta"]["parts"][0]["quick"] = true;
  EXPECT_FALSE(contains(render_tables({mine, torch}, TableFormat::markdown), "| 4.05× | — | — | — |"));
  // A variant's own part decides: a quick torch_compile part merged into a full report is left out.
  mine["meta"]["quick"] = false;
  torch["meta"]["parts"] = json::array({{{"id", "p1"}, {"quick", false}}, {{"id", "p2"}, {"quick", true}}});
  for (json& v : torch["experiments"][0]["variants"]) v["part"] = v["name"] == "torch_compile" ? "p2" : "p1";
  const std::string md = render_tables({mine, torch}, TableFormat::markdown);
  EXPECT_FALSE(contains(md, "| 4.05× | — | — | — |")) << md;
  EXPECT_TRUE(contains(md, "× | — | ")) << md;  // eager paired, compile not
}

TEST(RenderTables, AQuickPytorchReportBeforeAFullOneDoesNotHideIt) {
  // The index kept only the first report of a name: quick then full paired nothing.
  json mine = valid_report();
  mine["meta"]["quick"] = false;
  json quick = torch_report();
  quick["meta"]["parts"] = json::array({{{"id", "p1"}, {"quick", true}}});
  json full = torch_report();
  full["meta"]["parts"] = json::array({{{"id", "p1"}, {"quick", false}}});
  ASSERT_TRUE(validate_report(quick).empty());
  const std::string paired = "| 91.8 | 5.00× | 2.00× | 8.10× |\n";  // the fused row, against full
  EXPECT_TRUE(contains(render_tables({mine, full, quick}, TableFormat::markdown), paired));
  const std::string quick_first = render_tables({mine, quick, full}, TableFormat::markdown);
  EXPECT_TRUE(contains(quick_first, paired)) << quick_first;
  // Two full reports: the first given wins.
  json slower = full;
  for (json& v : slower["experiments"][0]["variants"])
    for (const char* key : {"median_ms", "p20_ms", "p80_ms"}) v[key] = v[key].get<double>() * 2;
  EXPECT_TRUE(contains(render_tables({mine, full, slower}, TableFormat::markdown), paired));
  const std::string slower_first = render_tables({mine, slower, full}, TableFormat::markdown);
  EXPECT_TRUE(contains(slower_first, "| 91.8 | 10.00× | 4.00× | 16.19× |\n")) << slower_first;
}

TEST(RenderTables, ListsWhatWasNotRunAndAQuickRun) {
  json r = valid_report();
  r["not_run"] = json::array({{{"experiment", "softmax_fwd"}, {"reason", "not started: time budget"}}});
  r["meta"]["quick"] = true;
  const std::string md = render_tables({r}, TableFormat::markdown);
  EXPECT_TRUE(contains(md, "Not run:\n- softmax_fwd: not started: time budget\n")) << md;
  EXPECT_TRUE(contains(md, "Run: --quick shapes.\n")) << md;
  EXPECT_FALSE(
      contains(render_tables({valid_report()}, TableFormat::markdown), "Run: "));  // goldens unchanged
}

TEST(RenderTables, CsvWithPytorchAddsRunnerAndSpeedupColumns) {
  json mine = valid_report();
  // clang-format off
  const std::string expected =
      "suite,device,runner,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup,component_of,vs_torch_eager,vs_torch_compile,vs_torch_fused\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,seqbench,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",eager,0.0251,0.0249,0.0254,669,22.7,,1.00,,1.24,0.49,2.00\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,seqbench,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",fused,0.00620,0.00610,0.00630,2707,91.8,,4.05,,5.00,2.00,8.10\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,pytorch,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",torch_eager,0.0310,0.0300,0.0320,541,18.4,,1.00,,,,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,pytorch,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",torch_compile,0.0124,0.0123,0.0125,1353,45.9,,2.50,,,,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,pytorch,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",torch_fused,0.0502,0.0500,0.0510,334,11.3,,0.62,,,,\r\n";
  // clang-format on
  EXPECT_EQ(render_tables({mine, torch_report()}, TableFormat::csv), expected);
}

TEST(ParseTableFormat, AcceptsTheTwoFormats) {
  EXPECT_EQ(parse_table_format("markdown"), TableFormat::markdown);
  EXPECT_EQ(parse_table_format("md"), TableFormat::markdown);  // the CLI's documented spelling
  EXPECT_EQ(parse_table_format("csv"), TableFormat::csv);
}

TEST(ParseTableFormat, NamesTheValueAndTheAcceptedOnes) {
  EXPECT_EQ(error_message([] { parse_table_format("xml"); }),
            "unknown table format 'xml' (accepted: md, markdown, csv)");
  EXPECT_EQ(error_message([] { parse_table_format("CSV"); }),
            "unknown table format 'CSV' (accepted: md, markdown, csv)");
}

TEST(RenderTables, MarkdownGolden) {
  // One row per line, as the table reads.
  // clang-format off
  const std::string expected =
      "## layernorm — NVIDIA H100 80GB HBM3 — 3f5c2a9 — 2026-11-22T10:00:00Z\n"
      "\n"
      "### Summary\n"
      "\n"
      "| layernorm_fwd | eager ms | fused ms | fused speedup | fused GB/s | fused % copy BW |\n"
      "|---|---:|---:|---:|---:|---:|\n"
      "| cols=1024, dtype=bf16, rows=4096 | 0.0251 | 0.00620 | 4.05× | 2707 | 91.8 |\n"
      "\n"
      "| gemm | cublas ms | tuned, \"v2\" ms | tuned, \"v2\" speedup | tuned, \"v2\" TFLOP/s |\n"
      "|---|---:|---:|---:|---:|\n"
      "| m=8192, note=a \"b\", c\\|d, tf32=false | 1.39 | 1235 | 0.00× | 0.000891 |\n"
      "\n"
      "### Details\n"
      "\n"
      "| experiment | params | variant | median ms | p20–p80 ms | GB/s | % copy BW | TFLOP/s | speedup |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | eager | 0.0251 | 0.0249–0.0254 | 669 | 22.7 | — | 1.00× |\n"
      "| layernorm_fwd | cols=1024, dtype=bf16, rows=4096 | fused | 0.00620 | 0.00610–0.00630 | 2707 | 91.8 | — | 4.05× |\n"
      "\n"
      "| experiment | params | variant | median ms | p20–p80 ms | GB/s | % copy BW | TFLOP/s | speedup |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|\n"
      "| gemm | m=8192, note=a \"b\", c\\|d, tf32=false | cublas | 1.39 | 1.38–1.41 | — | — | 791 | 1.00× |\n"
      "| gemm | m=8192, note=a \"b\", c\\|d, tf32=false | tuned, \"v2\" | 1235 | 12.3–2000 | — | — | 0.000891 | 0.00× |\n"
      "\n"
      "Checks: 1 passed, 1 failed.\n"
      "\n"
      "| failed check | max abs err | max rel err | tolerance | detail |\n"
      "|---|---:|---:|---:|---|\n"
      "| layernorm_bwd vs reference | 5.00e-01 | 9.00e-01 | 1.56e-02 | max \\|err\\| at row 7 see log |\n"
      "\n"
      "## softmax — no GPU — unknown-dirty — 2026-11-22T11:00:00+01:00\n"
      "\n"
      "Skipped:\n"
      "- decoding: needs a GPU: no CUDA device\n"
      "\n"
      "### Summary\n"
      "\n"
      "| softmax_ref | eager ms |\n"
      "|---|---:|\n"
      "| — | 3.00 |\n"
      "\n"
      "### Details\n"
      "\n"
      "| experiment | params | variant | median ms | p20–p80 ms | GB/s | % copy BW | TFLOP/s | speedup |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|\n"
      "| softmax_ref |  | eager | 3.00 | 3.00–3.00 | 0 | — | — | 1.00× |\n"
      "\n"
      "Checks: 1 passed, 0 failed.\n";
  // clang-format on
  EXPECT_EQ(render_tables({gpu_report(), cpu_report()}, TableFormat::markdown), expected);
}

TEST(RenderTables, CsvGolden) {
  // clang-format off
  const std::string expected =
      "suite,device,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup,component_of\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",eager,0.0251,0.0249,0.0254,669,22.7,,1.00,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",fused,0.00620,0.00610,0.00630,2707,91.8,,4.05,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,gemm,\"m=8192, note=a \"\"b\"\", c|d, tf32=false\",cublas,1.39,1.38,1.41,,,791,1.00,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,gemm,\"m=8192, note=a \"\"b\"\", c|d, tf32=false\",\"tuned, \"\"v2\"\"\",1235,12.3,2000,,,0.000891,0.00,\r\n"
      "softmax,no GPU,softmax_ref,,eager,3.00,3.00,3.00,0,,,1.00,\r\n";
  // clang-format on
  EXPECT_EQ(render_tables({gpu_report(), cpu_report()}, TableFormat::csv), expected);
}

TEST(RenderTables, ThreeSignificantFiguresAlsoWhereRoundingCarriesIntoTheNextDecade) {
  // 9.9996 rounded to two decimals is "10.00", four figures; 99.996 to one is "100.0".
  json r = cpu_report();
  json& v = r["experiments"][0]["variants"][0];
  v["p20_ms"] = 0.99996;
  v["median_ms"] = 9.9996;
  v["p80_ms"] = 99.996;
  v["gbps"] = 1e6 / (9.9996e-3) * 1e-9;
  ASSERT_TRUE(validate_report(r).empty()) << validate_report(r)[0];
  const std::string csv = render_tables({r}, TableFormat::csv);
  EXPECT_TRUE(contains(csv, ",eager,10.0,1.00,100,")) << csv;
}

TEST(RenderTables, CsvQuotesLineBreaks) {
  json r = cpu_report();
  r["suite"] = "two\nlines";
  EXPECT_TRUE(contains(render_tables({r}, TableFormat::csv), "\r\n\"two\nlines\",no GPU,softmax_ref,"));
}

TEST(RenderTables, ReportWithoutExperimentsOrChecks) {
  json r = cpu_report();
  r["experiments"] = json::array();
  r["checks"] = json::array();
  r.erase("skipped");
  EXPECT_EQ(render_tables({r}, TableFormat::markdown),
            "## softmax — no GPU — unknown-dirty — 2026-11-22T11:00:00+01:00\n"
            "\n"
            "No timed experiments.\n"
            "\n"
            "Checks: none.\n");
  EXPECT_EQ(render_tables({r}, TableFormat::csv),
            "suite,device,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup,"
            "component_of\r\n");
}

// Checks with named values (the trainer suite's drift study) get a table of their own, passed or
// not, a column per name in the order first seen; checks without values are not in it.
TEST(RenderTables, ChecksWithValuesGetATableOfTheirOwn) {
  json r = cpu_report();
  r["experiments"] = json::array();
  r.erase("skipped");
  r["checks"] = json::array(
      {{{"name", "trainer/drift/f32/no_master"},
        {"passed", true},
        {"max_abs_err", 3e-6},
        {"max_rel_err", 1.1e-6},
        {"tolerance", 1e-5},
        {"values", {{"drift", 1.15e-6}, {"loss", 2.639}}}},
       {{"name", "plain"}, {"passed", true}, {"max_abs_err", 0}, {"max_rel_err", 0}, {"tolerance", 0}},
       {{"name", "trainer/drift/bf16/no_master/device"},
        {"passed", false},
        {"max_abs_err", 0.5},
        {"max_rel_err", 0.25},
        {"tolerance", 0},
        {"values", {{"differing_params", 512}, {"drift", nullptr}}}}});
  EXPECT_EQ(render_tables({r}, TableFormat::markdown),
            "## softmax — no GPU — unknown-dirty — 2026-11-22T11:00:00+01:00\n"
            "\n"
            "No timed experiments.\n"
            "\n"
            "Checks: 2 passed, 1 failed.\n"
            "\n"
            "| failed check | max abs err | max rel err | tolerance | detail |\n"
            "|---|---:|---:|---:|---|\n"
            "| trainer/drift/bf16/no_master/device | 5.00e-01 | 2.50e-01 | 0.00e+00 |  |\n"
            "\n"
            "| check | passed | drift | loss | differing_params |\n"
            "|---|---|---:|---:|---:|\n"
            "| trainer/drift/f32/no_master | yes | 1.15e-06 | 2.64e+00 |  |\n"
            "| trainer/drift/bf16/no_master/device | **no** | — |  | 5.12e+02 |\n");
}

TEST(RenderTables, NoReportsGiveNoMarkdownAndAHeaderOnlyCsv) {
  EXPECT_EQ(render_tables({}, TableFormat::markdown), "");
  EXPECT_EQ(render_tables({}, TableFormat::csv),
            "suite,device,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup,"
            "component_of\r\n");
}

TEST(RenderTables, RejectsAnInvalidReportByPosition) {
  json bad = cpu_report();
  bad["experiments"][0].erase("baseline");
  EXPECT_EQ(
      error_message([&] {
        render_tables({cpu_report(), bad}, TableFormat::markdown);
      }),
      "report #2 given to render_tables does not match seqbench.report/1: experiments[0].baseline: missing");
}

}  // namespace
}  // namespace seqbench
