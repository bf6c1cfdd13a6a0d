// RAII owners for device memory, streams and events.
//
// DeviceBuffer<T> is move-only and frees in its destructor. It is for set-up paths (tests, suite
// inputs, the planner's one block): hot paths take memory from their caller and never allocate.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "core/cuda_check.h"

namespace seqbench {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) SEQBENCH_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { copy_from_host(host); }
  ~DeviceBuffer() { reset(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  void copy_from_host(const std::vector<T>& host) {
    SEQBENCH_REQUIRE(host.size() == count_,
                     "copy_from_host: host has " << host.size() << " elements, buffer has " << count_);
    if (count_ > 0) SEQBENCH_CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> copy_to_host() const {
    std::vector<T> host(count_);
    if (count_ > 0) SEQBENCH_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (0xFF gives NaN in all three float formats): tests poison
  // outputs this way so that an element a kernel forgot to write cannot pass.
  void fill_bytes(unsigned char byte, cudaStream_t stream = nullptr) {
    if (count_ > 0) SEQBENCH_CUDA_CHECK(cudaMemsetAsync(data_, byte, bytes(), stream));
  }

 private:
  void reset() noexcept {
    if (data_) cudaFree(data_);  // destructor path: nothing useful to do with an error here
    data_ = nullptr;
    count_ = 0;
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

class Stream {
 public:
  // A blocking stream: it orders after work on the legacy default stream (DeviceBuffer's
  // fill_bytes() default, cudaMemcpy), so set-up done there is complete before timed work starts.
  Stream() { SEQBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault)); }
  ~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { SEQBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { SEQBENCH_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() {
    if (event_) cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { SEQBENCH_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void synchronize() const { SEQBENCH_CUDA_CHECK(cudaEventSynchronize(event_)); }
  // Milliseconds from `start` to this event; both must have completed.
  float elapsed_ms_since(const Event& start) const {
    float ms = 0.0f;
    SEQBENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace seqbench
