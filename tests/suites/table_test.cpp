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

TEST(RenderTables, JoinsPytorchReportsIntoSpeedupColumns) {
  json mine = valid_report();
  mine["checks"] = json::array();
  // clang-format off
  const std::string expected =
      "## layernorm — NVIDIA H100 80GB HBM3 — 3f5c2a9 — 2026-11-22T10:00:00Z\n"
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

TEST(RenderTables, CsvWithPytorchAddsRunnerAndSpeedupColumns) {
  json mine = valid_report();
  // clang-format off
  const std::string expected =
      "suite,device,runner,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup,vs_torch_eager,vs_torch_compile,vs_torch_fused\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,seqbench,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",eager,0.0251,0.0249,0.0254,669,22.7,,1.00,1.24,0.49,2.00\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,seqbench,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",fused,0.00620,0.00610,0.00630,2707,91.8,,4.05,5.00,2.00,8.10\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,pytorch,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",torch_eager,0.0310,0.0300,0.0320,541,18.4,,1.00,,,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,pytorch,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",torch_compile,0.0124,0.0123,0.0125,1353,45.9,,2.50,,,\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,pytorch,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",torch_fused,0.0502,0.0500,0.0510,334,11.3,,0.62,,,\r\n";
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
      "suite,device,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",eager,0.0251,0.0249,0.0254,669,22.7,,1.00\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,layernorm_fwd,\"cols=1024, dtype=bf16, rows=4096\",fused,0.00620,0.00610,0.00630,2707,91.8,,4.05\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,gemm,\"m=8192, note=a \"\"b\"\", c|d, tf32=false\",cublas,1.39,1.38,1.41,,,791,1.00\r\n"
      "layernorm,NVIDIA H100 80GB HBM3,gemm,\"m=8192, note=a \"\"b\"\", c|d, tf32=false\",\"tuned, \"\"v2\"\"\",1235,12.3,2000,,,0.000891,0.00\r\n"
      "softmax,no GPU,softmax_ref,,eager,3.00,3.00,3.00,0,,,1.00\r\n";
  // clang-format on
  EXPECT_EQ(render_tables({gpu_report(), cpu_report()}, TableFormat::csv), expected);
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
  EXPECT_EQ(
      render_tables({r}, TableFormat::csv),
      "suite,device,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup\r\n");
}

TEST(RenderTables, NoReportsGiveNoMarkdownAndAHeaderOnlyCsv) {
  EXPECT_EQ(render_tables({}, TableFormat::markdown), "");
  EXPECT_EQ(
      render_tables({}, TableFormat::csv),
      "suite,device,experiment,params,variant,median_ms,p20_ms,p80_ms,gbps,pct_copy_bw,tflops,speedup\r\n");
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
