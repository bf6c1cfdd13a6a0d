// What the Transformer layers' validation tests (CPU, no GPU) construct a layer from and read its
// dry run with: a small LayerConfig that every layer accepts (and its pre-/post-LN, dropout
// variants), parameter views of distinct non-null fake addresses that are never dereferenced
// (every check these tests reach runs before any CUDA call), and the tensor names of a dry run.
// The embedding and criterion layers' validation tests (managed and baseline) share a small config
// of each and the embedding's fake tables. The allocator fakes are in tests/layers/fake_allocators.h.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
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

// What Recompute (layers/layer_run.h) does to one attention sub-layer's dry run ("<prefix>attn.",
// "<prefix>self.", "<prefix>cross."): with attention dropout under pointwise, the forward's
// probs_dropped dies in the forward and the backward redraws it into probs_redropped (as large)
// at an op right before context_gemm_bwd_dv; otherwise probs_dropped (if any) lives into the
// backward and nothing is redrawn. Either way the dV GEMM is the last reader of the probabilities
// it uses, and the dP GEMM (the next op) first writes the probabilities' gradient, so that the
// two need not be live at once.
inline void expect_attention_recompute(const std::vector<TensorLifetime>& tensors,
                                       const std::vector<std::string>& ops, int forward_ops,
                                       const std::string& attention, bool attn_dropout, bool pointwise) {
  SCOPED_TRACE(attention);
  const bool redraws = attn_dropout && pointwise;
  const std::set<std::string> names = names_of(tensors);
  ASSERT_EQ(names.count(attention + "probs_redropped"), redraws ? 1u : 0u);
  const int recompute = step_of(ops, attention + "probs_dropout_recompute");
  const int context_bwd = step_of(ops, attention + "context_gemm_bwd_dv");
  ASSERT_GE(context_bwd, forward_ops);
  EXPECT_EQ(step_of(ops, attention + "context_gemm_bwd_dp"), context_bwd + 1);
  const TensorLifetime& d_first =
      lifetime_of(tensors, attention + (attn_dropout ? "d_probs_dropped" : "d_probs"));
  EXPECT_EQ(d_first.first_step, context_bwd + 1);
  if (!attn_dropout) {
    EXPECT_EQ(recompute, -1);
    EXPECT_GT(lifetime_of(tensors, attention + "probs").last_step, context_bwd);  // the softmax backward's
    return;
  }
  const TensorLifetime& dropped = lifetime_of(tensors, attention + "probs_dropped");
  if (redraws) {
    EXPECT_EQ(recompute, context_bwd - 1);
    EXPECT_LT(dropped.last_step, forward_ops);  // a forward temporary now
    const TensorLifetime& redropped = lifetime_of(tensors, attention + "probs_redropped");
    EXPECT_EQ(redropped.bytes, dropped.bytes);
    EXPECT_EQ(redropped.first_step, recompute);
    EXPECT_EQ(redropped.last_step, context_bwd);
  } else {
    EXPECT_EQ(recompute, -1);
    EXPECT_EQ(dropped.last_step, context_bwd);  // kept for the context GEMM's backward
  }
}

// The same for the FFN sub-layer ("<prefix>ffn."): under pointwise the forward's act_out dies in
// the forward and the backward recomputes it into act_recomputed right before ff2_gemm_bwd_dw,
// fc2's weight gradient, its last reader; d_act is first written by the next op,
// ff2_gemm_bwd_dx.
inline void expect_ffn_recompute(const std::vector<TensorLifetime>& tensors,
                                 const std::vector<std::string>& ops, int forward_ops, const std::string& ffn,
                                 bool pointwise) {
  SCOPED_TRACE(ffn);
  const std::set<std::string> names = names_of(tensors);
  ASSERT_EQ(names.count(ffn + "act_recomputed"), pointwise ? 1u : 0u);
  const int recompute = step_of(ops, ffn + "bias_act_dropout_recompute");
  const int ff2_bwd = step_of(ops, ffn + "ff2_gemm_bwd_dw");
  ASSERT_GE(ff2_bwd, forward_ops);
  EXPECT_EQ(step_of(ops, ffn + "ff2_gemm_bwd_dx"), ff2_bwd + 1);
  EXPECT_EQ(lifetime_of(tensors, ffn + "d_act").first_step, ff2_bwd + 1);
  const TensorLifetime& act_out = lifetime_of(tensors, ffn + "act_out");
  if (pointwise) {
    EXPECT_EQ(recompute, ff2_bwd - 1);
    EXPECT_LT(act_out.last_step, forward_ops);
    const TensorLifetime& again = lifetime_of(tensors, ffn + "act_recomputed");
    EXPECT_EQ(again.bytes, act_out.bytes);
    EXPECT_EQ(again.first_step, recompute);
    EXPECT_EQ(again.last_step, ff2_bwd);
  } else {
    EXPECT_EQ(recompute, -1);
    EXPECT_EQ(act_out.last_step, ff2_bwd);
  }
}

// Weights and grads of an encoder or decoder layer (EncoderLayerWeights/Grads or
// DecoderLayerWeights/Grads), every pointer a distinct byte of `storage`, in the order of
// for_each_{encoder,decoder}_tensor: the weights first, then the grads.
template <class Weights, class Grads>
struct FakeLayerParams {
  std::vector<char> storage = std::vector<char>(64);
  Weights weights;
  Grads grads;

  FakeLayerParams() {
    int i = 0;
    for_each_layer_tensor(weights, [&](const char*, const void*& p) { p = storage.data() + i++; });
    for_each_layer_tensor(grads, [&](const char*, void*& p) { p = storage.data() + i++; });
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
struct FakeTables {
  alignas(16) char storage[256] = {};
  EmbeddingLayerWeights weights{storage, storage + 64};
  EmbeddingLayerGrads grads{storage + 128, storage + 192};
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
