#include "core/device_info.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"

namespace seqbench {
namespace {

// CUDA encodes versions as 1000*major + 10*minor.
std::string cuda_version_string(int encoded) {
  return std::to_string(encoded / 1000) + "." + std::to_string((encoded % 1000) / 10);
}

int attribute(cudaDeviceAttr attr, int ordinal) {
  int value = 0;
  SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, ordinal));
  return value;
}

}  // namespace

std::string cuda_runtime_build_version() {
  return cuda_version_string(CUDART_VERSION);
}

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

DeviceProbe probe_device(int ordinal) {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    probe.reason =
        std::string("no usable CUDA device: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    return probe;
  }
  if (ordinal < 0 || ordinal >= count) {
    probe.reason = "no CUDA device " + std::to_string(ordinal) + ": " + std::to_string(count) + " present";
    return probe;
  }

  cudaDeviceProp prop{};
  SEQBENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  info.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  info.memory_bus_bits = prop.memoryBusWidth;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal) == cudaSuccess)
    info.pci_bus_id = bus_id;
  else
    cudaGetLastError();  // best effort: no bus id only means no current clocks in the report
  // CUDA 13 dropped the clock fields from cudaDeviceProp; the attributes remain (in kHz).
  info.sm_clock_max_mhz = attribute(cudaDevAttrClockRate, ordinal) / 1000;
  info.memory_clock_max_mhz = attribute(cudaDevAttrMemoryClockRate, ordinal) / 1000;

  int driver = 0, runtime = 0;
  SEQBENCH_CUDA_CHECK(cudaDriverGetVersion(&driver));
  SEQBENCH_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  info.driver = cuda_version_string(driver);
  info.runtime = cuda_version_string(runtime);
  info.cublas = cublas_version();
  probe.info = info;
  return probe;
}

}  // namespace seqbench
