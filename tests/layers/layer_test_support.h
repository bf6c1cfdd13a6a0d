// What the Transformer layers' validation tests (CPU, no GPU) construct a layer from and read its
// dry run with: a small LayerConfig that every layer accepts (and its pre-/post-LN, dropout
// variants), parameter views of distinct non-null fake addresses that are never dereferenced
// (every check these tests reach runs before any CUDA call), and the tensor names of a dry run.
// The embedding and criterion layers' validation tests (managed and baseline) share a small config
// of each and the embedding's fake tables. The allocator fakes are in tests/layers/fake_allocators.h.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/embedding.h"
#include "layers/caching_allocator.h"
#include "layers/config.h"
#include "layers/criterion_layer.h"
#include "layers/decoder_layer.h"
#include "layers/device_allocator.h"
#include "layers/embedding_layer.h"
#include "layers/encoder_layer.h"
#include "layers/layer_run.h"
#include "layers/memory_planner.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_params.h"

namespace seqbench::layers::layer_test {

// B·L <= 64 tokens, L <= 16, H = 12 in 3 heads, ffn 37 (odd), every dropout 0.1, fp16.
inline LayerConfig small_config() {
  LayerConfig c;
  c.max_batch_tokens = 64;
  c.max_seq_len = 16;
  c.hidden = 12;
  c.ffn = 37;
  c.heads = 3;
  c.attn_dropout = 0.1;
  c.activation_dropout = 0.1;
  c.hidden_dropout = 0.1;
  c.dtype = DType::f16;
  return c;
}

// The dry-run tests' variants: small_config() pre- or post-LN, with the probabilities' dropout
// attn_dropout; variant_name says which in the test's trace.
inline LayerConfig small_config(bool pre, double attn_dropout) {
  LayerConfig c = small_config();
  c.pre_layer_norm = pre;
  c.attn_dropout = attn_dropout;
  return c;
}
inline std::string variant_name(bool pre, double attn_dropout) {
  return std::string(pre ? "pre-LN" : "post-LN") + (attn_dropout > 0 ? ", attn dropout" : "");
}

// The names of a dry run's tensors.
inline std::set<std::string> names_of(const std::vector<TensorLifetime>& tensors) {
  std::set<std::string> names;
  for (const TensorLifetime& t : tensors) names.insert(t.name);
  return names;
}

// One dry-run tensor by name (a test failure, and a throw, when it is missing).
inline const TensorLifetime& lifetime_of(const std::vector<TensorLifetime>& tensors,
                                         const std::string& name) {
  for (const TensorLifetime& t : tensors)
    if (t.name == name) return t;
  ADD_FAILURE() << "no tensor " << name << " in the dry run";
  throw std::runtime_error("no tensor " + name);
}

// The step of op `name` in a dry run, or -1.
inline int step_of(const std::vector<std::string>& ops, const std::string& name) {
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i] == name) return static_cast<int>(i);
  return -1;
}

// The names of the tensors named `prefix`... that are live at `step` and as large as `like`.
inline std::set<std::string> live_like(const std::vector<TensorLifetime>& tensors, int step,
                                       const std::string& prefix, const std::string& like) {
  const std::size_t bytes = lifetime_of(tensors, like).bytes;
  std::set<std::string> live;
  for (const TensorLifetime& t : tensors)
    if (t.name.rfind(prefix, 0) == 0 && t.bytes == bytes && t.first_step <= step && step <= t.last_step)
      live.insert(t.name);
  return live;
}

// One layer's dry run: its tensors, its ops and how many of them are the forward's.
struct DryRun {
  std::vector<TensorLifetime> tensors;
  std::vector<std::string> ops;
  int forward_ops = 0;
};

// The dry run of encoder_layer_lifetimes or decoder_layer_lifetimes under `prefix` ("enc3.") and
// `recompute`, with a GEMM workspace of `gemm_workspace_bytes` planned (and options.retain_forward).
template <class Options>
DryRun dry_run(std::vector<TensorLifetime> (*lifetimes)(const LayerConfig&, const Options&,
                                                        std::vector<std::string>*, int*),
               const LayerConfig& config, const std::string& prefix, Recompute recompute,
               std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes, bool retain_forward = false) {
  Options options;
  options.prefix = prefix;
  options.gemm_workspace_bytes = gemm_workspace_bytes;
  options.recompute = recompute;
  options.retain_forward = retain_forward;
  DryRun r;
  r.tensors = lifetimes(config, options, &r.ops, &r.forward_ops);
  return r;
}

