// The error state of the emulated CUDA runtime (tests/simt/runtime.cpp), shared with the scheduler.
#pragma once

#include <driver_types.h>

#include <cstddef>
#include <functional>
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

// What an asynchronous operation becomes in a captured graph (cudaGraphNodeGetType).
enum class NodeKind { kernel, memcpy, memset, child_graph };

// Issues an asynchronous operation to `stream` (tests/simt/streams.cpp): runs `op` at once, or,
// while the stream captures, records it as a graph node that runs `op` at each replay. Refuses
// (recorded, naming `api`) a stream that is not live and work on the legacy stream that would
// depend on a capturing blocking stream, which also invalidates that capture, as CUDA does.
cudaError_t runtime_submit(const char* api, cudaStream_t stream, NodeKind kind, std::function<void()> op);

// cudaErrorStreamCaptureUnsupported (recorded, naming `api`), invalidating the capture, while a
// capture not begun in relaxed mode is in progress: the calls CUDA calls potentially unsafe during a capture
// (cudaMalloc, cudaFree, synchronous copies and memsets, device and event synchronization). One host thread
// drives the emulation, so global and thread-local mode prohibit the same calls.
cudaError_t runtime_refuse_while_capturing(const char* api);

}  // namespace simt::detail
