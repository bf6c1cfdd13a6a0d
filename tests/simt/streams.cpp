// Streams, events and CUDA graphs for the simt build (tests/simt/simt.h): stream capture records
// the work issued to a capturing stream as graph nodes instead of running it, and a launched
// executable graph replays them, so that the suites' timing path (suites/gpu_timer.cpp: capture,
// instantiate, upload, replay) runs on the CPU with CUDA's rules for what a capture accepts.
//
// What it keeps of CUDA's capture semantics:
//   - kernels, async copies and memsets, cuBLASLt matmuls and graph launches issued to the
//     capturing stream become nodes (kernel, memcpy, memset, kernel, child graph) in issue order;
//     their arguments are checked when issued, and they run at each replay;
//   - work issued to another live stream runs at once, outside the graph, as on the device;
//   - work on the legacy stream while a blocking stream captures is refused with
//     cudaErrorStreamCaptureImplicit and invalidates the capture;
//   - synchronizing the capturing stream is refused with cudaErrorStreamCaptureUnsupported and
//     invalidates the capture; so are the potentially unsafe calls (cudaMalloc, cudaFree,
//     synchronous copies and memsets, cudaDeviceSynchronize, cudaEventSynchronize) while a capture
//     that is not relaxed is in progress;
//   - work issued into an invalidated capture, and cudaStreamEndCapture of it, return
//     cudaErrorStreamCaptureInvalidated (the latter with no graph).
//   - fork and join: an event recorded into a capturing stream, waited on by another stream, brings
//     that stream into the same capture (its work becomes nodes of the same graph). By
//     cudaStreamEndCapture the origin must depend, through events recorded and waited on,
//     directly or through other streams of the capture, on the last work of every stream that
//     joined it, or the end fails with cudaErrorStreamCaptureUnjoined (no graph), as CUDA's does
//     (each stream keeps, per stream of the capture, how many of its nodes it depends on; a record
//     copies that, a wait merges it in). Waiting inside a capture on an event recorded outside it
//     (cudaErrorStreamCaptureIsolation) or in another capture (cudaErrorStreamCaptureMerge) is
//     refused and invalidates the captures involved. The graph's nodes stay in issue order, which
//     is one valid order of the forked graph's (the emulation runs no two nodes at once).
// What it does not: graph updates, and any concurrency. Launches run when issued and replays run
// when launched, one host thread, so stream and event synchronization only keep their error
// semantics, a fork's branches run one after the other, and an elapsed time between events is the
// emulation's host time.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/simt/runtime_state.h"

