// StreamFork: a second stream and two events, which let a launcher run part of its work beside
// the rest. The caller creates them once (OwnedStreamFork) and passes the same fork to every
// launch, since creating streams and events is a driver call and not hot-path work.
//
// A launcher that forks (ForkScope) records `forked` on its own stream, makes `side` wait on it,
// issues its side branch to `side`, records `joined` there and makes its own stream wait on that
// before it returns, also when it throws. To the caller the launch stays ordered on its own
// stream, like any other launch: work issued there later starts after both branches, captured or
// not. Under stream capture the two branches become parallel nodes of one graph (CUDA's fork and
// join).
//
// One fork serves one launch at a time: two launches on different streams that share a fork
// would order through its side stream and might wait on each other's events.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "core/cuda_check.h"
#include "core/error.h"

namespace seqbench {

struct StreamFork {
  cudaStream_t side = nullptr;   // a created stream, not the launch's own stream
  cudaEvent_t forked = nullptr;  // recorded on the launch's stream where the side branch begins
  cudaEvent_t joined = nullptr;  // recorded on `side` after the side branch
};

// What a launcher checks of the fork it is given, before any CUDA call (seqbench::Error naming
// `op` and the field): a created side stream, not one of the default streams (null and
// cudaStreamLegacy, the legacy stream, which cannot join a capture and orders itself behind
// every blocking stream; cudaStreamPerThread), and not the launch's own `stream`; two distinct
// events.
inline void require_stream_fork(const StreamFork& fork, cudaStream_t stream, const char* op) {
  SEQBENCH_REQUIRE(fork.side != nullptr && fork.side != cudaStreamLegacy && fork.side != cudaStreamPerThread,
                   op << ": fork.side is a default stream ("
                      << (fork.side == cudaStreamPerThread ? "the per-thread one" : "the legacy one")
                      << "); a fork needs a created stream");
  SEQBENCH_REQUIRE(fork.side != stream, op << ": fork.side is the launch's own stream");
  SEQBENCH_REQUIRE(fork.forked != nullptr && fork.joined != nullptr,
                   op << ": fork." << (fork.forked == nullptr ? "forked" : "joined") << " is a null event");
  SEQBENCH_REQUIRE(fork.forked != fork.joined, op << ": fork.forked and fork.joined are the same event");
}

// One fork of a launch: the constructor makes fork.side wait for what `stream` has been given so
// far; join() makes `stream` wait for what was issued to side() since. The destructor joins if
// join() was not reached (an exception between the two), ignoring errors there, so that work the
// caller issues to `stream` after a failed launch never runs beside a side branch it cannot see.
class ForkScope {
 public:
  ForkScope(const StreamFork& fork, cudaStream_t stream) : fork_(fork), stream_(stream) {
    SEQBENCH_CUDA_CHECK(cudaEventRecord(fork_.forked, stream_));
    SEQBENCH_CUDA_CHECK(cudaStreamWaitEvent(fork_.side, fork_.forked, 0));
  }
  ~ForkScope() {
    if (!joined_ && cudaEventRecord(fork_.joined, fork_.side) == cudaSuccess)
      cudaStreamWaitEvent(stream_, fork_.joined, 0);
  }
  ForkScope(const ForkScope&) = delete;
  ForkScope& operator=(const ForkScope&) = delete;

  cudaStream_t side() const { return fork_.side; }
  void join() {
    joined_ = true;
    SEQBENCH_CUDA_CHECK(cudaEventRecord(fork_.joined, fork_.side));
    SEQBENCH_CUDA_CHECK(cudaStreamWaitEvent(stream_, fork_.joined, 0));
  }

 private:
  StreamFork fork_;
  cudaStream_t stream_;
  bool joined_ = false;
};

// Owns a StreamFork. The side stream is non-blocking: it runs only what waits on `forked`, and
// never orders itself behind the legacy default stream (which would tie it to a capture's
// isolation rules). The events do no timing, which makes recording them cheaper.
class OwnedStreamFork {
 public:
  OwnedStreamFork() {
    try {
      SEQBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&fork_.side, cudaStreamNonBlocking));
      SEQBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&fork_.forked, cudaEventDisableTiming));
      SEQBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&fork_.joined, cudaEventDisableTiming));
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  ~OwnedStreamFork() { release(); }
  OwnedStreamFork(const OwnedStreamFork&) = delete;
  OwnedStreamFork& operator=(const OwnedStreamFork&) = delete;
  OwnedStreamFork(OwnedStreamFork&& other) noexcept : fork_(std::exchange(other.fork_, StreamFork{})) {}
  OwnedStreamFork& operator=(OwnedStreamFork&&) = delete;

  const StreamFork& get() const { return fork_; }

 private:
  // Destructor path: nothing useful to do with an error here.
  void release() noexcept {
    if (fork_.joined) cudaEventDestroy(fork_.joined);
    if (fork_.forked) cudaEventDestroy(fork_.forked);
    if (fork_.side) cudaStreamDestroy(fork_.side);
    fork_ = StreamFork{};
  }
  StreamFork fork_;
};

}  // namespace seqbench
