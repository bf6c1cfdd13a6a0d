// The "dangling tensor" memory manager of LightSeq2 (§IV-D, Fig. 8): temporaries are not allocated
// one by one during a step; a dry run at the maximum shapes records when each is first and last
// used, a planner gives each an offset inside ONE block allocated once, and tensors whose
// lifetimes do not overlap share bytes.
//
// The parts, in the order they are used:
//   1. LifetimeRecorder: the dry run. A layer describes its ops in execution order, each as the
//      tensors it reads and writes; one op is one step. Sizes are those at the maximum shapes.
//   2. plan_memory(): greedy by size (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep
//      Neural Net Inference", Algorithm 3, which LightSeq's lsflow MemoryManager also implements):
//      largest tensor first; each goes to the lowest aligned offset where it overlaps in memory
//      no already-placed tensor whose lifetime overlaps its own. Ties in size are broken two
//      ways, and the planner places the tensors in both orders and keeps the smaller block (the
//      first on a tie), so that a plan is a pure function of its input:
//        (a) the longer lifetime first, then the earlier first use, then the declaration order.
//            Long-lived tensors settle low, where they block least: this is what reaches
//            LightSeq2's Fig. 8 optimum 3BLH + max(3BLH, BL²N) for the attention backward at
//            every ratio of the two terms (some shapes with 2 < N·L/H < 3 come out above it
//            otherwise; tests/layers pins this);
//        (b) the earlier first use first, then the declaration order. It reaches the max-live
//            lower bound for the Transformer layers and stacks at their preset maxima, where (a)
//            ends one 16 MiB tensor above it (tests/layers pins both, and a 4-tensor case).
//   3. find_plan_violations() / check_plan(): the checking mode. An independent O(n²) pass over
//      every pair proves that no two tensors with overlapping lifetimes overlap in memory, and
//      that every offset is aligned and inside the block. It shares none of the planner's logic.
//   4. MemoryManager: owns the block (one allocation through a DeviceAllocator, so that it is
//      counted) and hands out pointers; a request above a tensor's planned size throws naming
//      both numbers.
//
// Conventions: a step is an op index (0, 1, ...); a lifetime [first_step, last_step] is inclusive,
// so two tensors overlap in time when each starts no later than the other ends: a tensor an op
// reads and another the same op writes can never share bytes. Each tensor occupies
// align_up(bytes, alignment) bytes in the plan (its "slot"), as a separate cudaMalloc would;
// the block size is the highest slot end. Host-only logic, testable without a GPU.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace seqbench::layers {

class DeviceAllocator;

// cudaMalloc's alignment, and what a GEMM or a 16-byte Packed<T> load wants at most: the default.
inline constexpr std::size_t kBlockAlignment = 256;
// The least alignment of a tensor that kernels read with 16-byte vectors (kernels/packed.h).
inline constexpr std::size_t kVectorAlignment = 16;

using TensorId = std::size_t;

struct TensorLifetime {
  std::string name;
  std::size_t bytes = 0;                    // at the maximum shapes; 0 is allowed and occupies nothing
  int first_step = 0;                       // the first op that uses it
  int last_step = 0;                        // the last op that uses it (inclusive)
  std::size_t alignment = kBlockAlignment;  // a power of two; its offset is a multiple of it
  // Owned by the caller (a layer's input, output or their gradients): recorded so that the dry run
  // can check its uses, but it has 0 bytes and is never placed in the block.
  bool external = false;
};

// align_up(13, 8) == 16. `alignment` must be a power of two (throws otherwise) and the result
// must fit in size_t (throws otherwise).
std::size_t align_up(std::size_t value, std::size_t alignment);

// The dry run. Usage:
//   LifetimeRecorder rec;
//   TensorId x = rec.external("x");
//   TensorId h = rec.tensor("h", bytes);
//   rec.op("gemm", {x}, {h});        // step 0
//   rec.op("relu", {h}, {h});        // step 1 (in place)
//   rec.op("out", {h}, {y});         // step 2
//   std::vector<TensorLifetime> lifetimes = rec.lifetimes();
// Ids are indices into lifetimes(). Names must be unique. An op that reads a non-external tensor
// no earlier op (or the same op's earlier write) has written is a description bug and throws, as
// does a declared tensor no op uses.
class LifetimeRecorder {
 public:
  explicit LifetimeRecorder(std::size_t alignment = kBlockAlignment);

  TensorId tensor(std::string name, std::size_t bytes);
  TensorId external(std::string name);
  // Records one step; returns its index. Reads are checked before writes, so an op may read and
  // write the same tensor in place once an earlier op has written it.
  int op(std::string name, const std::vector<TensorId>& reads, const std::vector<TensorId>& writes);