namespace simt::detail {
namespace {

struct Node {
  NodeKind kind;
  std::string what;  // the kernel's or API's name, for messages
  std::function<void()> run;
};

struct Graph {
  std::vector<Node> nodes;
};

struct GraphExec {
  std::vector<Node> nodes;
};

struct StreamState;

// One capture: begun on `origin`, joined by the streams that waited on an event recorded in it.
struct Capture {
  StreamState* origin = nullptr;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::unique_ptr<Graph> graph;
  std::set<StreamState*> members;  // origin included
};

struct StreamState {
  unsigned flags = cudaStreamDefault;
  bool capturing = false;
  std::shared_ptr<Capture> capture;  // while capturing
  // Nodes issued to this stream in its capture, and for each stream of the capture how many of
  // its nodes this stream's next work depends on (this stream's own: all of them, not listed).
  std::size_t issued = 0;
  std::map<const StreamState*, std::size_t> depends;
};

// An event: the host time of its last record and, when that record was in a capture, where.
struct EventState {
  std::chrono::steady_clock::time_point time;
  std::weak_ptr<Capture> capture;  // expired or empty: recorded outside any live capture
  // What work after a wait on it depends on: the recording stream's dependencies and its issued count.
  std::map<const StreamState*, std::size_t> depends;
};

struct Streams {
  std::set<StreamState*> live;
};

Streams& streams() {
  static Streams s;
  return s;
}

cudaError_t fail(cudaError_t error, const std::string& message) {
  runtime_record_error(error, false, "simt: " + message);
  return error;
}

bool is_legacy(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy;
}

// The state of a created stream; null for the legacy and per-thread default streams.
StreamState* state_of(cudaStream_t stream) {
  if (is_legacy(stream) || stream == cudaStreamPerThread) return nullptr;
  auto* s = reinterpret_cast<StreamState*>(stream);
  return streams().live.count(s) != 0 ? s : nullptr;
}

bool is_live(cudaStream_t stream) {
  return is_legacy(stream) || stream == cudaStreamPerThread || state_of(stream) != nullptr;
}

// cudaErrorInvalidResourceHandle (recorded, naming `api`) unless `stream` is live.
cudaError_t require_live(const std::string& api, cudaStream_t stream) {
  if (is_live(stream)) return cudaSuccess;
  return fail(cudaErrorInvalidResourceHandle, api + ": not a live stream");
}

// A capturing blocking stream: work on the legacy stream would make it depend on the capture.
StreamState* blocking_capture() {
  for (StreamState* s : streams().live)
    if (s->capturing && (s->flags & cudaStreamNonBlocking) == 0) return s;
  return nullptr;
}

cudaError_t legacy_dependency(const std::string& api) {
  StreamState* s = blocking_capture();
  if (s == nullptr) return cudaSuccess;
  s->capture->invalidated = true;
  return fail(cudaErrorStreamCaptureImplicit,
              api + " on the legacy stream while a blocking stream captures (the capture is invalidated)");
}

cudaGraphNodeType node_type(NodeKind kind) {
  switch (kind) {
    case NodeKind::kernel:
      return cudaGraphNodeTypeKernel;
    case NodeKind::memcpy:
      return cudaGraphNodeTypeMemcpy;
    case NodeKind::memset:
      return cudaGraphNodeTypeMemset;
    case NodeKind::child_graph:
      return cudaGraphNodeTypeGraph;
  }
  return cudaGraphNodeTypeEmpty;
}

}  // namespace

cudaError_t runtime_submit(const char* api, cudaStream_t stream, NodeKind kind, std::function<void()> op) {
  if (const cudaError_t e = require_live(api, stream)) return e;
  if (is_legacy(stream)) {
    if (const cudaError_t e = legacy_dependency(api)) return e;
  }
  if (StreamState* s = state_of(stream); s != nullptr && s->capturing) {
    if (s->capture->invalidated)
      return fail(cudaErrorStreamCaptureInvalidated,
                  std::string(api) + " into a stream whose capture was invalidated by an earlier call");
    s->capture->graph->nodes.push_back(Node{kind, api, std::move(op)});
    ++s->issued;
    return cudaSuccess;
  }
  op();
  return cudaSuccess;
}

cudaError_t runtime_refuse_while_capturing(const char* api) {
  bool refused = false;
  for (StreamState* s : streams().live) {
    if (s->capturing && s->capture->mode != cudaStreamCaptureModeRelaxed) {
      s->capture->invalidated =
          true;  // as CUDA does: the capture cannot be trusted to hold the call's effect
      refused = true;
    }
  }
  if (!refused) return cudaSuccess;
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string(api) +
                  " is not permitted while a stream captures (not in relaxed mode); the "
                  "capture is invalidated");
}

}  // namespace simt::detail

// The C API below is written in the emulation's own terms.
using namespace simt::detail;

