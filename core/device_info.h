// What the machine is: the GPU (if any) and the library versions, for `seqbench info` and for
// every report's meta.device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace seqbench {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
  int sm_clock_max_mhz = 0;      // cudaDevAttrClockRate: the peak SM clock
  int memory_clock_max_mhz = 0;  // cudaDevAttrMemoryClockRate
  int memory_bus_bits = 0;
  // "0000:1a:00.0" (cudaDeviceGetPCIBusId): how nvidia-smi names this device. Its own indices are
  // in PCI order and ignore CUDA_VISIBLE_DEVICES, so `ordinal` may be another GPU there.
  std::string pci_bus_id;
  std::string driver;   // "13.0" from cudaDriverGetVersion
  std::string runtime;  // from cudaRuntimeGetVersion
  std::string cublas;   // "13.0.0" from cublasGetProperty

  std::string compute_capability() const { return std::to_string(cc_major) + "." + std::to_string(cc_minor); }
};

struct DeviceProbe {
  std::optional<DeviceInfo> info;  // empty when no usable GPU
  std::string reason;              // why there is none ("no CUDA driver ...") when info is empty
};

// Never throws for an absent GPU or driver: that is a normal state, reported through `reason`.
DeviceProbe probe_device(int ordinal = 0);

// Versions that need no GPU: the CUDA runtime the binary was built against, and cuBLAS.
std::string cuda_runtime_build_version();
std::string cublas_version();

}  // namespace seqbench
