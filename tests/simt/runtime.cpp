// The CUDA runtime subset the kernels, their launchers and their tests call, on host memory, for
// the simt build (tests/simt/simt.h). Linked instead of libcudart.
//
// It describes one sm_90 device with H100 limits (132 SMs, 48 KiB of dynamic shared memory per
// block unless raised, 227 KiB when raised, 50 MiB of L2). Allocations are host memory filled with
// 0xff bytes (NaN in every float format), so a kernel output that is read before it is written
// shows up as NaN rather than as a lucky zero. Every copy and memset checks that its device side
// lies inside one live allocation, as the device would fault otherwise. Streams, events, graph
// capture and synchronization are in tests/simt/streams.cpp.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>

#include "tests/simt/runtime_state.h"
#include "tests/simt/simt.h"

namespace simt::detail {
namespace {

// The emulated device's memory (an H100's 80 GiB): cudaGetDeviceProperties reports it, and
// cudaMemGetInfo's free bytes are it less the live allocations.
constexpr std::size_t kDeviceMemoryBytes = std::size_t{80} << 30;

struct RuntimeState {
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::map<std::uintptr_t, std::size_t> allocations;  // base -> bytes
};

RuntimeState& state() {
  static RuntimeState s;
  return s;
}

cudaError_t fail(cudaError_t error, const std::string& message) {
  runtime_record_error(error, false, message);
  return error;
}

// Whether [ptr, ptr + bytes) lies inside one live allocation.
bool inside_allocation(const void* ptr, std::size_t bytes) {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  const auto& allocations = state().allocations;
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p >= it->first && p - it->first <= it->second && bytes <= it->second - (p - it->first);
}

bool is_device(const void* ptr) {
  return inside_allocation(ptr, 0);
}

cudaError_t check_device_range(const char* api, const char* which, const void* ptr, std::size_t bytes) {
  if (bytes == 0 || inside_allocation(ptr, bytes)) return cudaSuccess;
  return fail(cudaErrorInvalidValue, std::string("simt: ") + api + ": " + which + " [" +
                                         std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) + ", +" +
                                         std::to_string(bytes) + ") is not inside one device allocation");
}

cudaError_t entry() {
  return state().sticky;
}

}  // namespace

void runtime_record_error(cudaError_t error, bool sticky, const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  RuntimeState& s = state();
  if (sticky && s.sticky == cudaSuccess) s.sticky = error;
  if (s.last == cudaSuccess) s.last = error;
}

cudaError_t runtime_sticky_error() {
  return state().sticky;
}

void runtime_clear_errors() {
  state().last = cudaSuccess;
  state().sticky = cudaSuccess;
}

cudaError_t runtime_check_device_range(const char* api, const char* which, const void* ptr,
                                       std::size_t bytes) {
  return check_device_range(api, which, ptr, bytes);
}

}  // namespace simt::detail

using simt::detail::check_device_range;
using simt::detail::entry;
using simt::detail::fail;
using simt::detail::state;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return entry();
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0)
    return fail(cudaErrorInvalidDevice, "simt: cudaSetDevice(" + std::to_string(device) + "): one device");
  return entry();
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "simt: cudaGetDeviceProperties: one device");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "simt CPU emulation (sm_90 limits)");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->totalGlobalMem = simt::detail::kDeviceMemoryBytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 5120;
  prop->unifiedAddressing = 1;
  return entry();
}

// The emulated device sits on no PCI bus: not supported, so that no report asks nvidia-smi about a
// real GPU of this machine in its name (device_info.cpp treats the error as "no bus id").
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "simt: cudaDeviceGetPCIBusId: one device");
  if (id != nullptr && len > 0) id[0] = '\0';
  // As the runtime does, the last error is set; not through fail(), which would print on every
  // probe of the device.
  auto& s = state();
  if (s.last == cudaSuccess) s.last = cudaErrorNotSupported;
  return cudaErrorNotSupported;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "simt: cudaDeviceGetAttribute: one device");
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      break;
    case cudaDevAttrClockRate:
      *value = 1980000;  // kHz
      break;
    case cudaDevAttrMemoryClockRate:
      *value = 2619000;  // kHz
      break;
    case cudaDevAttrL2CacheSize:
      *value = 50 * 1024 * 1024;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = 227 * 1024;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = 5120;
      break;
    default:
      return fail(cudaErrorInvalidValue, "simt: cudaDeviceGetAttribute: attribute " +
                                             std::to_string(static_cast<int>(attr)) + " not emulated");
  }
  return entry();
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  auto& s = state();
  const cudaError_t e = s.last != cudaSuccess ? s.last : s.sticky;
  s.last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  const auto& s = state();
  return s.last != cudaSuccess ? s.last : s.sticky;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureUnjoined:
      return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureMerge:
      return "cudaErrorStreamCaptureMerge";
    default:
      return "cudaError (other)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument (simt)";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (simt: see the message on stderr)";
    case cudaErrorNotSupported:
      return "operation not supported (not emulated by simt)";
    default:
      return cudaGetErrorName(error);
  }
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  if (entry() != cudaSuccess) return entry();
  *ptr = nullptr;
  if (const cudaError_t e = simt::detail::runtime_refuse_while_capturing("cudaMalloc")) return e;
  if (bytes == 0) return cudaSuccess;
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0)
    return fail(cudaErrorMemoryAllocation, "simt: cudaMalloc of " + std::to_string(bytes) + " bytes failed");
  std::memset(p, 0xff, bytes);
  state().allocations[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  *ptr = p;
  return cudaSuccess;
}