  std::vector<TensorLifetime> lifetimes() const;
  // lifetimes(), with every tensor that the forward (steps [0, forward_steps)) writes and a later
  // step reads kept live to the last step (a scratch tensor that every op writes before use and
  // none reads, a GEMM workspace, carries nothing and is left as it is): nothing the backward writes can then
  // share its bytes, so the backward can run again after itself on the same forward (PyTorch's retain_graph;
  // a timer repeating a backward). Throws, naming the tensor and the op, when a step at or after
  // forward_steps writes such a tensor (in place: a second backward would read the first one's
  // values), and for forward_steps outside [0, steps()].
  std::vector<TensorLifetime> lifetimes_retaining_forward(int forward_steps) const;
  const std::vector<std::string>& ops() const { return ops_; }
  int steps() const { return static_cast<int>(ops_.size()); }
  std::size_t size() const { return entries_.size(); }
  const std::string& name(TensorId id) const;

 private:
  struct Entry {
    TensorLifetime lifetime;
    bool used = false;
    bool written = false;
    int last_write = -1;  // the last step that writes it (-1: none; externals are the caller's)
    int last_read = -1;   // the last step that reads it (-1: none; a GEMM workspace is only written)
  };
  void touch(TensorId id, int step, const std::string& op_name, bool write);

  std::size_t alignment_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, TensorId> by_name_;
  std::vector<std::string> ops_;
};

struct MemoryPlan {
  std::vector<std::size_t> offsets;  // offsets[i] for tensors[i]; 0 for empty and external tensors
  std::size_t block_bytes = 0;       // the highest end of a slot: the one allocation's size
};

// Greedy by size, in two tie-break orders (see the top of the file). Throws, naming the tensor,
// for an alignment that is not a power of two, a first_step after its last_step or below 0, or an
// external tensor with bytes. O(n²) in the number of tensors.
MemoryPlan plan_memory(const std::vector<TensorLifetime>& tensors);

// The checking mode: every problem of `plan` for `tensors`, one line each (at most `limit` lines,
// then one line with the count of the rest); empty when the plan is sound. Checks the offsets'
// count, each offset's alignment, each tensor's end against block_bytes, and every pair of tensors
// whose lifetimes overlap for overlapping byte ranges [offset, offset + bytes).
std::vector<std::string> find_plan_violations(const std::vector<TensorLifetime>& tensors,
                                              const MemoryPlan& plan, std::size_t limit = 10);
// Throws seqbench::Error listing the violations, if any.
void check_plan(const std::vector<TensorLifetime>& tensors, const MemoryPlan& plan);

// What allocating every tensor separately costs: the sum of the slots, align_up(bytes, alignment).
// The "naive" side of LightSeq2's Fig. 8 accounting.
std::size_t naive_bytes(const std::vector<TensorLifetime>& tensors);

// The largest total size of the tensors live at one step: no placement can use a smaller block.
// With `padded`, each tensor counts its slot align_up(bytes, alignment) (the bound for this
// planner, which places slots); without, its bytes (the bound for any placement).
std::size_t max_live_bytes(const std::vector<TensorLifetime>& tensors, bool padded);

// The run-time side: plans `tensors`, checks the plan (always: it is O(n²) on the host, once),
// allocates one block of plan.block_bytes through `allocator` and hands out pointers into it.
// The allocator must outlive the manager, which frees the block through it.
//
// Checking mode (set_step): when the caller announces the step it is executing, get() also
// refuses a tensor outside its recorded lifetime, which is what the plan's soundness rests on:
// a layer whose run differs from its dry run fails loudly instead of corrupting a neighbour.
class MemoryManager {
 public:
  MemoryManager(std::vector<TensorLifetime> tensors, DeviceAllocator& allocator);
  ~MemoryManager();
  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;

  // The tensor's memory for a request of `bytes` (the current shape's size). Throws naming the
  // tensor, the request and the planned maximum when bytes exceeds what was planned, and naming
  // the id and the count for an unknown id.
  void* get(TensorId id, std::size_t bytes) const;
  template <class T>
  T* get_as(TensorId id, std::size_t count) const {
    return static_cast<T*>(get(id, count * sizeof(T)));
  }
  // Looks a tensor up by its recorded name; throws naming it when there is none.
  TensorId id(std::string_view name) const;

  // Checking mode: from now on get() also requires first_step <= step <= last_step. A negative
  // step turns the check off.
  void set_step(int step) { step_ = step; }

  const std::vector<TensorLifetime>& tensors() const { return tensors_; }
  const MemoryPlan& plan() const { return plan_; }
  std::size_t block_bytes() const { return plan_.block_bytes; }
  void* block() const { return block_; }

 private:
  std::vector<TensorLifetime> tensors_;
  MemoryPlan plan_;
  DeviceAllocator& allocator_;
  void* block_ = nullptr;
  int step_ = -1;
};

}  // namespace seqbench::layers