// A dry run with retain_forward against the same dry run without: the same ops and tensors; every
// tensor the forward writes (first use before `forward_ops`) and the backward uses (last use at
// or after it) lives to the last step, except a GEMM workspace (written by every GEMM, read by
// none: it carries nothing from op to op); every other lifetime is unchanged, at least one tensor
// is kept (else the check is empty), and the plan is sound. The retained block is never smaller.
inline void expect_forward_retained(const std::vector<TensorLifetime>& consumed,
                                    const std::vector<TensorLifetime>& retained, int forward_ops, int steps) {
  ASSERT_EQ(consumed.size(), retained.size());
  int kept = 0;
  for (std::size_t i = 0; i < consumed.size(); ++i) {
    const TensorLifetime &c = consumed[i], &r = retained[i];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(r.name, c.name);
    EXPECT_EQ(r.bytes, c.bytes);
    EXPECT_EQ(r.first_step, c.first_step);
    const bool workspace =
        c.name.size() >= 14 && c.name.compare(c.name.size() - 14, 14, "gemm_workspace") == 0;
    if (!c.external && !workspace && c.first_step < forward_ops && c.last_step >= forward_ops) {
      EXPECT_EQ(r.last_step, steps - 1);
      ++kept;
    } else {
      EXPECT_EQ(r.last_step, c.last_step);
    }
  }
  EXPECT_GT(kept, 0);
  const MemoryPlan plan = plan_memory(retained);
  EXPECT_TRUE(find_plan_violations(retained, plan).empty());
  EXPECT_GE(plan.block_bytes, plan_memory(consumed).block_bytes);
}

// A Layer constructed with options.retain_forward plans a larger block than the default one, each
// in one allocation (host fakes: no GPU). FakeParams has `weights` and `grads` views.
template <class Layer, class Options, class FakeParams>
void expect_retained_block_larger(const LayerConfig& config) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  Options options;
  options.retain_forward = true;
  Layer retained(config, params.weights, params.grads, counter, options);
  Layer consumed(config, params.weights, params.grads, counter);
  EXPECT_GT(retained.block_bytes(), consumed.block_bytes());
  EXPECT_EQ(counter.stats().allocations, 2u);
}

// The dry-run tests' variants with Recompute (layers/layer_run.h): small_config(pre, attn_dropout)
// for pre- and post-LN, attention dropout 0 and 0.1, under Recompute none and pointwise;
// fn(config, recompute) runs under a trace that names the variant.
template <class Fn>
void for_each_dry_run_variant(Fn&& fn) {
  for (const bool pre : {true, false})
    for (const double attn_dropout : {0.0, 0.1})
      for (const Recompute recompute : {Recompute::none, Recompute::pointwise}) {
        SCOPED_TRACE(variant_name(pre, attn_dropout) + " recompute=" + recompute_name(recompute));
        fn(small_config(pre, attn_dropout), recompute);
      }
}

// What Recompute does to one recomputable tensor of a sub-layer ("<prefix><sub-layer>."): when
// `recomputed`, the forward's `kept` dies in the forward and the backward recomputes it into
// `again` (as large) at op `recompute_op`, right before `reader`, its last reader; otherwise
// `kept` lives up to `reader` and nothing is recomputed.
inline void expect_recomputed(const std::vector<TensorLifetime>& tensors, const std::vector<std::string>& ops,
                              int forward_ops, const std::string& sub, const char* kept, const char* again,
                              const char* recompute_op, const char* reader, bool recomputed) {
  SCOPED_TRACE(sub + kept);
  ASSERT_EQ(names_of(tensors).count(sub + again), recomputed ? 1u : 0u);
  const int recompute = step_of(ops, sub + recompute_op);
  const int read = step_of(ops, sub + reader);
  ASSERT_GE(read, forward_ops);
  const TensorLifetime& k = lifetime_of(tensors, sub + kept);
  if (recomputed) {
    EXPECT_EQ(recompute, read - 1);
    EXPECT_LT(k.last_step, forward_ops);  // a forward temporary now
    const TensorLifetime& a = lifetime_of(tensors, sub + again);
    EXPECT_EQ(a.bytes, k.bytes);
    EXPECT_EQ(a.first_step, recompute);
    EXPECT_EQ(a.last_step, read);
  } else {
    EXPECT_EQ(recompute, -1);
    EXPECT_EQ(k.last_step, read);  // kept for the backward's reader
  }
}

