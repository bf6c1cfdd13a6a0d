// The two sides of a layer's op list, shared by EncoderLayer and DecoderLayer and by their
// sub-layers (layers/attention_sublayer.h, layers/ffn_sublayer.h):
//
//   PlanBuilder   the dry run: each op in execution order with the tensors it reads and writes at
//                 the config's maximum shapes (a LifetimeRecorder), plus the kernels' workspace
//                 sizes at those maxima. Host only.
//   LayerRun<T>   the execution of those ops for one dtype: every op announces its name, which
//                 must be the dry run's at that step, and the MemoryManager then refuses a tensor
//                 used outside its planned lifetime (checking mode), so a run that differs from
//                 its plan throws instead of corrupting a neighbour.
//
// Names: a layer has a prefix ("enc0.", "dec3."); its sub-layers name their tensors and ops
// "<prefix><sub-layer>.<name>" ("enc0.attn.probs", "dec3.cross.q_gemm"); LayerRun::op takes the
// name without the layer prefix.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/bias_act_dropout.h"
#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/gemm.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {

// A tensor the config does not use.
inline constexpr TensorId kNoTensor = static_cast<TensorId>(-1);

// What the forward keeps for the backward of the layers' pointwise ops. LightSeq2 keeps every
// output a backward GEMM reads; two of them are recomputable from what the backward reads anyway:
//   none       keep the dropped attention probabilities [B·N·Lq, Lk] and the FFN activation
//              output [T, F] from the forward to the backward, as LightSeq2 does;
//   pointwise  keep neither: the backward redraws them from the probabilities and fc1's output
//              (which it keeps for the softmax and activation backwards) with the forward's
//              kernels and Philox streams, so they are bitwise the forward's, into temporaries
//              that live from the recomputation to the GEMM that reads them.
// pointwise saves B·N·Lq·Lk (with attention dropout) + T·F elements of kept memory per layer
// (128 MiB for transformer-big at 8192 tokens and L <= 256 in fp16), which a stack keeps once per
// layer, for one extra pass (a read and a write) over each tensor per backward. The recomputing
// kernels run under their forward launchers' NVTX names (dropout_fwd, bias_act_dropout_fwd)
// inside the backward.
enum class Recompute { none, pointwise };
const char* recompute_name(Recompute recompute);

// The shape of one parameter tensor (rows = 1 for vectors).
struct ParameterShape {
  std::string name;
  std::size_t rows = 0, cols = 0;
  std::size_t elements() const { return rows * cols; }
};

// The largest B·L·S with B·L <= max_batch_tokens, B·S <= max_batch_tokens and 1 <= L, S <=
// max_seq_len (for a given B the best is L = S = min(max_seq_len, max_batch_tokens / B)), i.e.
// the largest B·L² of self-attention: the attention scores' planned rows·cols per head, for
// self- and cross-attention alike. Validates the config.
std::size_t max_score_elements(const LayerConfig& config);

// The fused kernels' name of the config's activation.
kernels::Activation kernel_activation(Activation activation);

class PlanBuilder {
 public:
  // Validates the config and computes the workspace sizes at its maxima. `recompute` is the
  // layers' choice of what the forward keeps (see Recompute); the sub-layers' dry runs follow it,
  // and their ids record what they planned.
  PlanBuilder(const LayerConfig& config, std::string prefix, Recompute recompute = Recompute::none);

  const LayerConfig& config() const { return config_; }
  Recompute recompute() const { return recompute_; }
  const std::string& prefix() const { return prefix_; }
  // A stack records its layers one after another into one builder, each under its own prefix.
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  LifetimeRecorder& recorder() { return rec_; }

