// The fiber scheduler behind simt::launch (tests/simt/simt.h): one fiber per CUDA thread, blocks
// one after another, barriers and warp collectives resolved exactly, undefined behaviour reported.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/simt/runtime_state.h"
#include "tests/simt/simt.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// Under AddressSanitizer (SEQBENCH_SIMT_ASAN) every stack switch is announced, so that ASan knows
// which stack is live, and a fiber's stack is unpoisoned before it is reused: a faulted fiber is
// abandoned mid-frame with its locals' redzones still poisoned.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

namespace simt::detail {

ThreadState* g_thread = nullptr;
LaunchState* g_launch = nullptr;

namespace {

// The stack switch: saves the callee-saved registers of the running context on its stack, stores
// its stack pointer in *save, and resumes the context whose stack pointer is `next`.
#if defined(__x86_64__)
extern "C" void simt_switch_stack(void** save, void* next);
asm(R"(
  .text
  .globl simt_switch_stack
  .type simt_switch_stack,@function
simt_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_switch_stack,.-simt_switch_stack
)");
#endif

enum class Wait : std::uint8_t { running, block, warp, exited };

struct Fiber {
  ThreadState state;
  Wait wait = Wait::running;
  unsigned mask = 0;  // of the warp collective it waits at
  int predicate = 0;  // given to the block barrier it waits at
  unsigned result = 0;
  std::array<unsigned char, 16> slot{};  // what it published to its warp
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t context{};
#endif
  char* stack = nullptr;
  void* asan_fake_stack = nullptr;
};

constexpr std::size_t kStackBytes = 256 * 1024;
constexpr std::size_t kGuardBytes = 4096;
constexpr unsigned kMaxThreads = 1024;

struct Executor {
  std::vector<Fiber> fibers;
  std::vector<char*> stacks;  // kMaxThreads stacks, each above a PROT_NONE guard page
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  bool faulted = false;
  std::string fault_message;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler{};
#endif
  std::map<const void*, int> max_dynamic_shared;
  bool running = false;
  const void* scheduler_stack_bottom = nullptr;  // reported by ASan at the first switch
  std::size_t scheduler_stack_size = 0;
};

Executor& executor() {
  static Executor e;
  return e;
}

char* stack_for(Executor& e, unsigned index) {
  if (e.stacks.empty()) {
    const std::size_t each = kStackBytes + kGuardBytes;
    void* region = mmap(nullptr, each * kMaxThreads, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) {
      std::fprintf(stderr, "simt: cannot map %zu bytes of fiber stacks\n", each * kMaxThreads);
      std::abort();
    }
    auto* base = static_cast<char*>(region);
    for (unsigned i = 0; i < kMaxThreads; ++i) {
      mprotect(base + i * each, kGuardBytes, PROT_NONE);  // an overflow faults instead of corrupting
      e.stacks.push_back(base + i * each + kGuardBytes);
    }
  }
  return e.stacks[index];
}

// The fiber side of an ASan announcement: after arriving on a fiber's stack.
void arrived_on_fiber(Executor& e, Fiber& f) {
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &e.scheduler_stack_bottom, &e.scheduler_stack_size);
#else
  (void)e;
  (void)f;
#endif
}

// Leaves the running fiber for the scheduler; returns when the scheduler resumes it. A fiber that
// `exits` is never resumed.
void yield_to_scheduler(bool exits = false) {
  Executor& e = executor();
  Fiber* f = e.current;
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(exits ? nullptr : &f->asan_fake_stack, e.scheduler_stack_bottom,
                                 e.scheduler_stack_size);
#else
  (void)exits;
#endif
#if defined(__x86_64__)
  simt_switch_stack(&f->sp, e.scheduler_sp);
#else
  swapcontext(&f->context, &e.scheduler);
#endif
  arrived_on_fiber(e, *f);
}

[[noreturn]] void fiber_main() {
  Executor& e = executor();
  arrived_on_fiber(e, *e.current);
  (*e.body)();
  e.current->wait = Wait::exited;
  yield_to_scheduler(true);
  std::abort();  // an exited fiber is never resumed
}

#if defined(__x86_64__)
extern "C" [[noreturn]] void simt_fiber_entry() {
  fiber_main();
}
#else
void fiber_entry_ucontext() {
  fiber_main();
}
#endif

void start_fiber(Executor& e, Fiber& f) {
#if SIMT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(f.stack, kStackBytes);
  f.asan_fake_stack = nullptr;
#endif
#if defined(__x86_64__)
  // The first switch pops six zero registers and returns into simt_fiber_entry with the stack
  // aligned as after a call (rsp + 8 a multiple of 16); its own return address is a 0 it never uses.
  auto top = reinterpret_cast<std::uintptr_t>(f.stack + kStackBytes) & ~std::uintptr_t{15};
  auto* slots = reinterpret_cast<void**>(top);
  slots[-1] = nullptr;
  slots[-2] = reinterpret_cast<void*>(&simt_fiber_entry);
  for (int r = 3; r <= 8; ++r) slots[-r] = nullptr;
  f.sp = &slots[-8];
  (void)e;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_entry_ucontext, 0);
#endif
}

