// The error state of the emulated CUDA runtime (tests/simt/runtime.cpp), shared with the scheduler.
#pragma once

#include <driver_types.h>

#include <cstddef>
#include <string>

namespace simt::detail {

// Records an error as the runtime would report it: `sticky` errors (a fault inside a kernel) are
// returned by every later call, as after a device-side fault; the others once, by
// cudaGetLastError/cudaPeekAtLastError. The message goes to stderr at once.
void runtime_record_error(cudaError_t error, bool sticky, const std::string& message);

cudaError_t runtime_sticky_error();

// For the executor's own tests (tests/simt/self_test.cu): forgets every recorded error, which a
// real context cannot do after a fault.
void runtime_clear_errors();

// cudaErrorInvalidValue (recorded, naming `api` and `which`) unless [ptr, ptr + bytes) lies inside
// one live device allocation; cudaSuccess for 0 bytes.
cudaError_t runtime_check_device_range(const char* api, const char* which, const void* ptr,
                                       std::size_t bytes);

}  // namespace simt::detail