// simt::detail::kDeviceMemoryBytes less the live allocations.
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  if (entry() != cudaSuccess) return entry();
  if (free == nullptr || total == nullptr)
    return fail(cudaErrorInvalidValue, "simt: cudaMemGetInfo: null output");
  std::size_t live = 0;
  for (const auto& [pointer, bytes] : state().allocations) live += bytes;
  *total = simt::detail::kDeviceMemoryBytes;
  *free = *total - std::min(live, *total);
  return entry();
}

cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t e = simt::detail::runtime_refuse_while_capturing("cudaFree")) return e;
  if (ptr == nullptr) return entry();
  auto& allocations = state().allocations;
  const auto it = allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocations.end())
    return fail(cudaErrorInvalidDevicePointer, "simt: cudaFree of a pointer cudaMalloc did not return");
  allocations.erase(it);
  std::free(ptr);
  return entry();
}

namespace {

// The device sides of a copy, checked (recorded, naming `api`) against the live allocations.
cudaError_t check_copy(const char* api, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind& kind) {
  if (kind == cudaMemcpyDefault) {
    const bool d = simt::detail::is_device(dst), s = simt::detail::is_device(src);
    kind = d && s ? cudaMemcpyDeviceToDevice
           : d    ? cudaMemcpyHostToDevice
           : s    ? cudaMemcpyDeviceToHost
                  : cudaMemcpyHostToHost;
  }
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (dst_device) {
    if (const cudaError_t e = check_device_range(api, "destination", dst, bytes)) return e;
  }
  if (src_device) {
    if (const cudaError_t e = check_device_range(api, "source", src, bytes)) return e;
  }
  return cudaSuccess;
}

}  // namespace

// A copy is checked when issued and again when it runs (a captured copy replays later, when its
// memory may have been freed).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (entry() != cudaSuccess) return entry();
  if (const cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, bytes, kind)) return e;
  return simt::detail::runtime_submit(
      "cudaMemcpyAsync", stream, simt::detail::NodeKind::memcpy, [dst, src, bytes, kind]() mutable {
        if (check_copy("cudaMemcpyAsync (replayed)", dst, src, bytes, kind) == cudaSuccess && bytes != 0)
          std::memmove(dst, src, bytes);
      });
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (entry() != cudaSuccess) return entry();
  if (const cudaError_t e = simt::detail::runtime_refuse_while_capturing("cudaMemcpy")) return e;
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  if (entry() != cudaSuccess) return entry();
  if (const cudaError_t e = check_device_range("cudaMemsetAsync", "destination", ptr, bytes)) return e;
  return simt::detail::runtime_submit(
      "cudaMemsetAsync", stream, simt::detail::NodeKind::memset, [ptr, value, bytes] {
        if (check_device_range("cudaMemsetAsync (replayed)", "destination", ptr, bytes) == cudaSuccess &&
            bytes != 0)
          std::memset(ptr, value, bytes);
      });
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  if (entry() != cudaSuccess) return entry();
  if (const cudaError_t e = simt::detail::runtime_refuse_while_capturing("cudaMemset")) return e;
  return cudaMemsetAsync(ptr, value, bytes, nullptr);
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > 227 * 1024)
      return fail(cudaErrorInvalidValue, "simt: cudaFuncSetAttribute: " + std::to_string(value) +
                                             " bytes of dynamic shared memory above the device's 232448");
    simt::detail::set_max_dynamic_shared(func, value);
  }
  return entry();
}

// An occupancy of 2048 resident threads per SM (at most 32 blocks), as on sm_90 when registers and
// shared memory do not limit it: launchers size their grids from it, and the emulation does not
// model registers.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int block_size,
                                                          std::size_t) {
  if (block_size <= 0 || block_size > 1024)
    return fail(cudaErrorInvalidValue, "simt: occupancy query for a block of " + std::to_string(block_size));
  *blocks = std::min(32, 2048 / block_size);
  return entry();
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func,
                                                                   int block_size, std::size_t smem,
                                                                   unsigned int) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, block_size, smem);
}

// The cuBLAS version the headers name (core/device_info.cpp reports it). No classic cuBLAS routine
// is emulated (the layers' GEMMs go through cuBLASLt, tests/simt/cublaslt.cpp): the device suite's
// GEMM-rate experiment, the one caller, is refused by name at cublasCreate.
cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  switch (type) {
    case MAJOR_VERSION:
      *value = CUBLAS_VER_MAJOR;
      return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUBLAS_VER_MINOR;
      return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUBLAS_VER_PATCH;
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = nullptr;
  std::fprintf(stderr, "simt: cublasCreate: classic cuBLAS is not emulated (only cuBLASLt)\n");
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t) {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*,
                            void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