void resume(Executor& e, Fiber& f) {
  e.current = &f;
  g_thread = &f.state;
#if SIMT_ASAN
  void* scheduler_fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&scheduler_fake_stack, f.stack, kStackBytes);
#endif
#if defined(__x86_64__)
  simt_switch_stack(&e.scheduler_sp, f.sp);
#else
  swapcontext(&e.scheduler, &f.context);
#endif
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
  e.current = nullptr;
  g_thread = nullptr;
}

std::string format3(const char* what, uint3 v) {
  return std::string(what) + " (" + std::to_string(v.x) + "," + std::to_string(v.y) + "," +
         std::to_string(v.z) + ")";
}

std::string format3(const char* what, dim3 v) {
  return format3(what, uint3{v.x, v.y, v.z});
}

const char* wait_name(Wait w) {
  switch (w) {
    case Wait::running:
      return "running";
    case Wait::block:
      return "__syncthreads";
    case Wait::warp:
      return "a warp collective";
    case Wait::exited:
      return "returned";
  }
  return "?";
}

std::string hex(unsigned mask) {
  std::ostringstream s;
  s << "0x" << std::hex << mask;
  return s.str();
}

// Releases the warp collectives whose lanes have all arrived; returns whether any was released,
// or sets `problem` when a mask cannot be satisfied.
bool release_warps(std::vector<Fiber>& fibers, std::string& problem) {
  bool released = false;
  const auto threads = static_cast<unsigned>(fibers.size());
  for (unsigned first = 0; first < threads; first += kWarpSize) {
    const unsigned lanes = std::min(kWarpSize, threads - first);
    for (unsigned lane = 0; lane < lanes; ++lane) {
      Fiber& f = fibers[first + lane];
      if (f.wait != Wait::warp) continue;
      bool ready = true;
      for (unsigned other = 0; other < kWarpSize; ++other) {
        if (!(f.mask >> other & 1u)) continue;
        if (other >= lanes) {
          problem = "thread " + std::to_string(first + lane) + " waits at a warp collective with mask " +
                    hex(f.mask) + " naming lane " + std::to_string(other) +
                    ", which its warp does not have (" + std::to_string(lanes) + " threads)";
          return false;
        }
        const Fiber& o = fibers[first + other];
        if (o.wait == Wait::exited) {
          problem = "thread " + std::to_string(first + lane) +
                    " waits at a warp collective whose mask names lane " + std::to_string(other) +
                    ", which has returned";
          return false;
        }
        if (o.wait == Wait::warp && o.mask != f.mask) {
          problem = "lanes " + std::to_string(lane) + " and " + std::to_string(other) + " of warp " +
                    std::to_string(first / kWarpSize) + " wait at warp collectives with different masks (" +
                    hex(f.mask) + ", " + hex(o.mask) + ")";
          return false;
        }
        if (o.wait != Wait::warp) ready = false;
      }
      if (!(f.mask >> lane & 1u)) {
        problem = "thread " + std::to_string(first + lane) +
                  " calls a warp collective whose mask leaves out its own lane";
        return false;
      }
      if (!ready) continue;
      for (unsigned other = 0; other < lanes; ++other) {
        if (f.mask >> other & 1u) fibers[first + other].wait = Wait::running;
      }
      released = true;
    }
  }
  return released;
}

