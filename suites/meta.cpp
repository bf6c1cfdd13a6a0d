#include "suites/meta.h"

#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <sstream>

#include "core/build_info.h"

namespace seqbench {
namespace {

std::string host_name() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) != 0) return "unknown";
  return buffer.data();
}

// A PCI bus id as the runtime writes it ("0000:1a:00.0"): hex digits, ':' and '.', nothing a shell
// would read otherwise.
bool is_pci_bus_id(const std::string& id) {
  if (id.empty()) return false;
  for (const char c : id)
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
  return true;
}

// Current clocks and clock-event (throttle) reasons, read through nvidia-smi where it exists.
// Best effort: any failure leaves the fields null, which the schema allows. The device is named
// by its PCI bus id: nvidia-smi's indices ignore CUDA_VISIBLE_DEVICES, so the CUDA ordinal read
// another GPU's clocks on a node where they differ. `timeout`: a wedged driver must not hang the
// report (tools/gpu.sh bounds its own nvidia-smi calls the same way).
nlohmann::json current_clocks(const std::string& pci_bus_id) {
  nlohmann::json clocks = {{"sm_mhz", nullptr}, {"memory_mhz", nullptr}, {"clock_event_reasons", nullptr}};
  if (!is_pci_bus_id(pci_bus_id)) return clocks;
  for (const char* field : {"clocks_event_reasons.active", "clocks_throttle_reasons.active"}) {
    const std::string command = "timeout 10 nvidia-smi --id=" + pci_bus_id +
                                " --query-gpu=clocks.sm,clocks.mem," + field +
                                " --format=csv,noheader,nounits 2>/dev/null";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    if (!pipe) return clocks;
    std::array<char, 512> line{};
    if (!fgets(line.data(), static_cast<int>(line.size()), pipe.get())) continue;
    std::stringstream fields(line.data());
    std::string sm, mem, reasons;
    if (!std::getline(fields, sm, ',') || !std::getline(fields, mem, ',') || !std::getline(fields, reasons))
      continue;
    try {
      clocks["sm_mhz"] = std::stoi(sm);
      clocks["memory_mhz"] = std::stoi(mem);
    } catch (const std::exception&) {
      continue;
    }
    while (!reasons.empty() && std::isspace(static_cast<unsigned char>(reasons.back()))) reasons.pop_back();
    while (!reasons.empty() && std::isspace(static_cast<unsigned char>(reasons.front()))) reasons.erase(0, 1);
    clocks["clock_event_reasons"] = reasons;
    return clocks;
  }
  return clocks;
}

}  // namespace

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> buffer{};
  std::strftime(buffer.data(), buffer.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer.data();
}

std::string device_slug(const DeviceProbe& probe) {
  if (!probe.info) return "cpu";
  std::string slug;
  for (const char c : probe.info->name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!slug.empty() && slug.back() != '-') {
      slug += '-';
    }
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "gpu" : slug;
}

nlohmann::json build_json() {
  const BuildInfo build = build_info();
  return {{"type", build.build_type},
          {"flags", build.flags},
          {"cuda_architectures", build.cuda_architectures},
          {"nvcc", build.cuda_compiler_version},
          {"cxx_compiler", build.cxx_compiler}};
}

nlohmann::json device_json(const DeviceProbe& probe, std::optional<double> copy_gbps) {
  if (!probe.info) return nullptr;
  const DeviceInfo& d = *probe.info;
  nlohmann::json clocks = current_clocks(d.pci_bus_id);
  clocks["sm_max_mhz"] = d.sm_clock_max_mhz;
  clocks["memory_max_mhz"] = d.memory_clock_max_mhz;
  return {{"name", d.name},
          {"compute_capability", d.compute_capability()},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"memory_bytes", d.memory_bytes},
          {"memory_bus_bits", d.memory_bus_bits},
          {"clocks", clocks},
          {"driver", d.driver},
          {"runtime", d.runtime},
          {"cublas", d.cublas},
          {"copy_gbps", copy_gbps ? nlohmann::json(*copy_gbps) : nlohmann::json(nullptr)}};
}

nlohmann::json collect_meta(std::uint64_t seed, const DeviceProbe& probe, std::optional<double> copy_gbps) {
  const BuildInfo build = build_info();
  return {{"seqbench_version", build.version},
          {"git_sha", build.git_sha},
          {"git_dirty", build.git_dirty},
          {"source_hash",
           build.source_hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(build.source_hash)},
          {"timestamp", utc_timestamp()},
          {"host", host_name()},
          {"seed", seed},
          {"build", build_json()},
          {"device", device_json(probe, copy_gbps)},
          {"versions", {{"cuda_runtime_built", cuda_runtime_build_version()}, {"cublas", cublas_version()}}}};
}

}  // namespace seqbench
