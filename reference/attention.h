// Scaled dot-product attention (Vaswani et al. 2017 §3.2.1) and multi-head attention (§3.2.2) in
// math form, built on the attention softmax of softmax.h:
//
//   S = Q Kᵀ                    per (batch, head), [Lq, Lk]
//   P = softmax(scale · S + M)  M ∈ {0, -inf} from the AttentionMask; fully-masked rows P = 0
//   O = dropout(P) V            dropout on the probabilities, as LightSeq2 fuses it into softmax
//
// Tensors follow reference/tensor.h: q is [B, heads, Lq, d] as a (B·heads·Lq) x d matrix, k and v
// are [B, heads, Lk, d] and [B, heads, Lk, dv], probabilities [B, heads, Lq, Lk].
#pragma once

#include <optional>

#include "reference/linear.h"
#include "reference/softmax.h"
#include "reference/tensor.h"

namespace seqbench::ref {

struct AttentionConfig {
  double scale = 1.0;  // 1/sqrt(d) in the Transformer
  AttentionMask mask;
  double dropout_p = 0.0;  // on P; needs a keep mask [B·heads·Lq, Lk] when > 0
};

struct AttentionForward {
  Matrix probs;  // P before dropout, [B·heads·Lq, Lk]
  Matrix out;    // O, [B·heads·Lq, dv]
};

// prob_keep: the dropout mask on P, or nullptr for no dropout (then dropout_p must be 0).
AttentionForward attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                                   const AttentionShape& shape, const AttentionConfig& config,
                                   const KeepMask* prob_keep = nullptr);

struct AttentionGrads {
  Matrix dq;  // dS K
  Matrix dk;  // dSᵀ Q
  Matrix dv;  // dropout(P)ᵀ dO
};

// Per (batch, head), with dP = dropout_backward(dO Vᵀ) and dS = attention_softmax_backward(dP, P,
// scale) (which already carries the scale). `probs` is the forward's.
AttentionGrads attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                                  const AttentionShape& shape, const AttentionConfig& config,
                                  const Matrix& probs, const KeepMask* prob_keep = nullptr);

// [B·L, heads·d] (token rows, head h in columns h·d .. h·d+d-1) -> [B·heads·L, d], and back. This is
// the reshape/transpose between projections and attention in every Transformer implementation.
Matrix split_heads(const Matrix& x, Index batch, Index len, Index heads);
Matrix merge_heads(const Matrix& x, Index batch, Index len, Index heads);

// Multi-head attention with input and output projections (PyTorch nn.MultiheadAttention / fairseq
// MultiheadAttention math, separate q/k/v projections):
//   Q = split(query · Wqᵀ + bq), K = split(key_value · Wkᵀ + bk), V = split(key_value · Wvᵀ + bv)
//   out = merge(attention(Q, K, V)) · Woᵀ + bo
// Self-attention passes the same matrix as query and key_value and adds the two input gradients.
struct MhaParams {
  Linear q_proj, k_proj, v_proj, out_proj;  // each [hidden, hidden]
};

struct MhaShape {
  Index batch = 0;
  Index q_len = 0;
  Index k_len = 0;
  Index heads = 0;
};

struct MhaConfig {
  std::optional<double> scale;  // default 1/sqrt(hidden/heads)
  AttentionMask mask;
  double dropout_p = 0.0;  // attention-probability dropout
};

struct MhaForward {
  Matrix q, k, v;         // projected and head-split
  AttentionForward attn;  // probabilities and per-head output
  Matrix context;         // merged heads, [B·Lq, hidden]
  Matrix out;             // [B·Lq, hidden]
};

// query: [B·Lq, hidden]; key_value: [B·Lk, hidden]; hidden % heads == 0.
MhaForward mha_forward(const Matrix& query, const Matrix& key_value, const MhaParams& params,
                       const MhaShape& shape, const MhaConfig& config, const KeepMask* prob_keep = nullptr);

struct MhaGrads {
  Matrix d_query;      // [B·Lq, hidden]
  Matrix d_key_value;  // [B·Lk, hidden], the K and V paths summed
  MhaParams d_params;
};

MhaGrads mha_backward(const Matrix& dout, const Matrix& query, const Matrix& key_value,
                      const MhaParams& params, const MhaShape& shape, const MhaConfig& config,
                      const MhaForward& forward, const KeepMask* prob_keep = nullptr);

}  // namespace seqbench::ref
