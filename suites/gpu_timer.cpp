#include "suites/gpu_timer.h"

#include <algorithm>
#include <chrono>

#include "core/nvtx.h"

namespace seqbench {

TimerPolicy TimerPolicy::quick() {
  TimerPolicy policy;
  policy.warmup_runs = 2;
  policy.min_samples = 5;
  policy.max_samples = 25;
  policy.budget_seconds = 0.2;
  return policy;
}

void TimerPolicy::validate() const {
  SEQBENCH_REQUIRE(warmup_runs >= 0, "timer: warmup_runs " << warmup_runs << " < 0");
  SEQBENCH_REQUIRE(min_samples >= 1, "timer: min_samples " << min_samples << " < 1");
  SEQBENCH_REQUIRE(max_samples >= min_samples,
                   "timer: max_samples " << max_samples << " < min_samples " << min_samples);
  SEQBENCH_REQUIRE(budget_seconds > 0, "timer: budget_seconds " << budget_seconds << " <= 0");
  SEQBENCH_REQUIRE(runs_per_sample >= 1, "timer: runs_per_sample " << runs_per_sample << " < 1");
}

namespace {
std::size_t current_l2_bytes() {
  int device = 0, l2 = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return static_cast<std::size_t>(l2);
}
}  // namespace

GpuTimer::GpuTimer(TimerPolicy policy) : policy_(policy) {
  policy_.validate();
  if (policy_.flush_l2) flush_buffer_ = DeviceBuffer<unsigned char>(current_l2_bytes());
}

void GpuTimer::flush_l2(std::uint32_t sample_index) {
  // A different byte each time, so no layer of the memory system can treat it as a no-op.
  if (policy_.flush_l2) flush_buffer_.fill_bytes(static_cast<unsigned char>(sample_index), stream());
}

std::vector<double> GpuTimer::sample_ms(const std::function<void(cudaStream_t)>& work) {
  SEQBENCH_NVTX_RANGE("timer_sample");
  for (int i = 0; i < policy_.warmup_runs; ++i) work(stream());
  stream_.synchronize();
  return collect([&] {
    for (int r = 0; r < policy_.runs_per_sample; ++r) work(stream());
  });
}

void GpuTimer::GraphExecDeleter::operator()(cudaGraphExec_t exec) const {
  cudaGraphExecDestroy(exec);
}

GpuTimer::GraphExec GpuTimer::capture(const std::function<void(cudaStream_t)>& work, std::string& why) {
  // First calls (module loading, cuBLASLt and CUB queries, tuners) run outside the capture.
  for (int i = 0; i < policy_.warmup_runs; ++i) work(stream());
  stream_.synchronize();
  // Thread-local mode: a call this thread makes that would be unsafe while capturing (a
  // synchronization, cudaMalloc, the legacy stream) fails instead of being recorded wrongly.
  SEQBENCH_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  try {
    for (int r = 0; r < policy_.runs_per_sample; ++r) work(stream());
  } catch (const std::exception& e) {
    why = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);  // always ends it
  // A call refused inside the capture leaves its (non-sticky) error behind: clear it.
  (void)cudaGetLastError();
  const auto destroy_graph = [&] {
    if (graph) cudaGraphDestroy(graph);
  };
  if (why.empty() && ended != cudaSuccess)
    why = std::string("cudaStreamEndCapture: ") + cudaGetErrorName(ended) + " (" + cudaGetErrorString(ended) +
          ")";
  if (!why.empty()) {
    destroy_graph();
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  destroy_graph();  // the executable graph is independent of it
  SEQBENCH_CUDA_CHECK(instantiated);
  GraphExec out(exec);
  SEQBENCH_CUDA_CHECK(cudaGraphUpload(exec, stream()));
  return out;
}

TimedSamples GpuTimer::sample(const std::function<void(cudaStream_t)>& work, bool cuda_graph) {
  if (!cuda_graph) return {sample_ms(work), false, ""};
  SEQBENCH_NVTX_RANGE("timer_sample_graph");
  std::string why;
  const GraphExec exec = capture(work, why);
  if (!exec) return {sample_ms(work), false, "CUDA graph capture failed (" + why + "); timed without"};
  // Warm replays: the first launch of an executable graph pays set-up the later ones do not.
  for (int i = 0; i < std::max(1, policy_.warmup_runs); ++i)
    SEQBENCH_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream()));
  stream_.synchronize();
  return {collect([&] { SEQBENCH_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream())); }), true, ""};
}

std::vector<double> GpuTimer::collect(const std::function<void()>& enqueue) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(policy_.max_samples));
  const auto begin = std::chrono::steady_clock::now();
  for (int s = 0; s < policy_.max_samples; ++s) {
    flush_l2(static_cast<std::uint32_t>(s));
    start_.record(stream());
    enqueue();
    stop_.record(stream());
    stop_.synchronize();
    samples.push_back(static_cast<double>(stop_.elapsed_ms_since(start_)) / policy_.runs_per_sample);

    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (static_cast<int>(samples.size()) >= policy_.min_samples && elapsed >= policy_.budget_seconds) break;
  }
  return samples;
}

}  // namespace seqbench
