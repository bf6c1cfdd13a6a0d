// The layers' dry runs: LightSeq2's Fig. 8 formulas against the planner for the attention
// backward, and sound, bounded plans for whole encoder and decoder layers and every preset's
// stack, with the lifetimes the paper's design relies on.
#include "layers/layer_temporaries.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/config.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {
namespace {

const TensorLifetime& find(const std::vector<TensorLifetime>& t, const std::string& name) {
  for (const TensorLifetime& x : t)
    if (x.name == name) return x;
  throw std::runtime_error("no tensor named " + name);
}

bool has(const std::vector<TensorLifetime>& t, const std::string& name) {
  return std::any_of(t.begin(), t.end(), [&](const TensorLifetime& x) { return x.name == name; });
}

LayerConfig config(int hidden, int heads, int ffn, DType dtype = DType::f16, bool pre_ln = true) {
  LayerConfig c;
  c.max_batch_tokens = 1 << 16;
  c.max_seq_len = 4096;
  c.hidden = hidden;
  c.ffn = ffn;
  c.heads = heads;
  c.attn_dropout = 0.1;
  c.activation_dropout = 0.1;
  c.hidden_dropout = 0.1;
  c.pre_layer_norm = pre_ln;
  c.dtype = dtype;
  return c;
}

// Plans, verifies and bounds one lifetime set; returns the plan.
MemoryPlan plan_and_verify(const std::vector<TensorLifetime>& t, const std::string& what) {
  const MemoryPlan p = plan_memory(t);
  const std::vector<std::string> problems = find_plan_violations(t, p);
  EXPECT_TRUE(problems.empty()) << what << ": " << (problems.empty() ? "" : problems.front());
  EXPECT_GE(p.block_bytes, max_live_bytes(t, true)) << what;
  EXPECT_LE(p.block_bytes, naive_bytes(t)) << what;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Fig. 8.

TEST(AttentionBackward, PaperFormulaInClosedForm) {
  // Transformer-big at 8 x 1024 in fp16: BLH = 8·1024·1024 elements (16 MiB), BL²N = 8·1024²·16
  // elements (256 MiB). Naive 9·16 + 256 = 400 MiB; managed 3·16 + max(48, 256) = 304 MiB.
  const LayerConfig c = preset("transformer-big").layer;
  const AttentionBackwardFormula f = attention_backward_formula(c, {8, 1024});
  EXPECT_EQ(f.naive_bytes, 400u << 20);
  EXPECT_EQ(f.managed_bytes, 304u << 20);
  // Short sentences: BL²N < 3BLH, so the managed size is 6BLH. 64 x 128 tokens, N·L = 2048 < 3H.
  const AttentionBackwardFormula g = attention_backward_formula(c, {64, 128});
  const std::size_t blh = std::size_t{64} * 128 * 1024 * 2;
  const std::size_t bl2n = std::size_t{64} * 128 * 128 * 16 * 2;
  EXPECT_EQ(g.naive_bytes, 9 * blh + bl2n);
  EXPECT_EQ(g.managed_bytes, 6 * blh);
  // 256-aligned sizes leave these unchanged.
  EXPECT_EQ(attention_backward_formula(c, {64, 128}, 256).managed_bytes, g.managed_bytes);
}

TEST(AttentionBackward, TheDryRunHasThePapersTensors) {
  const LayerConfig c = config(512, 8, 2048);
  const std::vector<TensorLifetime> t = attention_backward_temporaries(c, {2, 16});
  std::size_t planned = 0;
  for (const TensorLifetime& x : t) planned += x.external ? 0 : 1;
  EXPECT_EQ(planned, 8u);  // d_ctx, d_ctx_heads, d_v, d_probs, d_q, d_k, d_qkv, d_qkv_in
  const std::size_t blh = 2 * 16 * 512 * 2;
  EXPECT_EQ(find(t, "attn.d_probs").bytes, std::size_t{2} * 16 * 16 * 8 * 2);
  EXPECT_EQ(find(t, "attn.d_qkv").bytes, 3 * blh);
  for (const char* name :
       {"attn.d_ctx", "attn.d_ctx_heads", "attn.d_v", "attn.d_q", "attn.d_k", "attn.d_qkv_in"})
    EXPECT_EQ(find(t, name).bytes, blh) << name;
  // d_v is born with d_probs (the context backward) and dies with d_q and d_k (the transform).
  EXPECT_EQ(find(t, "attn.d_v").first_step, find(t, "attn.d_probs").first_step);
  EXPECT_EQ(find(t, "attn.d_v").last_step, find(t, "attn.d_q").last_step);
  EXPECT_LT(find(t, "attn.d_probs").last_step, find(t, "attn.d_qkv").first_step);
}

// The planner must reach the paper's managed size exactly, whichever of 3BLH and BL²N is larger,
// at every ratio N·L/H (below 1, between 1 and 2, 2 and 3, above 3), odd sizes and all dtypes.
TEST(AttentionBackward, PlannerEqualsTheFormulaAtEveryRatio) {
  struct Dims {
    int hidden, heads;
  };
  const Dims dims[] = {{64, 1},   {64, 4},    {256, 4},   {512, 8}, {768, 12},
                       {1000, 8}, {1024, 16}, {1280, 20}, {24, 3}};
  const std::size_t lengths[] = {1, 3, 7, 50, 64, 100, 127, 160, 200, 255, 384, 1023};
  const std::size_t batches[] = {1, 2, 3, 8};
  int cases = 0;
  int regimes[4] = {0, 0, 0, 0};
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Dims& d : dims) {
      for (const std::size_t len : lengths) {
        for (const std::size_t batch : batches) {
          const LayerConfig c = config(d.hidden, d.heads, 4 * d.hidden, dtype);
          if (batch * len > static_cast<std::size_t>(c.max_batch_tokens)) continue;
          const BatchShape shape{batch, len};
          const std::vector<TensorLifetime> t = attention_backward_temporaries(c, shape);
          const std::string what = "H=" + std::to_string(d.hidden) + " N=" + std::to_string(d.heads) +
                                   " B=" + std::to_string(batch) + " L=" + std::to_string(len) + " " +
                                   std::string(dtype_name(dtype));
          const MemoryPlan p = plan_and_verify(t, what);
          const AttentionBackwardFormula f = attention_backward_formula(c, shape, kBlockAlignment);
          ASSERT_EQ(p.block_bytes, f.managed_bytes) << what;
          ASSERT_EQ(naive_bytes(t), f.naive_bytes) << what;
          ASSERT_EQ(max_live_bytes(t, true), f.managed_bytes) << what;
          const double ratio = static_cast<double>(d.heads) * static_cast<double>(len) / d.hidden;
          ++regimes[ratio < 1 ? 0 : ratio < 2 ? 1 : ratio < 3 ? 2 : 3];
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
  for (int r : regimes) EXPECT_GT(r, 20);  // every regime was exercised
}

TEST(AttentionBackward, AlignedFormulaIsThePapersWhenSizesAreMultiplesOf256Bytes) {
  for (const char* name : {"transformer-base", "transformer-big", "bert-base", "gpt2-large"}) {
    const LayerConfig c = preset(name).layer;
    for (const std::size_t len : {128, 512}) {
      const BatchShape s{8192 / len, len};
      const AttentionBackwardFormula exact = attention_backward_formula(c, s, 1);
      const AttentionBackwardFormula aligned = attention_backward_formula(c, s, kBlockAlignment);
      EXPECT_EQ(exact.naive_bytes, aligned.naive_bytes) << name;
      EXPECT_EQ(exact.managed_bytes, aligned.managed_bytes) << name;
    }
  }
  // And they differ when a size is not: ViT's 50 positions give BL²N·2 = 163·50²·12·2 bytes.
  const LayerConfig vit = preset("vit-b-32").layer;
  EXPECT_NE(attention_backward_formula(vit, {163, 50}, 1).naive_bytes,
            attention_backward_formula(vit, {163, 50}, kBlockAlignment).naive_bytes);
}

TEST(AttentionBackward, RefusesShapesBeyondTheConfig) {
  const LayerConfig c = preset("bert-base").layer;  // 512 positions, 8192 tokens
  EXPECT_THROW(attention_backward_temporaries(c, {1, 513}), Error);
  EXPECT_THROW(attention_backward_formula(c, {17, 512}), Error);
  LayerConfig bad = c;
  bad.heads = 7;
  EXPECT_THROW(attention_backward_temporaries(bad, {1, 8}), Error);
}

// ---------------------------------------------------------------------------------------------
// Whole layers.

TEST(EncoderLayer, PlansAreSoundInBothLayerNormPlacementsAndAllDtypes) {
  for (const bool pre_ln : {true, false}) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const BatchShape s :
           {BatchShape{1, 1}, BatchShape{3, 7}, BatchShape{8, 128}, BatchShape{2, 1000}}) {
        const LayerConfig c = config(768, 12, 3072, dtype, pre_ln);
        const std::vector<TensorLifetime> t = encoder_layer_temporaries(c, s);
        const MemoryPlan p = plan_and_verify(t, "encoder");
        EXPECT_LT(p.block_bytes, naive_bytes(t));  // some reuse always happens
      }
    }
  }
}

TEST(EncoderLayer, SavedActivationsLiveFromForwardToBackward) {
  const LayerConfig c = config(512, 8, 2048);
  const std::vector<TensorLifetime> t = encoder_layer_temporaries(c, {4, 32});
  const TensorLifetime& probs = find(t, "enc0.attn.probs");
  const TensorLifetime& d_probs = find(t, "enc0.attn.d_probs");
  const TensorLifetime& act_out = find(t, "enc0.ffn.act_out");
  const TensorLifetime& d_act = find(t, "enc0.ffn.d_act");
  // The softmax output is read by the softmax backward, which works on d_probs.
  EXPECT_EQ(probs.last_step, d_probs.first_step + 1);
  // The FFN's activation output is read by the second GEMM's dW, which produces d_act.
  EXPECT_EQ(act_out.last_step, d_act.first_step);
  // The FFN backward runs before the attention backward.
  EXPECT_LT(find(t, "enc0.ffn.d_ff1_in").last_step, find(t, "enc0.attn.d_out_raw").first_step);
  // Forward-only temporaries die in the forward.
  EXPECT_LT(find(t, "enc0.attn.qkv_raw").last_step, find(t, "enc0.ffn.d_ff2_raw").first_step);
  EXPECT_EQ(probs.bytes, std::size_t{4} * 8 * 32 * 32 * 2);
  EXPECT_EQ(act_out.bytes, std::size_t{4} * 32 * 2048 * 2);
  EXPECT_EQ(find(t, "enc0.attn.ln_stats").bytes, std::size_t{4} * 32 * 8);
}

TEST(EncoderLayer, NoDropoutMeansNoDroppedCopyOfTheProbabilities) {
  LayerConfig c = config(512, 8, 2048);
  EXPECT_TRUE(has(encoder_layer_temporaries(c, {2, 16}), "enc0.attn.probs_dropped"));
  c.attn_dropout = 0.0;
  const std::vector<TensorLifetime> t = encoder_layer_temporaries(c, {2, 16});
  EXPECT_FALSE(has(t, "enc0.attn.probs_dropped"));
  plan_and_verify(t, "no attention dropout");
}

TEST(EncoderLayer, StoredMasksCostOneBytePerElement) {
  const LayerConfig c = config(512, 8, 2048);
  const BatchShape s{4, 32};
  const std::vector<TensorLifetime> without = encoder_layer_temporaries(c, s);
  const std::vector<TensorLifetime> with = encoder_layer_temporaries(c, s, TemporaryOptions{true});
  const std::size_t T = 4 * 32;
  const std::size_t masks =
      align_up(std::size_t{4} * 8 * 32 * 32, 256) + 2 * align_up(T * 512, 256) + align_up(T * 2048, 256);
  EXPECT_EQ(naive_bytes(with) - naive_bytes(without), masks);
  EXPECT_EQ(find(with, "enc0.ffn.act_mask").bytes, T * 2048);
  EXPECT_FALSE(has(without, "enc0.ffn.act_mask"));
  plan_and_verify(with, "stored masks");
  // A ratio of 0 stores no mask even when asked to.
  LayerConfig no_act = c;
  no_act.activation_dropout = 0.0;
  EXPECT_FALSE(has(encoder_layer_temporaries(no_act, s, TemporaryOptions{true}), "enc0.ffn.act_mask"));
}

TEST(DecoderLayer, PlansAreSoundWithAnyEncoderLength) {
  for (const bool pre_ln : {true, false}) {
    const LayerConfig c = config(512, 8, 2048, DType::f16, pre_ln);
    for (const std::size_t src_len : {1, 5, 37, 300}) {
      const BatchShape s{3, 17};
      const std::vector<TensorLifetime> t = decoder_layer_temporaries(c, s, src_len);
      plan_and_verify(t, "decoder src_len=" + std::to_string(src_len));
      EXPECT_EQ(find(t, "dec0.cross.probs").bytes, std::size_t{3} * 8 * 17 * src_len * 2);
      EXPECT_EQ(find(t, "dec0.self.probs").bytes, std::size_t{3} * 8 * 17 * 17 * 2);
      EXPECT_EQ(find(t, "dec0.kv_heads").bytes, std::size_t{3} * src_len * 2 * 512 * 2);
      EXPECT_EQ(find(t, "dec0.cross.d_k").bytes, std::size_t{3} * src_len * 512 * 2);
      EXPECT_EQ(find(t, "dec0.cross.q_heads").bytes, std::size_t{3} * 17 * 512 * 2);
    }
  }
  EXPECT_THROW(decoder_layer_temporaries(config(512, 8, 2048), {2, 8}, 5000),
               Error);  // src beyond max_seq_len
}

// ---------------------------------------------------------------------------------------------
// Whole stacks.

TEST(ModelStack, EveryPresetPlansSoundly) {
  for (const std::string& name : preset_names()) {
    const ModelPreset& m = preset(name);
    const std::size_t len = std::min<std::size_t>(64, static_cast<std::size_t>(m.layer.max_seq_len));
    const std::vector<TensorLifetime> t = model_temporaries(m, {4, len});
    const MemoryPlan p = plan_and_verify(t, name);
    EXPECT_LT(p.block_bytes, naive_bytes(t)) << name;
    EXPECT_EQ(has(t, "dec.kv_heads_all"), m.decoder_layers > 0) << name;
    EXPECT_TRUE(has(t, "enc" + std::to_string(m.encoder_layers - 1) + ".attn.d_probs")) << name;
  }
}

TEST(ModelStack, LayerBatchedCrossAttentionKV) {
  const ModelPreset& m = preset("transformer-base");  // 6 + 6 layers
  const BatchShape s{4, 32};
  const std::vector<TensorLifetime> t = model_temporaries(m, s);
  const std::size_t kv_all = 4 * 32 * 2 * 512 * 6 * 2;  // Ts · 2H · layers, fp16
  EXPECT_EQ(find(t, "dec.kv_raw_all").bytes, kv_all);
  EXPECT_EQ(find(t, "dec.kv_heads_all").bytes, kv_all);
  EXPECT_EQ(find(t, "dec.d_kv_raw_all").bytes, kv_all);
  EXPECT_FALSE(has(t, "dec0.kv_heads"));  // no per-layer K/V GEMM in a stack
  // One K/V GEMM before decoder layer 0's forward; K/V live until decoder layer 0's backward.
  EXPECT_LT(find(t, "dec.kv_heads_all").first_step, find(t, "dec0.self.qkv_raw").first_step);
  EXPECT_EQ(find(t, "dec.kv_heads_all").last_step, find(t, "dec0.cross.d_k").first_step);
  // Their gradient is first written by the top decoder layer's backward...
  EXPECT_EQ(find(t, "dec.d_kv_raw_all").first_step, find(t, "dec5.cross.d_k").first_step + 1);
  // ...and the encoder output's gradient is formed once, after decoder layer 0's backward.
  const TensorLifetime& d_enc = find(t, "d_encoder_out");
  for (const TensorLifetime& x : t) {
    if (x.name.rfind("dec0.", 0) == 0) {
      EXPECT_LT(x.last_step, d_enc.first_step) << x.name;
    }
  }
  EXPECT_EQ(find(t, "dec.d_kv_raw_all").last_step, d_enc.first_step);
  // The encoder's backward starts only then.
  EXPECT_GT(find(t, "enc5.ffn.d_ff2_raw").first_step, d_enc.first_step);
  // Activations saved by encoder layer 0 live through the whole decoder.
  EXPECT_GT(find(t, "enc0.attn.probs").last_step, find(t, "dec0.ffn.d_act").first_step);
}

TEST(ModelStack, EncoderOnlyStacksLeaveTheirOutputToTheCaller) {
  const std::vector<TensorLifetime> t = model_temporaries(preset("bert-base"), {2, 16});
  EXPECT_TRUE(find(t, "encoder_out").external);
  EXPECT_TRUE(find(t, "d_encoder_out").external);
  EXPECT_FALSE(has(t, "dec.kv_raw_all"));
  // Hidden states between layers are planned; their gradients too.
  EXPECT_FALSE(find(t, "enc5.input").external);
  EXPECT_EQ(find(t, "enc5.d_input").bytes, std::size_t{2} * 16 * 768 * 2);
}

TEST(ModelStack, ReuseGrowsWithDepth) {
  // Temporaries are shared across layers: the block grows by less per layer than the allocations.
  ModelPreset shallow = preset("gpt2-small");
  shallow.encoder_layers = 2;
  ModelPreset deep = shallow;
  deep.encoder_layers = 8;
  const BatchShape s{4, 64};
  const std::vector<TensorLifetime> a = model_temporaries(shallow, s);
  const std::vector<TensorLifetime> b = model_temporaries(deep, s);
  const double block_growth = static_cast<double>(plan_memory(b).block_bytes - plan_memory(a).block_bytes);
  const double naive_growth = static_cast<double>(naive_bytes(b) - naive_bytes(a));
  EXPECT_LT(block_growth, naive_growth);
  ModelPreset none = shallow;
  none.encoder_layers = 0;
  EXPECT_THROW(model_temporaries(none, s), Error);
}

}  // namespace
}  // namespace seqbench::layers