namespace {

Graph* graph_of(cudaGraph_t graph) {
  return reinterpret_cast<Graph*>(graph);
}

GraphExec* exec_of(cudaGraphExec_t exec) {
  return reinterpret_cast<GraphExec*>(exec);
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (const cudaError_t e = runtime_sticky_error()) return e;
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking)
    return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: flags " + std::to_string(flags));
  auto* s = new StreamState;
  s->flags = flags;
  streams().live.insert(s);
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  StreamState* s = state_of(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a created stream");
  if (s->capturing) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamDestroy of a capturing stream");
  streams().live.erase(s);
  delete s;
  return runtime_sticky_error();
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t e = require_live("cudaStreamSynchronize", stream)) return e;
  if (StreamState* s = state_of(stream); s != nullptr && s->capturing) {
    s->capture->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamSynchronize of a capturing stream (the capture is invalidated)");
  }
  if (is_legacy(stream)) {
    if (const cudaError_t e = simt::detail::legacy_dependency("cudaStreamSynchronize")) return e;
  }
  return runtime_sticky_error();
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = runtime_refuse_while_capturing("cudaDeviceSynchronize")) return e;
  return runtime_sticky_error();
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (const cudaError_t e = runtime_sticky_error()) return e;
  StreamState* s = state_of(stream);
  if (s == nullptr)
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: only a created stream is emulated as capturing");
  if (s->capturing) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream already captures");
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue,
                "cudaStreamBeginCapture: mode " + std::to_string(static_cast<int>(mode)));
  auto capture = std::make_shared<Capture>();
  capture->origin = s;
  capture->mode = mode;
  capture->graph = std::make_unique<Graph>();
  capture->members.insert(s);
  s->capturing = true;
  s->capture = std::move(capture);
  s->issued = 0;
  s->depends.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  StreamState* s = state_of(stream);
  if (s == nullptr || !s->capturing)
    return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream does not capture");
  if (s->capture->origin != s)
    return fail(cudaErrorStreamCaptureUnmatched,
                "cudaStreamEndCapture on a stream that joined a capture begun on another stream");
  *graph = nullptr;
  const std::shared_ptr<Capture> capture = std::move(s->capture);
  bool unjoined = false;
  for (StreamState* member : capture->members) {
    if (member != s) {
      const auto known = s->depends.find(member);
      if (member->issued > (known == s->depends.end() ? 0 : known->second)) unjoined = true;
    }
  }
  for (StreamState* member : capture->members) {
    member->capturing = false;
    member->capture.reset();
    member->issued = 0;
    member->depends.clear();
  }
  if (capture->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated");
  if (unjoined)
    return fail(cudaErrorStreamCaptureUnjoined,
                "cudaStreamEndCapture: a stream forked from the capture has work the capture's origin does "
                "not wait on (record an event on it after its last work, and make the origin wait on "
                "that, directly or through another stream of the capture)");
  *graph = reinterpret_cast<cudaGraph_t>(capture->graph.release());
  return runtime_sticky_error();
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (const cudaError_t e = require_live("cudaStreamIsCapturing", stream)) return e;
  const StreamState* s = state_of(stream);
  *status = s == nullptr || !s->capturing ? cudaStreamCaptureStatusNone
            : s->capture->invalidated     ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  Graph* g = graph_of(graph);
  if (g == nullptr || count == nullptr)
    return fail(cudaErrorInvalidValue, "cudaGraphGetNodes: null argument");
  if (nodes == nullptr) {
    *count = g->nodes.size();
    return cudaSuccess;
  }
  const std::size_t n = std::min(*count, g->nodes.size());
  for (std::size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<cudaGraphNode_t>(&g->nodes[i]);
  *count = n;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (node == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphNodeGetType: null node");
  *type = simt::detail::node_type(reinterpret_cast<const Node*>(node)->kind);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph_of(graph);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null graph");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: flags are not emulated");
  // The executable graph owns copies of the nodes: the graph may be destroyed before it replays.
  *exec = reinterpret_cast<cudaGraphExec_t>(new GraphExec{graph_of(graph)->nodes});
  return runtime_sticky_error();
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec_of(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphUpload: null graph");
  if (const cudaError_t e = require_live("cudaGraphUpload", stream)) return e;
  return runtime_sticky_error();
}

// Replays the nodes in their captured order (a capture from one stream is a chain). Launched into
// a capturing stream, the whole graph becomes one child-graph node.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphLaunch: null graph");
  if (const cudaError_t e = runtime_sticky_error()) return e;
  const GraphExec* g = exec_of(exec);
  return runtime_submit("cudaGraphLaunch", stream, NodeKind::child_graph, [g] {
    for (const Node& node : g->nodes) {
      if (runtime_sticky_error() != cudaSuccess) return;  // a fault stops the replay
      node.run();
    }
  });
}

// Events hold the host time of their record: work runs when issued, so an elapsed time is the
// emulation's time, meaningless as a GPU timing but well defined. A record into a capture also
// says which capture and how far the recording stream had got (fork and join, above).
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new EventState());
  return runtime_sticky_error();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<EventState*>(event);
  return runtime_sticky_error();
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
  if (const cudaError_t e = require_live("cudaEventRecord", stream)) return e;
  auto* ev = reinterpret_cast<EventState*>(event);
  if (StreamState* s = state_of(stream); s != nullptr && s->capturing) {
    if (s->capture->invalidated)
      return fail(cudaErrorStreamCaptureInvalidated,
                  "cudaEventRecord into a stream whose capture was invalidated by an earlier call");
    ev->capture = s->capture;
    ev->depends = s->depends;
    ev->depends[s] = s->issued;
    return cudaSuccess;
  }
  if (is_legacy(stream)) {
    if (const cudaError_t e = simt::detail::legacy_dependency("cudaEventRecord")) return e;
  }
  ev->time = std::chrono::steady_clock::now();
  ev->capture.reset();
  ev->depends.clear();
  return runtime_sticky_error();
}

