// Softmax over the last axis: the attention softmax (scaled, with causal and key-padding masks)
// and the plain log-softmax the cross-entropy builds on.
//
// Masking uses -infinity, never a large negative constant: exp(-inf) is exactly 0, so a masked key
// gets exactly zero probability and zero gradient at any input scale and in any precision, whereas
// "-1e8"-style constants leak probability once scores are that large and overflow in half.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/tensor.h"

namespace seqbench::ref {

// The logical shape of attention scores [batch, heads, q_len, k_len], stored as a Matrix with
// batch·heads·q_len rows and k_len columns (row = (b * heads + h) * q_len + i).
struct AttentionShape {
  Index batch = 0;
  Index heads = 0;
  Index q_len = 0;
  Index k_len = 0;

  Index rows() const { return batch * heads * q_len; }
};

// Which (query i, key j) pairs of batch element b are masked. The conditions are OR-ed.
struct AttentionMask {
  // Causal (decoder self-attention): query i sits at absolute position i + causal_offset and sees
  // keys j <= i + causal_offset. causal_offset = 0 is training (q_len == k_len); incremental
  // decoding of the last q_len positions over k_len cached keys uses causal_offset = k_len - q_len.
  bool causal = false;
  Index causal_offset = 0;
  // Per batch element, the number of valid (unpadded) keys: key j >= key_lengths[b] is masked.
  // Empty: no length mask. Otherwise batch entries, each in [0, k_len].
  std::vector<Index> key_lengths;
  // PyTorch key_padding_mask semantics: key_padding[b * k_len + j] != 0 masks key j of batch b.
  // Empty: no boolean mask. Otherwise batch * k_len entries.
  std::vector<std::uint8_t> key_padding;

  // Whether key j is hidden from query i of batch element b, for keys of length k_len.
  bool masked(Index b, Index i, Index j, Index k_len) const;
};

// Throws seqbench::Error naming the field and its expected size/range.
void validate_attention_mask(const AttentionMask& mask, const AttentionShape& shape);

// y[r, j] = exp(z_j - max z) / Σ_k exp(z_k - max z), with z_j = scale · x[r, j] for unmasked keys
// and z_j = -inf for masked ones (PyTorch softmax(scale·x + mask) with mask ∈ {0, -inf}, as in
// scaled dot-product attention, Vaswani et al. 2017 §3.2.1).
// A fully-masked row (every key masked, e.g. key length 0) is defined as all zeros. PyTorch gives
// NaN there (0/0); zeros are what FlashAttention and the fused kernels produce, and they make the
// attention output of that query zero and its gradient zero, instead of poisoning the batch.
// scores: [shape.rows(), shape.k_len].
Matrix attention_softmax_forward(const Matrix& scores, const AttentionShape& shape, double scale,
                                 const AttentionMask& mask);

// dx = scale · y ⊙ (dy - Σ_j dy_j y_j), row by row: the softmax Jacobian diag(y) - y yᵀ applied to
// dy, times the chain-rule factor of z = scale · x. Masked entries have y = 0, so they get dx = 0;
// fully-masked rows get dx = 0. Needs only the forward output y, as the fused kernels do.
Matrix attention_softmax_backward(const Matrix& dy, const Matrix& y, double scale);

// log q[r, j] = x[r, j] - max_k x[r, k] - log Σ_k exp(x[r, k] - max_k x[r, k]) (PyTorch
// log_softmax over the last axis; the max shift keeps exp from overflowing). cols >= 1.
Matrix log_softmax(const Matrix& x);

}  // namespace seqbench::ref
