// The Transformer encoder and decoder layers (Vaswani et al. 2017 §3.1) composed from the operator
// references, with the structure LightSeq2 (Wang et al. 2022, Fig. 3) and fairseq give them, so
// that the GPU layers of layers/ are compared against exactly this composition:
//
//   pre-LN (pre_layer_norm = true; LightSeq2's default, GPT-2, ViT)
//     x1 = x + dropout_h(attention(LN_attn(x)))
//     y  = x1 + dropout_h(fc2(dropout_a(act(fc1(LN_ffn(x1))))))
//   post-LN (the original Transformer, BERT)
//     x1 = LN_attn(x + dropout_h(attention(x)))
//     y  = LN_ffn(x1 + dropout_h(fc2(dropout_a(act(fc1(x1))))))
//
// The decoder layer adds a cross-attention sub-layer between the two, with its own LayerNorm:
// queries from the self-attention output, keys and values from the encoder output, masked by the
// source lengths; its self-attention is causal. attention() is mha_forward of attention.h (the
// output projection's bias included), dropout_a is the activation dropout, dropout_h the hidden
// (residual) dropout with one mask per sub-layer, and the attention-probability dropout lives
// inside attention(). Every mask is an explicit input (layer_dropout_masks() draws them).
//
// Shapes: x [B·L, H] (token rows b·L + l), encoder output [B·S, H]; fc1 [ffn, H], fc2 [H, ffn]
// (nn.Linear layout); LayerNorm parameters [H].
#pragma once

#include <cstdint>
#include <vector>

#include "core/check_result.h"
#include "reference/attention.h"
#include "reference/bias_act_dropout.h"
#include "reference/layernorm.h"
#include "reference/linear.h"
#include "reference/tensor.h"

namespace seqbench::ref {

struct LayerNormParams {
  Vector gamma, beta;  // [H]
};

struct FfnParams {
  LayerNormParams norm;
  Linear fc1;  // [ffn, H]
  Linear fc2;  // [H, ffn]
};

struct AttentionBlockParams {
  LayerNormParams norm;
  MhaParams attention;
};

struct EncoderLayerParams {
  AttentionBlockParams self_attention;
  FfnParams ffn;
};

struct DecoderLayerParams {
  AttentionBlockParams self_attention;
  AttentionBlockParams cross_attention;
  FfnParams ffn;
};

struct TransformerLayerConfig {
  Index heads = 1;
  bool pre_layer_norm = true;
  Activation activation = Activation::relu;
  double layer_norm_eps = 1e-5;
  double attn_dropout = 0.0;        // on the attention probabilities
  double activation_dropout = 0.0;  // after the FFN activation
  double hidden_dropout = 0.0;      // on each sub-layer's output, before the residual add
};

// The dropout masks of one sub-layer: probabilities [B·heads·Lq, Lk] and hidden output [B·Lq, H];
// the FFN's activation mask is [B·L, ffn].
struct AttentionBlockMasks {
  KeepMask probs, hidden;
};

struct FfnMasks {
  KeepMask activation, hidden;
};

struct EncoderLayerMasks {
  AttentionBlockMasks self_attention;
  FfnMasks ffn;
};

struct DecoderLayerMasks {
  AttentionBlockMasks self_attention, cross_attention;
  FfnMasks ffn;
};

// Which tokens are padding: per batch element, the number of valid tokens (the rest, at the end of
// the row, are padding keys). Empty: no padding. The causal flag makes the encoder layer a GPT-2
// block (decoder-only models stack encoder layers with a causal mask, as LightSeq2 builds them).
struct SequenceMask {
  std::vector<Index> lengths;  // empty or B entries, each in [0, L]
  bool causal = false;
};

// ---------------------------------------------------------------------------------------------
// Encoder layer.

struct EncoderLayerForward {
  Matrix x1;  // after the attention sub-layer
  Matrix y;   // [B·L, H]
};

// x: [B·L, H]; H % heads == 0; masks shaped as above (probabilities [B·heads·L, L]).
EncoderLayerForward encoder_layer_forward(const Matrix& x, Index batch, const EncoderLayerParams& params,
                                          const TransformerLayerConfig& config, const SequenceMask& mask,
                                          const EncoderLayerMasks& masks);

struct EncoderLayerGrads {
  Matrix dx;
  EncoderLayerParams dparams;
};

EncoderLayerGrads encoder_layer_backward(const Matrix& dy, const Matrix& x, Index batch,
                                         const EncoderLayerParams& params,
                                         const TransformerLayerConfig& config, const SequenceMask& mask,
                                         const EncoderLayerMasks& masks);

// ---------------------------------------------------------------------------------------------
// Decoder layer: causal self-attention (target lengths from target_mask.lengths; causal always),
// cross-attention over the encoder output (source lengths from source_lengths), FFN.

struct DecoderLayerForward {
  Matrix x1, x2;  // after self- and cross-attention
  Matrix y;       // [B·L, H]
};

// x: [B·L, H]; encoder_out: [B·S, H]; masks: self probabilities [B·heads·L, L], cross
// probabilities [B·heads·L, S].
DecoderLayerForward decoder_layer_forward(const Matrix& x, const Matrix& encoder_out, Index batch,
                                          const DecoderLayerParams& params,
                                          const TransformerLayerConfig& config,
                                          const std::vector<Index>& target_lengths,
                                          const std::vector<Index>& source_lengths,
                                          const DecoderLayerMasks& masks);

struct DecoderLayerGrads {
  Matrix dx;
  Matrix d_encoder_out;  // this layer's share; a stack sums it over its layers
  DecoderLayerParams dparams;
};

DecoderLayerGrads decoder_layer_backward(const Matrix& dy, const Matrix& x, const Matrix& encoder_out,
                                         Index batch, const DecoderLayerParams& params,
                                         const TransformerLayerConfig& config,
                                         const std::vector<Index>& target_lengths,
                                         const std::vector<Index>& source_lengths,
                                         const DecoderLayerMasks& masks);

// ---------------------------------------------------------------------------------------------
// Masks drawn from Philox under consecutive offsets of one seed, as a GPU layer draws them (one
// offset per dropout site, in the order the forward meets them).
EncoderLayerMasks encoder_layer_dropout_masks(Index batch, Index len, Index hidden, Index ffn,
                                              const TransformerLayerConfig& config, std::uint64_t seed);
DecoderLayerMasks decoder_layer_dropout_masks(Index batch, Index len, Index source_len, Index hidden,
                                              Index ffn, const TransformerLayerConfig& config,
                                              std::uint64_t seed);

// Throws seqbench::Error naming the field (heads, shapes, probabilities, lengths) that is off.
void validate_transformer_layer_config(const TransformerLayerConfig& config, Index hidden);

// The layers' self-checks (reference/transformer_layer_checks.cpp), the "transformer_layer" group
// of checks.h: whole-layer gradient checks, a closed-form identity and a negative test.
std::vector<CheckResult> transformer_layer_checks(std::uint64_t seed);

}  // namespace seqbench::ref
