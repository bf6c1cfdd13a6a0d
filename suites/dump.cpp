#include "suites/dump.h"

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <set>

#include "core/cuda_check.h"
#include "core/device_info.h"
#include "core/error.h"
#include "suites/experiment.h"
#include "suites/npy.h"
#include "suites/report.h"
#include "suites/runner.h"

namespace seqbench {

std::string dump_folder_name(const std::string& experiment) {
  std::string out;
  for (const char c : experiment) out += (c == '/' || c == ',' || c == '=' || c == ' ') ? '_' : c;
  return out;
}

std::string dump_dtype_name(const DumpArray& array) {
  if (array.int_type.empty()) return std::string(dtype_name(array.dtype));
  SEQBENCH_REQUIRE(
      array.int_type == "u8" || array.int_type == "i32",
      "dump: array '" << array.name << "' has int_type '" << array.int_type << "' (expected u8 or i32)");
  return array.int_type;
}

std::string dump_descr(const DumpArray& array) {
  const std::string type = dump_dtype_name(array);
  if (type == "u8") return "|u1";
  if (type == "i32") return "<i4";
  return std::string(npy_descr(array.dtype));
}

namespace {
template <class I>
DumpArray int_array(std::string name, std::string role, const std::vector<I>& host,
                    std::vector<std::int64_t> shape, const char* int_type) {
  DumpArray a{std::move(name), std::move(role), DType::f32, std::move(shape), {}, int_type};
  a.bytes.resize(host.size() * sizeof(I));
  if (!host.empty()) std::memcpy(a.bytes.data(), host.data(), a.bytes.size());
  return a;
}
}  // namespace

DumpArray dump_array(std::string name, std::string role, const DeviceBuffer<std::uint8_t>& buffer,
                     std::vector<std::int64_t> shape) {
  return int_array(std::move(name), std::move(role), buffer.copy_to_host(), std::move(shape), "u8");
}

DumpArray dump_array(std::string name, std::string role, const DeviceBuffer<std::int32_t>& buffer,
                     std::vector<std::int64_t> shape) {
  return int_array(std::move(name), std::move(role), buffer.copy_to_host(), std::move(shape), "i32");
}

DumpArray dump_host_array(std::string name, std::string role, const std::vector<std::uint8_t>& values,
                          std::vector<std::int64_t> shape) {
  return int_array(std::move(name), std::move(role), values, std::move(shape), "u8");
}

DumpArray dump_host_array(std::string name, std::string role, const std::vector<std::int32_t>& values,
                          std::vector<std::int64_t> shape) {
  return int_array(std::move(name), std::move(role), values, std::move(shape), "i32");
}

std::vector<std::uint8_t> unpack_keep_mask(const std::vector<std::uint8_t>& packed, std::size_t n) {
  SEQBENCH_REQUIRE(packed.size() >= n / 8 + (n % 8 != 0 ? 1 : 0),
                   "unpack_keep_mask: " << packed.size() << " bytes hold fewer than " << n << " bits");
  std::vector<std::uint8_t> keep(n);
  for (std::size_t i = 0; i < n; ++i) keep[i] = static_cast<std::uint8_t>((packed[i >> 3] >> (i & 7)) & 1u);
  return keep;
}

std::size_t write_dump_folder(const std::filesystem::path& dir, const std::string& suite,
                              const std::string& experiment, const nlohmann::json& params,
                              const std::string& variant, const std::vector<DumpArray>& arrays) {
  std::set<std::string> names;
  for (const DumpArray& a : arrays) {
    SEQBENCH_REQUIRE(names.insert(a.name).second,
                     "dump: experiment " << experiment << " names array '" << a.name << "' twice");
    SEQBENCH_REQUIRE(a.role == "input" || a.role == "output",
                     "dump: array '" << a.name << "' has role '" << a.role << "' (expected input or output)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SEQBENCH_REQUIRE(!ec, "cannot create dump folder '" << dir.string() << "': " << ec.message());
  // A manifest from an earlier dump goes first: until the new one is written, the folder is incomplete.
  std::filesystem::remove(dir / "manifest.json", ec);
  SEQBENCH_REQUIRE(!ec, "cannot remove '" << (dir / "manifest.json").string() << "': " << ec.message());
  nlohmann::json manifest = {{"schema", "seqbench.dump/1"}, {"suite", suite},
                             {"experiment", experiment},    {"params", params},
                             {"variant", variant},          {"arrays", nlohmann::json::array()}};
  std::size_t files = 0;
  for (const DumpArray& a : arrays) {
    const std::string file = a.name + ".npy";
    const std::string descr = dump_descr(a);
    write_npy(dir / file, descr, a.shape, a.bytes.data(), a.bytes.size());
    manifest["arrays"].push_back({{"name", a.name},
                                  {"role", a.role},
                                  {"dtype", dump_dtype_name(a)},
                                  {"descr", descr},
                                  {"shape", a.shape},
                                  {"file", file}});
    ++files;
  }
  write_json_atomic(dir / "manifest.json", manifest);  // last: a complete folder has one
  return files;
}

DumpResult dump_experiments(const DumpOptions& options, std::ostream& log) {
  const DeviceProbe probe = probe_device(0);
  SEQBENCH_REQUIRE(probe.info.has_value(), "seqbench dump needs a GPU: " << probe.reason);
  const std::regex re = compile_filter(options.filter);
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{options.quick});
  const std::vector<const SuiteSpec*> selected = select_suites(all, options.suites);

  DumpResult result;
  for (const SuiteSpec* suite : selected) {
    for (const ExperimentSpec& e : suite->experiments) {
      if (!std::regex_search(suite->name + "/" + e.name, re)) continue;
      if (e.dump_variant.empty() || (!e.prepare && !e.dump_standalone)) {
        ++result.no_dump;
        continue;
      }
      try {
        const std::string& variant = e.dump_variant;
        std::size_t index = e.variants.size();
        for (std::size_t v = 0; v < e.variants.size(); ++v)
          if (e.variants[v].name == variant) index = v;
        SEQBENCH_REQUIRE(index < e.variants.size(),
                         "dump: experiment " << e.name << " has no variant '" << variant << "'");
        std::vector<DumpArray> arrays;
        nlohmann::json params = e.params;
        params.update(e.dump_params);
        if (e.dump_standalone) {
          arrays = e.dump_standalone(params);
        } else {
          PreparedExperiment p = e.prepare();
          SEQBENCH_REQUIRE(p.dump, "dump: experiment " << e.name << " names dump_variant '" << variant
                                                       << "' but its prepare() set no dump function");
          SEQBENCH_REQUIRE(index < p.variants.size(), "dump: experiment "
                                                          << e.name << " prepared " << p.variants.size()
                                                          << " variants of " << e.variants.size());
          p.variants[index](nullptr);
          SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
          arrays = p.dump();
        }

        const std::filesystem::path dir = options.out_dir / suite->name / dump_folder_name(e.name);
        result.files += write_dump_folder(dir, suite->name, e.name, params, variant, arrays);
        ++result.dumped;
        log << "dumped " << suite->name << "/" << e.name << " (" << arrays.size() << " arrays)\n"
            << std::flush;
      } catch (const std::exception& ex) {
        const Error* error = dynamic_cast<const Error*>(&ex);
        result.failed.push_back(suite->name + "/" + e.name + ": " + (error ? error->message() : ex.what()));
        log << "FAILED " << result.failed.back() << "\n" << std::flush;
      }
    }
  }
  return result;
}

}  // namespace seqbench