// Releases the block barrier when every thread that has not returned waits at it.
bool release_block(std::vector<Fiber>& fibers, std::string& problem) {
  unsigned waiting = 0, exited = 0, passed = 0;
  for (const Fiber& f : fibers) {
    if (f.wait == Wait::block) {
      ++waiting;
      passed += f.predicate != 0;
    } else if (f.wait == Wait::exited) {
      ++exited;
    } else {
      return false;
    }
  }
  if (waiting == 0) return false;
  if (exited != 0) {
    problem = std::to_string(waiting) + " threads wait at __syncthreads but " + std::to_string(exited) +
              " threads of the block have returned (a barrier in code that not all threads reach)";
    return false;
  }
  for (Fiber& f : fibers) {
    f.wait = Wait::running;
    f.result = passed;
  }
  return true;
}

std::string describe_deadlock(const std::vector<Fiber>& fibers) {
  std::map<std::string, std::vector<unsigned>> by_state;
  for (const Fiber& f : fibers) by_state[wait_name(f.wait)].push_back(f.state.linear);
  std::ostringstream s;
  s << "deadlock:";
  for (const auto& [name, threads] : by_state) {
    s << " " << threads.size() << " thread(s) " << (name == "returned" ? "" : "at ") << name << " (first "
      << threads.front() << ")";
  }
  return s.str();
}

}  // namespace

void set_max_dynamic_shared(const void* kernel_id, int bytes) {
  executor().max_dynamic_shared[kernel_id] = bytes;
}

unsigned block_barrier(int predicate) {
  Executor& e = executor();
  e.current->predicate = predicate;
  e.current->wait = Wait::block;
  yield_to_scheduler();
  return e.current->result;
}

void warp_exchange(unsigned mask, const void* value, std::size_t size, unsigned source_lane, void* out) {
  Executor& e = executor();
  Fiber* self = e.current;
  if (size > self->slot.size()) fault("warp exchange of " + std::to_string(size) + " bytes");
  std::memcpy(self->slot.data(), value, size);
  self->mask = mask;
  self->wait = Wait::warp;
  yield_to_scheduler();
  if (out != nullptr) {
    if (source_lane >= kWarpSize || !(mask >> source_lane & 1u))
      fault("shuffle from lane " + std::to_string(source_lane) + ", which is not in the mask");
    const unsigned first = self->state.warp * kWarpSize;
    std::memcpy(out, e.fibers[first + source_lane].slot.data(), size);
  }
  self->wait = Wait::warp;
  yield_to_scheduler();
}

unsigned warp_ballot(unsigned mask, int predicate) {
  Executor& e = executor();
  Fiber* self = e.current;
  const int flag = predicate != 0;
  std::memcpy(self->slot.data(), &flag, sizeof flag);
  self->mask = mask;
  self->wait = Wait::warp;
  yield_to_scheduler();
  unsigned bits = 0;
  const unsigned first = self->state.warp * kWarpSize;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    int other = 0;
    std::memcpy(&other, e.fibers[first + lane].slot.data(), sizeof other);
    if (other) bits |= 1u << lane;
  }
  self->wait = Wait::warp;
  yield_to_scheduler();
  return bits;
}

[[noreturn]] void fault(std::string&& what) {
  Executor& e = executor();
  if (e.current == nullptr) {
    std::fprintf(stderr, "simt: %s (outside any kernel)\n", what.c_str());
    std::abort();
  }
  // The faulting fiber never resumes, so nothing on its stack is ever destroyed: the caller's
  // message temporary gives its buffer up here (swapped for an empty one, which owns no heap
  // memory), and the record is built in a scope that closes before the fiber leaves. Otherwise
  // every fault would leak its message (LeakSanitizer, -DSEQBENCH_SIMT_ASAN=ON).
  {
    std::string message;
    message.swap(what);
    e.faulted = true;
    e.fault_message = "thread " + std::to_string(e.current->state.linear) +
                      format3("", e.current->state.thread_idx) + ": " + message;
  }
  e.current->wait = Wait::exited;
  yield_to_scheduler(true);
  std::abort();
}