  TensorId external(const std::string& name) { return rec_.external(name); }
  // A tensor of `elements` values of the config's dtype, named prefix + name.
  TensorId act(const std::string& name, std::size_t elements);
  // LayerNorm statistics: max_batch_tokens floats, named prefix + name.
  TensorId stat(const std::string& name);
  // `bytes` bytes, named prefix + name.
  TensorId bytes(const std::string& name, std::size_t bytes);
  // The layer's own GEMM workspace (when it makes its Gemm), named prefix + "gemm_workspace";
  // from now on every GEMM op lists it among its writes.
  void plan_gemm_workspace(std::size_t bytes);
  TensorId gemm_workspace() const { return gemm_ws_; }
  // One op (step), named prefix + name; a GEMM op adds the workspace to its writes.
  void op(const std::string& name, const std::vector<TensorId>& reads, const std::vector<TensorId>& writes);
  void gemm_op(const std::string& name, const std::vector<TensorId>& reads, std::vector<TensorId> writes);

  // Maxima.
  std::size_t tokens() const { return tokens_; }  // max_batch_tokens
  std::size_t hidden() const { return static_cast<std::size_t>(config_.hidden); }
  std::size_t ffn() const { return static_cast<std::size_t>(config_.ffn); }
  std::size_t scores() const { return scores_; }  // max_score_elements · heads
  // Kernel workspaces, the largest any row count in [1, max_batch_tokens] needs.
  std::size_t layernorm_bwd_ws() const { return ln_ws_; }
  std::size_t bias_dropout_residual_bwd_ws() const { return bdr_ws_; }
  std::size_t bias_act_dropout_bwd_ws() const { return bad_ws_; }
  std::size_t qkv_bias_split_bwd_ws(std::int64_t projections) const;

  int steps() const { return rec_.steps(); }

 private:
  LayerConfig config_;
  std::string prefix_;
  Recompute recompute_ = Recompute::none;
  LifetimeRecorder rec_;
  TensorId gemm_ws_ = kNoTensor;
  std::size_t elem_ = 0, tokens_ = 0, scores_ = 0, ln_ws_ = 0, bdr_ws_ = 0, bad_ws_ = 0;
};

// The dry run's lifetimes as a planned layer uses them: plan.recorder().lifetimes(), or with
// `retain_forward` lifetimes_retaining_forward(forward_steps) (layers/memory_planner.h): every
// tensor the forward keeps for the backward then stays live to the last step, so that a backward
// may be repeated on one forward.
std::vector<TensorLifetime> planned_lifetimes(PlanBuilder& plan, int forward_steps, bool retain_forward);

// What every planned layer holds: its dry run's op list, the one block of its temporaries
// (allocated at construction through the caller's allocator) and its Gemm (the caller's, or its
// own, made at the first use with the workspace planned in the block).
class PlannedLayer {
 public:
  // `plan` is the finished dry run; `shared_gemm` may be null (then the plan must hold the
  // workspace: PlanBuilder::plan_gemm_workspace). `retain_forward`: see planned_lifetimes.
  PlannedLayer(const char* layer, PlanBuilder& plan, int forward_steps, DeviceAllocator& allocator,
               Gemm* shared_gemm, std::size_t gemm_workspace_bytes, bool retain_forward = false);
  ~PlannedLayer();
  PlannedLayer(const PlannedLayer&) = delete;
  PlannedLayer& operator=(const PlannedLayer&) = delete;

  Gemm& gemm();
  MemoryManager& memory() { return *memory_; }
  const MemoryManager& memory() const { return *memory_; }
  const std::vector<std::string>& ops() const { return ops_; }
  int forward_steps() const { return forward_steps_; }
  // Whether a backward leaves the forward's kept tensors intact (retain_forward), so that another
  // backward may follow; otherwise the backward consumes the forward (its temporaries reuse
  // those bytes) and the layer must refuse a second backward.
  bool retains_forward() const { return retain_forward_; }
  // Throws "<layer>::<where>: <what> overlaps the layer's planned block" when [p, p + bytes) does.
  void require_outside_block(const char* where, const char* what, const void* p, std::size_t bytes) const;
  // Throws unless a run that started at `first_step` ended where the dry run says.
  void require_ran(const char* where, int first_step, int end_step) const;

