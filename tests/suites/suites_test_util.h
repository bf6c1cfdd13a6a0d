// Helpers shared by the tests of suites/: a valid report to start from, a scratch folder, and
// error capture.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace seqbench::testing {

// A complete, valid report: a device with known copy bandwidth, one experiment with a baseline
// and a faster variant, two checks. Tests break one thing in a copy and expect exactly one problem.
inline nlohmann::json valid_report() {
  return R"json({
    "schema": "seqbench.report/1",
    "suite": "layernorm",
    "meta": {
      "seqbench_version": "0.1.0",
      "git_sha": "3f5c2a9e8b7d6c5f4e3a2b1c0d9e8f7a6b5c4d3e",
      "git_dirty": false,
      "timestamp": "2026-11-22T10:00:00Z",
      "host": "gpu-node-17",
      "seed": 1234,
      "build": {"type": "Release", "flags": "-O3", "cuda_architectures": "90"},
      "device": {
        "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132,
        "l2_bytes": 52428800, "memory_bytes": 85045870592,
        "clocks": {"sm_max_mhz": 1980, "memory_max_mhz": 2619},
        "driver": "13.0", "runtime": "13.0", "cublas": "13.0.0", "copy_gbps": 2950.0
      }
    },
    "experiments": [{
      "name": "layernorm_fwd",
      "params": {"rows": 4096, "cols": 1024, "dtype": "bf16"},
      "baseline": "eager",
      "variants": [
        {"name": "eager", "samples": 200, "median_ms": 0.0251, "p20_ms": 0.0249, "p80_ms": 0.0254,
         "cv": 0.012, "bytes": 16781312, "flops": 0, "gbps": 668.578, "tflops": null,
         "pct_copy_bw": 22.66, "speedup": 1.0},
        {"name": "fused", "samples": 200, "median_ms": 0.0062, "p20_ms": 0.0061, "p80_ms": 0.0063,
         "cv": 0.021, "bytes": 16781312, "flops": 0, "gbps": 2706.66, "tflops": null,
         "pct_copy_bw": 91.751, "speedup": 4.048}
      ]
    }],
    "checks": [
      {"name": "layernorm_fwd vs reference", "passed": true, "max_abs_err": 0.0078,
       "max_rel_err": 0.012, "tolerance": 0.0156, "detail": "2 ulp(bf16)"},
      {"name": "layernorm_bwd vs reference", "passed": false, "max_abs_err": 0.5,
       "max_rel_err": 0.9, "tolerance": 0.0156}
    ]
  })json"_json;
}

// The message (without "file:line: ") of the seqbench::Error that f throws, or a note that it
// threw none, so that a test can compare the whole message.
template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "<no seqbench::Error thrown>";
}

// A failed check of the schema's shape (errors and tolerance as given; no detail).
inline nlohmann::json failed_check(const std::string& name, double error = 0, double tolerance = 0) {
  return {{"name", name},
          {"passed", false},
          {"max_abs_err", error},
          {"max_rel_err", error},
          {"tolerance", tolerance}};
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh folder under the system's temporary directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "seqbench-suites-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

  // The names of the entries in the folder, sorted: the evidence that nothing stray was left.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_))
      names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace seqbench::testing
