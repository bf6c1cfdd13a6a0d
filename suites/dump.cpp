#include "suites/dump.h"

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>

#include "core/cuda_check.h"
#include "core/device_info.h"
#include "core/error.h"
#include "suites/experiment.h"
#include "suites/npy.h"
#include "suites/report.h"

namespace seqbench {

std::string dump_folder_name(const std::string& experiment) {
  std::string out;
  for (const char c : experiment) out += (c == '/' || c == ',' || c == '=' || c == ' ') ? '_' : c;
  return out;
}

DumpResult dump_experiments(const DumpOptions& options, std::ostream& log) {
  const DeviceProbe probe = probe_device(0);
  SEQBENCH_REQUIRE(probe.info.has_value(), "seqbench dump needs a GPU: " << probe.reason);
  std::regex re;
  try {
    re = std::regex(options.filter.empty() ? std::string(".*") : options.filter, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    SEQBENCH_FAIL("invalid --filter regex '" << options.filter << "': " << e.what());
  }
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{options.quick});
  std::vector<const SuiteSpec*> selected;
  for (const SuiteSpec& s : all)
    if (options.suites.empty()) selected.push_back(&s);
  for (const std::string& name : options.suites) selected.push_back(&find_suite(all, name));

  DumpResult result;
  for (const SuiteSpec* suite : selected) {
    for (const ExperimentSpec& e : suite->experiments) {
      if (!std::regex_search(suite->name + "/" + e.name, re)) continue;
      if (e.dump_variant.empty() || !e.prepare) {
        ++result.no_dump;
        continue;
      }
      PreparedExperiment p = e.prepare();
      SEQBENCH_REQUIRE(p.dump, "dump: experiment " << e.name << " names dump_variant '" << e.dump_variant
                                                   << "' but its prepare() set no dump function");
      const std::string& variant = e.dump_variant;
      std::size_t index = e.variants.size();
      for (std::size_t v = 0; v < e.variants.size(); ++v)
        if (e.variants[v].name == variant) index = v;
      SEQBENCH_REQUIRE(index < p.variants.size(),
                       "dump: experiment " << e.name << " has no variant '" << variant << "'");
      p.variants[index](nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<DumpArray> arrays = p.dump();

      const std::filesystem::path dir = options.out_dir / suite->name / dump_folder_name(e.name);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      SEQBENCH_REQUIRE(!ec, "cannot create dump folder '" << dir.string() << "': " << ec.message());
      nlohmann::json manifest = {{"schema", "seqbench.dump/1"}, {"suite", suite->name},
                                 {"experiment", e.name},        {"params", e.params},
                                 {"variant", variant},          {"arrays", nlohmann::json::array()}};
      for (const DumpArray& a : arrays) {
        const std::string file = a.name + ".npy";
        write_npy(dir / file, npy_descr(a.dtype), a.shape, a.bytes.data(), a.bytes.size());
        manifest["arrays"].push_back({{"name", a.name},
                                      {"role", a.role},
                                      {"dtype", std::string(dtype_name(a.dtype))},
                                      {"descr", std::string(npy_descr(a.dtype))},
                                      {"shape", a.shape},
                                      {"file", file}});
        ++result.files;
      }
      write_json_atomic(dir / "manifest.json", manifest);  // last: a complete folder has one
      ++result.dumped;
      log << "dumped " << suite->name << "/" << e.name << " (" << arrays.size() << " arrays)\n";
    }
  }
  return result;
}

}  // namespace seqbench