// Outside a capture the emulation's work is already complete when it is issued, so a wait orders
// nothing. An event recorded in a live capture brings `stream` into it (a fork), or, on a stream
// already in it, adds what the event depends on to what the stream's next work depends on (a join).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: null event");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags are not emulated");
  if (const cudaError_t e = require_live("cudaStreamWaitEvent", stream)) return e;
  const auto* ev = reinterpret_cast<const EventState*>(event);
  const std::shared_ptr<Capture> from = ev->capture.lock();
  StreamState* s = state_of(stream);
  if (from == nullptr) {
    if (s != nullptr && s->capturing) {
      s->capture->invalidated = true;
      return fail(cudaErrorStreamCaptureIsolation,
                  "cudaStreamWaitEvent: a capturing stream waits on an event recorded outside its capture "
                  "(the capture is invalidated)");
    }
    if (is_legacy(stream)) {
      if (const cudaError_t e = simt::detail::legacy_dependency("cudaStreamWaitEvent")) return e;
    }
    return runtime_sticky_error();
  }
  if (s == nullptr) {
    from->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamWaitEvent: a default stream waits on an event recorded in a capture (only created "
                "streams are emulated as joining one; the capture is invalidated)");
  }
  if (from->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated,
                "cudaStreamWaitEvent on an event of an invalidated capture");
  if (s->capturing && s->capture != from) {
    s->capture->invalidated = true;
    from->invalidated = true;
    return fail(cudaErrorStreamCaptureMerge,
                "cudaStreamWaitEvent: the stream captures, and the event was recorded in another capture "
                "(both captures are invalidated)");
  }
  if (!s->capturing) {  // a fork: the stream joins the capture
    s->capturing = true;
    s->capture = from;
    s->issued = 0;
    s->depends.clear();
    from->members.insert(s);
  }
  for (const auto& [member, nodes] : ev->depends) {
    if (member == s) continue;
    std::size_t& known = s->depends[member];
    known = std::max(known, nodes);
  }
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t) {
  if (const cudaError_t e = runtime_refuse_while_capturing("cudaEventSynchronize")) return e;
  return runtime_sticky_error();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto a = reinterpret_cast<const EventState*>(start)->time;
  const auto b = reinterpret_cast<const EventState*>(end)->time;
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return runtime_sticky_error();
}

}  // extern "C"
