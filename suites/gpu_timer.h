// The one GPU timer. Every suite's experiments are timed through it; nothing else times.
//
// It follows nvbench's rules (and ../shared/ANCHORS.md, "Measurement rules"):
//   1. warm-up runs first, so module load, lazy allocation and autotuning stay out of the samples;
//   2. before each sample an L2-sized buffer is overwritten (cudaMemsetAsync), outside the event
//      pair, so every sample starts with a cold L2 as a real training step would;
//   3. each sample is the time between two CUDA events recorded on the timer's stream around
//      `runs_per_sample` calls of the work (1 unless the caller batches tiny kernels);
//   4. sampling stops after `max_samples`, or once `min_samples` are in and `budget_seconds` of
//      wall time have passed.
// The result is the raw per-call samples; summarize_samples() turns them into median/p20/p80/CV.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/device_buffer.h"

namespace seqbench {

struct TimerPolicy {
  int warmup_runs = 3;
  int min_samples = 10;
  int max_samples = 200;
  double budget_seconds = 1.0;
  int runs_per_sample = 1;
  bool flush_l2 = true;

  // Fewer samples and a shorter budget, for `seqbench run --quick` and smoke tests.
  static TimerPolicy quick();
  void validate() const;  // throws seqbench::Error naming the bad field
};

class GpuTimer {
 public:
  // Allocates the L2 flush buffer once (set-up, not a hot path): L2 size of the current device.
  explicit GpuTimer(TimerPolicy policy = {});

  cudaStream_t stream() const { return stream_.get(); }
  const TimerPolicy& policy() const { return policy_; }

  // Times `work(stream)`; returns milliseconds per call, one entry per sample. Work must enqueue
  // on the given stream and must not synchronize the device.
  std::vector<double> sample_ms(const std::function<void(cudaStream_t)>& work);

 private:
  void flush_l2(std::uint32_t sample_index);

  TimerPolicy policy_;
  Stream stream_;
  Event start_, stop_;
  DeviceBuffer<unsigned char> flush_buffer_;
};

}  // namespace seqbench
