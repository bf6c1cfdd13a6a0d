#include "suites/gpu_timer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "core/nvtx.h"
#include "suites/l2_flush.h"

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
}

int graph_calls_per_sample(double minimal_bytes) {
  if (!(minimal_bytes > 0.0) || minimal_bytes >= kGraphSampleBytes) return 1;  // NaN too
  return static_cast<int>(std::min<double>(kMaxCallsPerSample, std::ceil(kGraphSampleBytes / minimal_bytes)));
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
  if (policy_.flush_l2) {
    // Twice L2, in 16-byte vectors, zeroed once (the read's XOR is then 0: see suites/l2_flush.h).
    const std::size_t bytes = (2 * current_l2_bytes() + 15) / 16 * 16;
    flush_buffer_ = DeviceBuffer<unsigned char>(bytes);
    flush_buffer_.fill_bytes(0);
    flush_sink_ = DeviceBuffer<unsigned int>(1);
    flush_sink_.fill_bytes(0);
  }
}

void GpuTimer::flush_l2(std::uint32_t) {
  // A read, not a memset: it leaves L2 holding clean lines, so the timed work's misses evict
  // without writing back (suites/l2_flush.h).
  if (policy_.flush_l2)
    launch_l2_flush_read(flush_buffer_.data(), flush_buffer_.size(), flush_sink_.data(), stream());
}

namespace {
void require_calls(int calls_per_sample) {
  SEQBENCH_REQUIRE(calls_per_sample >= 1, "timer: calls_per_sample " << calls_per_sample << " < 1");
}
}  // namespace

std::vector<double> GpuTimer::sample_ms(const std::function<void(cudaStream_t)>& work, int calls_per_sample) {
  require_calls(calls_per_sample);
  SEQBENCH_NVTX_RANGE("timer_sample");
  // A round of warm-up is one sample's calls: a work rotating over copies warms every copy.
  for (int i = 0; i < policy_.warmup_runs * calls_per_sample; ++i) work(stream());
  stream_.synchronize();
  return collect(
      [&] {
        for (int r = 0; r < calls_per_sample; ++r) work(stream());
      },
      calls_per_sample, true);
}

void GpuTimer::GraphExecDeleter::operator()(cudaGraphExec_t exec) const {
  cudaGraphExecDestroy(exec);
}

namespace {
std::string cuda_error_text(const char* what, cudaError_t status) {
  return std::string(what) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

// The kernel, copy, memset and child-graph nodes of a captured graph: the device work it replays.
std::size_t device_operations(cudaGraph_t graph) {
  std::size_t count = 0;
  SEQBENCH_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) SEQBENCH_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  std::size_t operations = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    SEQBENCH_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    // A child graph (a library's own capture) is counted as work too, whatever it holds.
    if (type == cudaGraphNodeTypeKernel || type == cudaGraphNodeTypeMemcpy ||
        type == cudaGraphNodeTypeMemset || type == cudaGraphNodeTypeGraph)
      ++operations;
  }
  return operations;
}
}  // namespace

