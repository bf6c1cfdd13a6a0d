// BaselineEmbeddingLayer: the eager-like baseline of EmbeddingLayer (LightSeq2 Fig. 19's
// embedding: "the same layer in PyTorch"). The math is EmbeddingLayer's exactly
// (layers/embedding_layer.h, reference/embedding.h), with the same config, parameter views and
// dropout stream (seed, offset; flat element index (b·L + l)·H + h), so that both layers match the
// reference and each other up to rounding. What differs is how it runs, the way PyTorch eager runs
// fairseq's TransformerEncoder embedding (the op sequence of kernels/embedding.h's "Unfused
// baseline", as the operator suite's "unfused" variant):
//
//   forward   make_positions (launch_embedding_positions, int32 [B·L]) → embed_tokens
//             (launch_gather_rows) → ·scale (launch_scale) → embed_positions (launch_gather_rows
//             on the learned table, or on the sinusoidal table [max_seq_len + position_offset, H]
//             that fairseq's SinusoidalPositionalEmbedding precomputes: here on the host in double,
//             rounded to float and then to T, uploaded once at the first forward) → add
//             (launch_residual_add) → masked_fill(padding, 0) (launch_zero_padding_rows; skipped
//             without a padding token) → dropout (launch_dropout_mask_u8 + launch_dropout_apply_u8,
//             the uint8 mask stored; skipped for p = 0, ATen's identity). The last op writes y.
//   backward  dropout's backward (launch_dropout_apply_u8 on dy with the saved mask; none for
//             p = 0) → the scale's backward (launch_scale) → index_add_ into the token table
//             (cudaMemsetAsync of grads.token_table, launch_scatter_add_rows: T atomics, NOT
//             bitwise deterministic) → learned positions: the same into grads.position_table with
//             the saved positions. Like EmbeddingLayer's, it OVERWRITES the gradient tables.
//
// Memory: every intermediate is an EagerTensor (layers/eager_tensor.h) allocated through the
// caller's DeviceAllocator (in practice a CachingAllocator) when produced and freed when autograd
// would free it: a forward temporary after its consumer; the mask (p > 0) and, for learned
// positions, the positions are saved for the backward and freed by it (unless retain_graph); the
// sinusoidal table is the module's buffer, allocated once at the first forward and kept.
//
// Limits and contract as EmbeddingLayer's (config.validate(); weights.token_table and
// grads.token_table non-null and element-aligned, position tables exactly when learned; tokens
// int32 [B, L] with ids in [0, vocab_size) (others: see below); y [B·L, H] not
// overlapping tokens; B, L within the maxima: check_batch_maxima names both numbers). backward()
// needs the last forward()'s tokens pointer, contents unchanged. Every check happens before any
// CUDA call. backward(..., retain_graph = false) frees what it read, as autograd does; a second
// backward then needs a new forward; retain_graph = true keeps the saved tensors so that a
// benchmark can time repeated backwards of one forward. A new forward drops the previous graph
// first. One stream (the caching allocator reuses freed blocks in stream order). Not thread-safe.
//
// Ids outside [0, vocab_size) (PyTorch eager would stop on a device assert): the token gather
// gives a NaN row and the token table no gradient, as in EmbeddingLayer, but two eager ops differ
// from the fused kernel there: the dropout mask is a select, so its dropped elements of such a
// row are 0 rather than NaN (with p > 0 a row can come out finite for a small H), and the
// position table's index_add_ filters on padding only, so the position of such a token does get
// dy's row (EmbeddingLayer's gives it none). Both only where the input is already invalid.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "layers/device_allocator.h"
#include "layers/embedding_layer.h"

namespace seqbench::layers {

class BaselineEmbeddingLayer {
 public:
  // Validates config, weights and grads (throwing seqbench::Error naming the field, before any
  // CUDA call). Allocates nothing (the sinusoidal table is allocated at the first forward).
  BaselineEmbeddingLayer(const EmbeddingLayerConfig& config, const EmbeddingLayerWeights& weights,
                         const EmbeddingLayerGrads& grads, DeviceAllocator& allocator);
  ~BaselineEmbeddingLayer();
  BaselineEmbeddingLayer(const BaselineEmbeddingLayer&) = delete;
  BaselineEmbeddingLayer& operator=(const BaselineEmbeddingLayer&) = delete;

  // As EmbeddingLayer::forward.
  void forward(void* y, const std::int32_t* tokens, std::size_t batch_size, std::size_t seq_len,
               std::uint64_t seed, std::uint64_t offset, cudaStream_t stream);

  // As EmbeddingLayer::backward, then frees the saved tensors unless retain_graph.
  void backward(const void* dy, const std::int32_t* tokens, cudaStream_t stream, bool retain_graph = false);

  // Frees the saved tensors (the graph is dropped); backward then needs a new forward.
  void release();
  // Bytes of the tensors held for the backward now (the mask, learned positions' indices).
  std::size_t saved_bytes() const;
  // Bytes of the sinusoidal position table (0 for learned positions or before the first forward).
  std::size_t buffer_bytes() const;

  const EmbeddingLayerConfig& config() const { return config_; }

 private:
  struct Impl;

  EmbeddingLayerConfig config_;
  EmbeddingLayerWeights weights_;
  EmbeddingLayerGrads grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