namespace {

// Runs a validated launch to completion: its blocks one after another, each block's threads as
// fibers (the file's header).
void execute_grid(const char* kernel_name, dim3 grid, dim3 block, std::size_t dynamic_smem,
                  const std::function<void()>& body) {
  Executor& e = executor();
  if (runtime_sticky_error() != cudaSuccess) return;  // a faulted context runs nothing more
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  std::vector<unsigned char> shared(std::max<std::size_t>(dynamic_smem, 16) + 16);
  LaunchState launch;
  launch.grid_dim = grid;
  launch.block_dim = block;
  launch.dynamic_shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(shared.data()) + 15) & ~std::uintptr_t{15});
  g_launch = &launch;
  e.body = &body;
  e.running = true;
  e.fibers.assign(threads, Fiber{});
  const auto n = static_cast<unsigned>(threads);
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = e.fibers[t];
    f.state.thread_idx = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    f.state.linear = t;
    f.state.lane = t % kWarpSize;
    f.state.warp = t / kWarpSize;
    f.stack = stack_for(e, t);
  }
  std::string problem;
  std::uint64_t block_linear = 0;
  for (unsigned bz = 0; bz < grid.z && problem.empty(); ++bz) {
    for (unsigned by = 0; by < grid.y && problem.empty(); ++by) {
      for (unsigned bx = 0; bx < grid.x && problem.empty(); ++bx, ++block_linear) {
        launch.block_idx = uint3{bx, by, bz};
        // Uninitialized dynamic shared memory reads as NaN (all ones), not as a lucky zero.
        std::memset(launch.dynamic_shared, 0xff, dynamic_smem);
        for (Fiber& f : e.fibers) {
          f.wait = Wait::running;
          start_fiber(e, f);
        }
        const bool reverse = block_linear % 2 == 1;
        for (;;) {
          bool ran = false;
          for (unsigned i = 0; i < n && !e.faulted; ++i) {
            Fiber& f = e.fibers[reverse ? n - 1 - i : i];
            while (f.wait == Wait::running && !e.faulted) {
              resume(e, f);
              ran = true;
            }
          }
          if (e.faulted) {
            problem = e.fault_message;
            break;
          }
          const bool warps = release_warps(e.fibers, problem);
          if (!problem.empty()) break;
          const bool blocks = !warps && release_block(e.fibers, problem);
          if (!problem.empty()) break;
          if (warps || blocks) continue;
          if (std::all_of(e.fibers.begin(), e.fibers.end(),
                          [](const Fiber& f) { return f.wait == Wait::exited; }))
            break;
          if (!ran) {
            problem = describe_deadlock(e.fibers);
            break;
          }
        }
        if (!problem.empty()) problem = format3("block", launch.block_idx) + " " + problem;
      }
    }
  }
  e.running = false;
  e.faulted = false;
  e.body = nullptr;
  g_launch = nullptr;
  if (!problem.empty())
    runtime_record_error(cudaErrorLaunchFailure, true, std::string("simt: ") + kernel_name + ": " + problem);
}
}  // namespace

void run_grid(const char* kernel_name, const void* kernel_id, dim3 grid, dim3 block, std::size_t dynamic_smem,
              cudaStream_t stream, const std::function<void()>& body) {
  Executor& e = executor();
  const auto config_error = [&](const std::string& why) {
    runtime_record_error(cudaErrorInvalidConfiguration, false,
                         std::string("simt: launch of ") + kernel_name + " refused: " + why);
  };
  if (e.running) {
    std::fprintf(stderr, "simt: %s launched from inside a kernel\n", kernel_name);
    std::abort();
  }
  if (runtime_sticky_error() != cudaSuccess) return;  // a faulted context runs nothing more
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return config_error(format3("an empty grid", grid));
  if (block.x == 0 || block.y == 0 || block.z == 0) return config_error(format3("an empty block", block));
  if (threads > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64)
    return config_error(format3("block", block) +
                        " above 1024 threads or the per-dimension limits (1024, 1024, 64)");
  if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
    return config_error(format3("grid", grid) + " above the limits (2^31-1, 65535, 65535)");
  int smem_limit = 48 * 1024;
  if (const auto it = e.max_dynamic_shared.find(kernel_id); it != e.max_dynamic_shared.end())
    smem_limit = it->second;
  if (dynamic_smem > static_cast<std::size_t>(smem_limit))
    return config_error(std::to_string(dynamic_smem) +
                        " bytes of dynamic shared memory above the kernel's limit of " +
                        std::to_string(smem_limit));

  // The configuration is checked when the launch is issued, as the device checks it; where it runs
  // (now, or at each replay of a captured graph) is the stream's business (streams.cpp). The body
  // is copied: a recorded launch outlives its caller's frame.
  runtime_submit(kernel_name, stream, NodeKind::kernel, [kernel_name, grid, block, dynamic_smem, body] {
    execute_grid(kernel_name, grid, block, dynamic_smem, body);
  });
}

}  // namespace simt::detail