GpuTimer::GraphExec GpuTimer::capture(const std::function<void(cudaStream_t)>& work, int calls,
                                      std::string& why) {
  // First calls (module loading, cuBLASLt and CUB queries, tuners) run outside the capture: at
  // least one round of `calls` calls (each copy of a rotating work once), whatever the policy's
  // warm-up.
  for (int i = 0; i < std::max(1, policy_.warmup_runs) * calls; ++i) work(stream());
  stream_.synchronize();
  // An error the work left unchecked is the work's, not the capture's.
  SEQBENCH_CUDA_CHECK(cudaGetLastError());
  // Thread-local mode: a call this thread makes that would be unsafe while capturing (a
  // synchronization, cudaMalloc, the legacy stream) fails instead of being recorded wrongly.
  SEQBENCH_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  bool threw = false;
  try {
    for (int r = 0; r < calls; ++r) work(stream());
  } catch (const std::exception& e) {
    threw = true;
    why = e.what();
  } catch (...) {
    threw = true;
  }
  if (threw && why.empty()) why = "the work threw while it was being captured";
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);  // reached on every path
  // A call refused inside the capture leaves its (non-sticky) error behind. Unchecked by the work,
  // it would also mean a graph without that call: a failure either way, never a smaller graph timed.
  const cudaError_t last = cudaGetLastError();
  std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, cudaError_t (*)(cudaGraph_t)> owned(graph,
                                                                                          &cudaGraphDestroy);
  if (!threw && ended != cudaSuccess) why = cuda_error_text("cudaStreamEndCapture", ended);
  if (!threw && ended == cudaSuccess && last != cudaSuccess)
    why = cuda_error_text("an error left pending inside the capture", last);
  if (!why.empty()) return nullptr;
  // Each call must have put at least one operation into the graph. Work sent to another
  // (non-legacy) stream runs once, eagerly, during the capture and leaves the graph without it:
  // a graph short of one operation a call would be timed doing less than a call does.
  const std::size_t operations = device_operations(graph);
  if (operations < static_cast<std::size_t>(calls)) {
    why = "the capture recorded " + std::to_string(operations) +
          " kernel, copy, memset or child-graph node(s) for " + std::to_string(calls) +
          " call(s): work enqueued on a stream other than the one it was given, or none at all";
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {
    (void)cudaGetLastError();
    why = cuda_error_text("cudaGraphInstantiate", instantiated);
    return nullptr;
  }
  GraphExec out(exec);
  const cudaError_t uploaded = cudaGraphUpload(exec, stream());
  if (uploaded != cudaSuccess) {
    (void)cudaGetLastError();
    why = cuda_error_text("cudaGraphUpload", uploaded);
    return nullptr;
  }
  return out;
}

TimedSamples GpuTimer::sample(const std::function<void(cudaStream_t)>& work, bool cuda_graph,
                              int calls_per_sample) {
  require_calls(calls_per_sample);
  if (!cuda_graph) return {sample_ms(work, calls_per_sample), false, ""};
  SEQBENCH_NVTX_RANGE("timer_sample_graph");
  std::string why;
  const GraphExec exec = capture(work, calls_per_sample, why);
  if (!exec)
    return {sample_ms(work, calls_per_sample), false,
            "CUDA graph capture failed (" + why + "); timed without"};
  // Warm replays: the first launch of an executable graph pays set-up the later ones do not.
  for (int i = 0; i < std::max(1, policy_.warmup_runs); ++i)
    SEQBENCH_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream()));
  stream_.synchronize();
  return {
      collect([&] { SEQBENCH_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream())); }, calls_per_sample, false),
      true, ""};
}

std::vector<double> GpuTimer::collect(const std::function<void()>& enqueue, int calls, bool host_counts) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(policy_.max_samples));
  const auto begin = std::chrono::steady_clock::now();
  for (int s = 0; s < policy_.max_samples; ++s) {
    flush_l2(static_cast<std::uint32_t>(s));
    // Layers and optimizer steps are launched directly because their launches are part of what
    // they cost. Without this wait the host would queue them while the flush (~35 us on an H100)
    // still runs, and up to that much of their launch time would fall before the start event.
    if (host_counts && policy_.flush_l2) stream_.synchronize();
    start_.record(stream());
    enqueue();
    stop_.record(stream());
    stop_.synchronize();
    // A launch error the work left unchecked fails it here, rather than timing less work.
    SEQBENCH_CUDA_CHECK(cudaGetLastError());
    samples.push_back(static_cast<double>(stop_.elapsed_ms_since(start_)) / calls);

    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (static_cast<int>(samples.size()) >= policy_.min_samples && elapsed >= policy_.budget_seconds) break;
  }
  return samples;
}

}  // namespace seqbench
