// The one GPU timer. Every suite's experiments are timed through it; nothing else times.
//
// It follows nvbench's rules (and ../shared/ANCHORS.md, "Measurement rules"):
//   1. warm-up runs first, so module load, lazy allocation and autotuning stay out of the samples
//      (`warmup_runs` rounds of one sample's calls, so a work rotating over copies warms each);
//   2. before each sample a buffer of twice L2 is read (suites/l2_flush.h), outside the event
//      pair, so every sample starts with a cold L2 as a real training step would, and one holding
//      only clean lines (nvbench's memset flush leaves ~L2 of dirty lines, written back inside the
//      timed work);
//   3. each sample is the time between two CUDA events recorded on the timer's stream around
//      `calls_per_sample` calls of the work (1 unless the caller batches small kernels: see
//      graph_calls_per_sample below), and is divided by that count; for directly launched work
//      the host waits for the flush to finish before it records the start event, so that the
//      host's launch costs are inside the pair rather than hidden behind the flush;
//   4. sampling stops after `max_samples`, or once `min_samples` are in and `budget_seconds` of
//      wall time have passed;
//   5. on request (sample(work, true): the operator suite's single small ops, as suites/pytorch
//      times torch's), the `calls_per_sample` calls are captured once into a CUDA graph after the
//      warm-up, and each sample replays it: the host's per-launch cost (CUB's and cuBLASLt's queries,
//      argument checks, launch latency) cannot stretch a few-microsecond kernel sequence then, and
//      the GPU-side gaps between its kernels are a graph's. Work that cannot be captured (it
//      synchronizes, allocates, or uses the legacy default stream) is timed directly, and the
//      result says why. Work must enqueue on the stream it is given: a kernel sent to another,
//      non-legacy stream would run once during the capture and be missing from the graph. A graph
//      with fewer kernel, copy, memset or child-graph nodes than captured calls is refused for
//      that reason (timed directly, with the reason); a call only partly sent elsewhere is not
//      detected.
// A launch error the work leaves unchecked fails the sampling (seqbench::Error), in both modes.
// The result is the raw per-call samples; summarize_samples() turns them into median/p20/p80/CV.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device_buffer.h"

namespace seqbench {

struct TimerPolicy {
  int warmup_runs = 3;
  int min_samples = 10;
  int max_samples = 200;
  double budget_seconds = 1.0;
  bool flush_l2 = true;

  // Fewer samples and a shorter budget, for `seqbench run --quick` and smoke tests.
  static TimerPolicy quick();
  void validate() const;  // throws seqbench::Error naming the bad field
};

// ANCHORS' rule for kernels under ~10 us: time a captured graph of N calls over rotating buffers.
// One call per sample would put the graph launch's own latency and the event pair's resolution
// (each about a microsecond or more) into a kernel that moves a few hundred kilobytes; N calls of
// the same buffers would find them in L2 from the second call on. So a graphed experiment's sample
// is N calls, each on its own copy of the inputs and outputs (the runner prepares the experiment N
// times), after the usual L2 flush: every call reads cold data, as one call after a flush would.
// N is the fewest calls whose minimal traffic reaches kGraphSampleBytes, at most
// kMaxCallsPerSample (below 16 MiB a call the sample moves less, but every call still reads cold
// data); 1 for an experiment moving that much or more, or declaring no bytes. It depends only on
// the bytes, so `seqbench list --json` states it and the PyTorch runner times torch's ops with the
// same N.
// Why 1 GiB, about 0.35 ms at an H100's 3 TB/s: L2 is write-back, and the stop event fires once the
// sample's stores have reached L2, not DRAM. Up to L2's size of the sample's last outputs (~50 MB
// on an H100, about half of it dirty for a kernel that reads as much as it writes) is written back
// only during the next sample's flush, outside the event pair. A sample of 64 MiB (this constant
// before) could thus be credited ~25 MB of writes it never paid for: GB/s up to ~1.6x too high, and
// more than 100 % of the copy rate. 1 GiB, the size of the copy that measures that rate
// (measure_copy_gbps), bounds the unpaid part to the same few per cent on both sides of "% of copy
// bandwidth".
inline constexpr double kGraphSampleBytes = 1024.0 * 1024 * 1024;
inline constexpr int kMaxCallsPerSample = 64;
int graph_calls_per_sample(double minimal_bytes);

// How a work was timed (GpuTimer::sample).
struct TimedSamples {
  std::vector<double> ms;   // milliseconds per call, one entry per sample
  bool cuda_graph = false;  // replays of one captured graph; false: direct launches
  std::string note;         // why a requested graph was not used; empty otherwise
};

class GpuTimer {
 public:
  // Allocates the L2 flush buffer once (set-up, not a hot path): twice the current device's L2,
  // read before every sample (suites/l2_flush.h).
  explicit GpuTimer(TimerPolicy policy = {});

  cudaStream_t stream() const { return stream_.get(); }
  const TimerPolicy& policy() const { return policy_; }

  // Times `work(stream)`, `calls_per_sample` (>= 1) calls a sample; returns milliseconds per call,
  // one entry per sample. Work must enqueue on the given stream and must not synchronize the
  // device. A work that rotates over copies of its buffers (the runner's) is called in sequence:
  // any `calls_per_sample` consecutive calls cover every copy once.
  std::vector<double> sample_ms(const std::function<void(cudaStream_t)>& work, int calls_per_sample = 1);

  // sample_ms(work, calls_per_sample), or with cuda_graph the same samples taken from replays of
  // one captured graph of `calls_per_sample` calls (rule 5 above), after max(1, warmup_runs) rounds
  // of `calls_per_sample` direct calls; a work that cannot be captured, or whose graph cannot be
  // instantiated, falls back to sample_ms, with the reason in the note. Errors of the work itself still
  // throw.
  TimedSamples sample(const std::function<void(cudaStream_t)>& work, bool cuda_graph,
                      int calls_per_sample = 1);

 private:
  struct GraphExecDeleter {
    void operator()(cudaGraphExec_t exec) const;
  };
  using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

  void flush_l2(std::uint32_t sample_index);
  // The warm-up, then `calls` calls captured and instantiated; null (and `why`) when the stream
  // could not capture them.
  GraphExec capture(const std::function<void(cudaStream_t)>& work, int calls, std::string& why);
  // Samples of `enqueue` (one sample's work on stream(): `calls` calls), each divided by `calls`.
  // `host_counts`: the host waits for the flush before it records the start event and enqueues,
  // so that the host's launch costs of directly launched work fall inside the event pair (see
  // collect in gpu_timer.cpp); false for a graph replay, whose one launch the flush may hide.
  std::vector<double> collect(const std::function<void()>& enqueue, int calls, bool host_counts);

  TimerPolicy policy_;
  Stream stream_;
  Event start_, stop_;
  DeviceBuffer<unsigned char> flush_buffer_;
  DeviceBuffer<unsigned int> flush_sink_;  // the flush read's never-taken store
};

}  // namespace seqbench
