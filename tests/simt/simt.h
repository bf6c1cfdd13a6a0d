// simt: runs the project's CUDA kernels on the CPU, one CUDA thread per fiber.
//
// Why: CI and most development machines have nvcc but no GPU, so without this the device code
// (index math, tails, vector paths, warp and block reductions, launch configurations) would first
// execute on a lent GPU. The simt build compiles the kernels and their gpu-labelled tests as host
// C++ (tests/simt/prelude.h maps the CUDA language onto this header, tests/simt/rewrite.py turns
// `k<<<grid, block, smem, stream>>>(args)` into `::simt::launch(...)(args)`), links them against
// the CUDA runtime subset of tests/simt/runtime.cpp, and runs the tests' comparisons with the
// references on the CPU.
//
// Execution model. A launch runs its blocks one after another; within a block every thread is a
// fiber with its own stack, run until it reaches a barrier or returns. Barriers are honoured
// exactly: __syncthreads() releases when every thread of the block waits at one, a warp collective
// (__shfl*_sync, __ballot_sync, __syncwarp) when every lane of its mask waits at one with the same
// mask. Anything CUDA leaves undefined and this can see is an error that names the kernel, block and
// thread: a barrier some threads of the block never reach (a deadlock, or an early return before
// __syncthreads()), a warp collective whose mask names a lane that does not exist or has returned, a
// shuffle from a lane outside the mask, a launch configuration the device would refuse (empty grid,
// more than 1024 threads, grid.y/z above 65535, dynamic shared memory above the limit), and a
// misaligned vector access (SEQBENCH_CHECK_VECTOR_ACCESS in kernels/packed.h). Between barriers the
// fibers of a block run in thread order in even blocks and in reverse order in odd ones, so a
// missing barrier (one thread reading shared memory another has not written yet) changes the
// result in one of them and the test's comparison sees it.
//
// What it cannot show: timing, occupancy, register spills, memory-model races beyond barrier
// order, device math (host expf, not __expf; the __CUDA_ARCH__ branches are not compiled), and
// out-of-bounds accesses to memory that is still mapped (build with -DSEQBENCH_SIMT_ASAN=ON for
// that). It is a CPU check of the device code, not a substitute for running it on a GPU.
#pragma once

#include <driver_types.h>
#include <vector_types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace simt {

inline constexpr unsigned kWarpSize = 32;

// The per-thread built-ins.
struct ThreadState {
  uint3 thread_idx{};
  unsigned linear = 0;  // thread_idx.x + x*(y + ...), as CUDA orders threads into warps
  unsigned lane = 0;
  unsigned warp = 0;
};

// The per-launch and per-block built-ins.
struct LaunchState {
  dim3 grid_dim{};
  dim3 block_dim{};
  uint3 block_idx{};
  unsigned char* dynamic_shared = nullptr;
};

namespace detail {
extern ThreadState* g_thread;
extern LaunchState* g_launch;

// Checks the launch configuration, then runs `body` for every thread of the grid (blocks in order),
// at once or, on a capturing stream, at each replay of the graph (streams.cpp). Sets the runtime's
// error state (runtime.cpp) on a bad configuration or a fault inside the kernel.
void run_grid(const char* kernel_name, const void* kernel_id, dim3 grid, dim3 block, std::size_t dynamic_smem,
              cudaStream_t stream, const std::function<void()>& body);

// Block barrier: waits for every thread of the block; returns how many passed a nonzero predicate.
unsigned block_barrier(int predicate);

// Warp collective: publishes `size` bytes of this lane, waits for every lane of `mask`, then
// copies what lane `source_lane` published into `out` (when `out` is not null) and waits again so
// that no lane overwrites its slot before all have read. `source_lane` must be in `mask`.
void warp_exchange(unsigned mask, const void* value, std::size_t size, unsigned source_lane, void* out);

// Warp vote: publishes `predicate`, waits for the mask's lanes, returns the bit mask of those
// whose predicate was nonzero.
unsigned warp_ballot(unsigned mask, int predicate);

// Records a fault of the running thread and leaves it (never returns to the kernel). Takes the
// message by rvalue and empties it: the caller's frame is abandoned, never unwound.
[[noreturn]] void fault(std::string&& what);

// Registered by cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize).
void set_max_dynamic_shared(const void* kernel_id, int bytes);
}  // namespace detail

inline void check_vector_access(const void* ptr, std::size_t bytes) {
  if (reinterpret_cast<std::uintptr_t>(ptr) % bytes != 0)
    detail::fault("misaligned " + std::to_string(bytes) + "-byte vector access at " +
                  std::to_string(reinterpret_cast<std::uintptr_t>(ptr)));
}

// The kernel launch that tests/simt/rewrite.py puts in place of `kernel<<<...>>>(args)`:
// launch("kernel", kernel, grid, block[, smem[, stream]])(args).
template <class... Params>
class Launch {
 public:
  Launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
         cudaStream_t stream)
      : name_(name), kernel_(kernel), grid_(grid), block_(block), smem_(smem), stream_(stream) {}

  template <class... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel launched with the wrong number of arguments");
    // By value, converted as the kernel's parameters, as a launch copies them; held by the body,
    // which a graph capture keeps for its replays.
    std::tuple<std::decay_t<Params>...> values(std::forward<Args>(args)...);
    auto* kernel = kernel_;
    detail::run_grid(name_, reinterpret_cast<const void*>(kernel), grid_, block_, smem_, stream_,
                     [values = std::move(values), kernel] { std::apply(kernel, values); });
  }

 private:
  const char* name_;
  void (*kernel_)(Params...);
  dim3 grid_, block_;
  std::size_t smem_;
  cudaStream_t stream_;
};

// %globaltimer: nanoseconds of the host's steady clock.
inline unsigned long long globaltimer_ns() {
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now().time_since_epoch())
                                             .count());
}

template <class... Params>
Launch<Params...> launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                         std::size_t smem = 0, cudaStream_t stream = nullptr) {
  return Launch<Params...>(name, kernel, grid, block, smem, stream);
}

// The source lane of each shuffle flavour, as the PTX shfl instruction computes it: within
// segments of `width` lanes; a source outside the segment gives the lane its own value.
inline unsigned shfl_source_idx(unsigned lane, int src, int width) {
  const unsigned segment = lane & ~static_cast<unsigned>(width - 1);
  return segment + (static_cast<unsigned>(src) & static_cast<unsigned>(width - 1));
}
// xor: a group may read lanes of earlier groups but not of later ones (the CUDA guide's rule).
inline unsigned shfl_source_xor(unsigned lane, int mask, int width) {
  const unsigned source = lane ^ static_cast<unsigned>(mask);
  const unsigned segment_end = (lane & ~static_cast<unsigned>(width - 1)) + static_cast<unsigned>(width);
  return source < segment_end ? source : lane;
}
inline unsigned shfl_source_down(unsigned lane, unsigned delta, int width) {
  const unsigned in_segment = (lane & static_cast<unsigned>(width - 1)) + delta;
  return in_segment < static_cast<unsigned>(width) ? lane + delta : lane;
}
inline unsigned shfl_source_up(unsigned lane, unsigned delta, int width) {
  return (lane & static_cast<unsigned>(width - 1)) >= delta ? lane - delta : lane;
}

template <class T>
T shuffle(unsigned mask, T value, unsigned source_lane) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16,
                "shuffle of a type the hardware cannot move");
  T out;
  detail::warp_exchange(mask, &value, sizeof(T), source_lane, &out);
  return out;
}

}  // namespace simt