 private:
  const char* layer_;
  std::vector<std::string> ops_;
  int forward_steps_ = 0;
  bool retain_forward_ = false;
  std::unique_ptr<MemoryManager> memory_;
  Gemm* shared_gemm_ = nullptr;
  void* gemm_workspace_ = nullptr;
  std::size_t gemm_workspace_bytes_ = 0;
  std::unique_ptr<Gemm> own_gemm_;
};

// The names of the null pointers among a layer's parameter views: fn(visit) must call
// visit(name, pointer) for each; returns "weights.a, grads.b" (empty when none is null).
template <class Weights, class Grads, class ForEach>
std::string null_parameters(Weights& weights, Grads& grads, ForEach&& for_each) {
  std::string missing;
  for_each(weights, [&](const char* name, const void* ptr) {
    if (ptr == nullptr) missing += std::string(missing.empty() ? "" : ", ") + "weights." + name;
  });
  for_each(grads, [&](const char* name, void* ptr) {
    if (ptr == nullptr) missing += std::string(missing.empty() ? "" : ", ") + "grads." + name;
  });
  return missing;
}

template <class T>
class LayerRun {
 public:
  // `layer` names the layer in messages ("EncoderLayer"); `ops` is the dry run's op list and
  // `first_step` the step this run starts at (0 for a forward, the forward's op count for a
  // backward).
  LayerRun(const char* layer, const std::string& prefix, MemoryManager& mem,
           const std::vector<std::string>& ops, int first_step, Gemm& gemm, cudaStream_t stream)
      : layer_(layer),
        prefix_(prefix),
        mem_(mem),
        ops_(ops),
        step_(first_step),
        gemm_(gemm),
        stream_(stream) {}

  // Starts the op prefix + name: it must be the dry run's at this step.
  void op(const std::string& name) {
    const std::string want = prefix_ + name;
    const bool in_range = step_ >= 0 && static_cast<std::size_t>(step_) < ops_.size();
    SEQBENCH_REQUIRE(in_range && ops_[static_cast<std::size_t>(step_)] == want,
                     layer_ << ": op '" << want << "' at step " << step_ << " is not the dry run's ("
                            << (in_range ? ops_[static_cast<std::size_t>(step_)] : std::string("end"))
                            << "): the run differs from the plan");
    mem_.set_step(step_);
    current_ = step_;
    ++step_;
  }
  // A planned tensor of the current shape; the MemoryManager checks the size and that the current
  // step is inside the tensor's lifetime. A pointer taken in one op and used in a later one is
  // listed among that later op's reads or writes in the dry run too.
  T* act(TensorId id, std::int64_t elements) {
    return mem_.get_as<T>(id, static_cast<std::size_t>(elements));
  }
  float* stat(TensorId id, std::int64_t rows) {
    return mem_.get_as<float>(id, static_cast<std::size_t>(rows));
  }
  void* workspace(TensorId id, std::size_t bytes) { return mem_.get(id, bytes); }
  // A tensor handed from one sub-layer to the next (a sub-layer's output, or its gradient), taken
  // between ops: the size is checked, the lifetime is not (the ops that use the pointer list the
  // tensor in the dry run, which is what the plan rests on).
  T* between(TensorId id, std::int64_t elements) {
    mem_.set_step(-1);
    T* p = mem_.get_as<T>(id, static_cast<std::size_t>(elements));
    mem_.set_step(current_);
    return p;
  }
  void gemm(const GemmProblem& problem) { gemm_.run<T>(problem, stream_); }
  cudaStream_t stream() const { return stream_; }
  int step() const { return step_; }

 private:
  const char* layer_;
  const std::string& prefix_;
  MemoryManager& mem_;
  const std::vector<std::string>& ops_;
  int step_;
  int current_ = -1;  // the op running now (-1: none yet, no lifetime check)
  Gemm& gemm_;
  cudaStream_t stream_;
};

template <class U>
const U* as(const void* p) {
  return static_cast<const U*>(p);
}
template <class U>
U* as(void* p) {
  return static_cast<U*>(p);
}

}  // namespace seqbench::layers