// The attention sub-layer ("<prefix>attn.", "<prefix>self.", "<prefix>cross."): with attention
// dropout under pointwise, probs_dropped is redrawn into probs_redropped right before
// context_gemm_bwd_dv; without attention dropout nothing is. Either way the dV GEMM is the last
// reader of the probabilities it uses, and the dP GEMM (the next op) first writes their gradient,
// so that the two need not be live at once. The dropout and softmax backwards then run in place
// in d_probs (there is no d_probs_dropped), so that from the dP GEMM on the sub-layer holds two
// score-sized tensors, probs and d_probs, and no third.
inline void expect_attention_recompute(const std::vector<TensorLifetime>& tensors,
                                       const std::vector<std::string>& ops, int forward_ops,
                                       const std::string& attention, bool attn_dropout, bool pointwise) {
  SCOPED_TRACE(attention);
  const int dv = step_of(ops, attention + "context_gemm_bwd_dv");
  ASSERT_GE(dv, forward_ops);
  EXPECT_EQ(step_of(ops, attention + "context_gemm_bwd_dp"), dv + 1);
  EXPECT_EQ(lifetime_of(tensors, attention + "d_probs").first_step, dv + 1);
  EXPECT_EQ(names_of(tensors).count(attention + "d_probs_dropped"), 0u);
  const int softmax_bwd = step_of(ops, attention + "softmax_bwd");
  EXPECT_EQ(step_of(ops, attention + "probs_dropout_bwd"), attn_dropout ? dv + 2 : -1);
  EXPECT_EQ(softmax_bwd, attn_dropout ? dv + 3 : dv + 2);
  const std::set<std::string> two = {attention + "probs", attention + "d_probs"};
  for (int step = dv + 1; step <= softmax_bwd; ++step)
    EXPECT_EQ(live_like(tensors, step, attention, attention + "probs"), two) << "at " << ops[step];
  if (attn_dropout) {
    expect_recomputed(tensors, ops, forward_ops, attention, "probs_dropped", "probs_redropped",
                      "probs_dropout_recompute", "context_gemm_bwd_dv", pointwise);
  } else {
    EXPECT_EQ(names_of(tensors).count(attention + "probs_redropped"), 0u);
    EXPECT_EQ(step_of(ops, attention + "probs_dropout_recompute"), -1);
    EXPECT_GT(lifetime_of(tensors, attention + "probs").last_step, dv);  // the softmax backward's
  }
}

// The FFN sub-layer ("<prefix>ffn."): under pointwise act_out is recomputed into act_recomputed
// right before ff2_gemm_bwd_dw (fc2's weight gradient, its last reader); d_act is first written
// by the next op, ff2_gemm_bwd_dx, and bias_act_dropout_bwd turns it into fc1's output gradient in
// place (there is no d_ff1), which fc1's backward GEMM reads last: from fc2's dX GEMM on, the
// sub-layer holds two [T, ffn] tensors, ff1_raw and d_act, and no third.
inline void expect_ffn_recompute(const std::vector<TensorLifetime>& tensors,
                                 const std::vector<std::string>& ops, int forward_ops, const std::string& ffn,
                                 bool pointwise) {
  const int dw = step_of(ops, ffn + "ff2_gemm_bwd_dw");
  EXPECT_EQ(step_of(ops, ffn + "ff2_gemm_bwd_dx"), dw + 1);
  EXPECT_EQ(step_of(ops, ffn + "bias_act_dropout_bwd"), dw + 2);
  EXPECT_EQ(step_of(ops, ffn + "ff1_gemm_bwd"), dw + 3);
  const TensorLifetime& d_act = lifetime_of(tensors, ffn + "d_act");
  EXPECT_EQ(d_act.first_step, dw + 1);
  EXPECT_EQ(d_act.last_step, dw + 3);
  EXPECT_EQ(names_of(tensors).count(ffn + "d_ff1"), 0u);
  EXPECT_EQ(live_like(tensors, dw + 1, ffn, ffn + "ff1_raw"),
            (std::set<std::string>{ffn + "ff1_raw", ffn + "d_act"}));
  EXPECT_EQ(live_like(tensors, dw + 2, ffn, ffn + "ff1_raw"),
            (std::set<std::string>{ffn + "ff1_raw", ffn + "d_act"}));
  expect_recomputed(tensors, ops, forward_ops, ffn, "act_out", "act_recomputed", "bias_act_dropout_recompute",
                    "ff2_gemm_bwd_dw", pointwise);
}

// Weights and grads of an encoder or decoder layer (EncoderLayerWeights/Grads or
// DecoderLayerWeights/Grads), in the order of for_each_{encoder,decoder}_tensor: the weights
// first, then the grads. The pointers are fake addresses, never dereferenced (the validation
// tests stop before any CUDA call): each tensor 256 MiB apart and each instance in a region of
// its own, so that no two views overlap (layers refuse overlapping gradients) whatever the
// config, and the host buffers a test passes as x or y cannot overlap them either.
template <class Weights, class Grads>
struct FakeLayerParams {
  Weights weights;
  Grads grads;

  FakeLayerParams() {
    static std::atomic<std::uintptr_t> next_region{0};
    constexpr std::uintptr_t kSpacing = std::uintptr_t{1} << 28, kRegion = kSpacing * 64;
    const std::uintptr_t base = (std::uintptr_t{1} << 44) + kRegion * next_region++;
    std::uintptr_t i = 0;
    for_each_layer_tensor(weights, [&](const char*, const void*& p) {
      p = reinterpret_cast<const void*>(base + kSpacing * i++);
    });
    for_each_layer_tensor(grads,
                          [&](const char*, void*& p) { p = reinterpret_cast<void*>(base + kSpacing * i++); });
  }
};

using FakeEncoderParams = FakeLayerParams<EncoderLayerWeights, EncoderLayerGrads>;
using FakeDecoderParams = FakeLayerParams<DecoderLayerWeights, DecoderLayerGrads>;

// The embedding layers' validation config: vocab 50, H = 12, B·L <= 64, L <= 16, padding_idx 1,
// dropout 0.1, position_offset 2, fp16; learned positions unless told.
inline EmbeddingLayerConfig small_embedding(
    kernels::PositionEncoding positions = kernels::PositionEncoding::learned) {
  EmbeddingLayerConfig c;
  c.vocab_size = 50;
  c.embedding_dim = 12;
  c.max_batch_tokens = 64;
  c.max_seq_len = 16;
  c.padding_idx = 1;
  c.dropout = 0.1;
  c.positions = positions;
  c.position_offset = 2;
  c.dtype = DType::f16;
  return c;
}

// An embedding layer's tables: distinct non-null, 16-byte aligned addresses that are never
// dereferenced.
// Four disjoint 2 KiB tables (small_embedding()'s token table is 50·12 f16 = 1200 bytes, its
// position table 18·12 f16 = 432): the layers refuse gradient tables that share bytes.
struct FakeTables {
  alignas(16) char storage[8192] = {};
  EmbeddingLayerWeights weights{storage, storage + 2048};
  EmbeddingLayerGrads grads{storage + 4096, storage + 6144};
};

// The criterion layers' validation config: B·L <= 64, padding_idx 1, ε = 0.1, bf16.
inline CriterionLayerConfig small_criterion() {
  CriterionLayerConfig c;
  c.max_batch_tokens = 64;
  c.padding_idx = 1;
  c.epsilon = 0.1;
  c.dtype = DType::bf16;
  return c;
}

// The baseline encoder's and decoder's construction test (Layer: BaselineEncoderLayer or
// BaselineDecoderLayer, Options its options, Params its FakeLayerParams): through a caching
// allocator, the layer allocates exactly its GEMM workspace and saves nothing; destroyed, the
// layer and the cache give everything back.
template <class Layer, class Options, class Params>
void expect_only_gemm_workspace_at_construction() {
  HostBackend host;
  CountingAllocator counter(host);
  Params f;
  {
    CachingAllocator cache(counter);
    Options o;
    o.gemm_workspace_bytes = 4096;
    Layer layer(small_config(), f.weights, f.grads, cache, o);
    EXPECT_EQ(counter.stats().allocations, 1u);
    EXPECT_EQ(counter.stats().live_bytes, 4096u);
    EXPECT_EQ(cache.stats().allocated_bytes, 4096u);
    EXPECT_EQ(layer.saved_bytes(), 0u);
  }
  EXPECT_EQ(counter.stats().live_bytes, 0u);  // the layer and the cache gave everything back
}

}  // namespace seqbench::layers::layer_test
