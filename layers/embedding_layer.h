// EmbeddingLayer: LightSeq2's Transformer input embedding (LightSeq's LSTransformerEmbeddingLayer:
// vocab_size, embedding_dim, max_batch_tokens, max_seq_len, padding_idx, dropout, fp16) on the GPU,
// forward and backward, over the fused kernels of kernels/embedding.h. The math is exactly
// reference/embedding.h's embedding_forward / embedding_backward:
//
//   y[b·L + l] = dropout(token_table[tok]·scale + pos[position(b, l)])   (tok = tokens[b, l])
//   y[b·L + l] = 0                                                        (tok == padding_idx)
//
// with scale = sqrt(H) unless configured (fairseq's and LightSeq's embed_scale), positions
// sinusoidal (fairseq's SinusoidalPositionalEmbedding: all sines, then all cosines; computed in the
// kernel, no table) or learned (a [max_seq_len + position_offset, H] table that gets a gradient),
// indexed by slot (l) or by the count of non-padding tokens before the slot (fairseq's
// make_positions, LightSeq's training kernel), plus position_offset (fairseq: padding_idx + 1;
// LightSeq: 0, the default).
//
// Forward: one launch of launch_embedding_fwd (the nonpad_count positions pre-pass and the
// per-launch sinusoid frequencies are the kernel's own, in the layer's workspace).
// Backward: launch_embedding_bwd_sorted (deterministic: bitwise reproducible, the default) or
// launch_embedding_bwd_atomic (LightSeq2's float atomics; options.deterministic_backward = false),
// either with a StreamFork the layer owns (a side stream and two events that the first backward()
// creates), so that the zero fill of the token table's untouched rows runs beside the sort or the
// adds.
// Both OVERWRITE the gradient tables (the padding row and unused rows become 0): a caller that
// accumulates over micro-batches sums them itself, as for the other layers.
//
// Dropout: one Philox stream (seed, offset), indexed by the flat element index (b·L + l)·H + h:
// exactly ref::make_dropout_mask(B·L, H, p, seed, offset). No mask is stored; the backward redraws
// it. A training loop advances offset by kEmbeddingLayerDropoutOffsets per step.
//
// Memory: the kernels' workspaces at the maxima (B·L = max_batch_tokens tokens, H, vocab and the
// position table's rows): the forward's (nonpad_count positions, sinusoid frequencies, and the
// sinusoid table of up to max_seq_len rows: kernels::embedding_fwd_workspace_bytes_upto) and the
// chosen backward's (the sorted one: key/value arrays, float partials, row bitmaps and CUB's sort storage;
// the atomic one: the nonpad_count positions and the token rows' bitmap of its forked launch). They are
// planned as two tensors of one block (MemoryManager; forward and backward never run at once, so they share
// bytes). Sizing the sorted backward's workspace asks CUB, which needs the CUDA device: the block is
// therefore allocated through the caller's DeviceAllocator at the FIRST forward() (after that call's argument
// checks), or earlier by reserve(); every later forward() and backward() allocates nothing. The kernels
// re-check the workspace at each call's shape: the plan assumes CUB's sort storage does not grow when the
// token count shrinks (unverified on a device here); if it ever did, the launch would throw naming both sizes
// rather than run short.
//
// Limits and contract: config.validate() (vocab_size, embedding_dim, max_batch_tokens,
// max_seq_len positive; max_seq_len <= max_batch_tokens; padding_idx -1 or in [0, vocab_size);
// dropout in [0, 1); scale finite; position_offset >= 0; the kernels' limits at the maxima);
// weights.token_table and grads.token_table non-null; position tables non-null exactly when learned;
// tokens device int32 [B, L] with ids in [0, vocab_size) (other ids give NaN rows and no gradient,
// see kernels/embedding.h); y [B·L, H] of config.dtype, overlapping neither tokens nor the layer's
// block; B, L within the maxima (check_batch_maxima: both numbers in the message). backward() needs
// the last forward()'s tokens pointer, contents unchanged, and runs with that forward's shape and
// dropout stream. Every check happens before any CUDA call (the first backward() then creates the
// layer's fork: a stream and two events, no device memory). Not thread-safe; one stream at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/embedding.h"
#include "layers/device_allocator.h"
#include "layers/layer_run.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {

// The dropout offsets one forward uses (offset + 0).
inline constexpr std::uint64_t kEmbeddingLayerDropoutOffsets = 1;

struct EmbeddingLayerConfig {
  int vocab_size = 0;
  int embedding_dim = 0;  // H (LightSeq's embedding_dim = the model's hidden size)
  int max_batch_tokens = 0;
  int max_seq_len = 0;
  int padding_idx = -1;         // -1: no padding token
  double dropout = 0.0;         // on the embedding output, in [0, 1)
  std::optional<double> scale;  // none: sqrt(embedding_dim)
  kernels::PositionEncoding positions = kernels::PositionEncoding::sinusoidal;
  kernels::PositionIndexing indexing = kernels::PositionIndexing::nonpad_count;
  int position_offset = 0;  // fairseq: padding_idx + 1; LightSeq: 0
  DType dtype = DType::f16;

  double effective_scale() const;
  // Rows of the learned position table: max_seq_len + position_offset.
  std::int64_t num_positions() const;
  bool learned() const { return positions == kernels::PositionEncoding::learned; }
  // Throws one seqbench::Error naming every field that breaks a rule (see the top of the file).
  void validate() const;
  void check_batch(std::size_t batch_size, std::size_t seq_len) const;
  // The kernels' shape and config for a batch (B, L) and dropout stream.
  kernels::EmbeddingShape kernel_shape(std::int64_t batch, std::int64_t len) const;
  kernels::EmbeddingConfig kernel_config(std::uint64_t seed, std::uint64_t offset) const;
};

template <class P>
struct EmbeddingLayerTensors {
  P token_table{};     // [vocab_size, H]
  P position_table{};  // [max_seq_len + position_offset, H], learned positions only (else null)
};
using EmbeddingLayerWeights = EmbeddingLayerTensors<const void*>;
using EmbeddingLayerGrads = EmbeddingLayerTensors<void*>;

// {token_table [vocab, H]} and, when learned, {position_table [num_positions, H]}.
std::vector<ParameterShape> embedding_layer_parameter_shapes(const EmbeddingLayerConfig& config);

// The argument checks EmbeddingLayer and BaselineEmbeddingLayer share, so that both refuse exactly
// the same inputs with the same messages (`layer`, the class's name, leads each message). Host
// only: each throws seqbench::Error before any CUDA call.
//
// A pointer aligned to its element: "<layer>::<where>: <what> (<p>) is not aligned to its
// <alignment>-byte element".
void require_embedding_aligned(const char* layer, const void* p, std::size_t alignment, const char* where,
                               const char* what);
// The constructor's (after config.validate()): token tables non-null, position tables non-null
// exactly when learned (null otherwise), and each table aligned to config.dtype.
void require_embedding_parameters(const char* layer, const EmbeddingLayerConfig& config,
                                  const EmbeddingLayerWeights& weights, const EmbeddingLayerGrads& grads);
// forward's: B, L within the maxima, y and tokens non-null and aligned, y [B·L, H] not
// overlapping tokens [B·L], offset leaving room for the dropout stream. Returns both sizes.
struct EmbeddingForwardBytes {
  std::size_t y = 0, tokens = 0;
};
EmbeddingForwardBytes require_embedding_forward(const char* layer, const EmbeddingLayerConfig& config,
                                                const void* y, const std::int32_t* tokens,
                                                std::size_t batch_size, std::size_t seq_len,
                                                std::uint64_t offset);

struct EmbeddingLayerOptions {
  bool deterministic_backward = true;  // false: LightSeq2's atomic backward (not bitwise reproducible)
  std::string prefix = "emb.";         // the planned tensors' names
};

// The layer's planned tensors ("<prefix>fwd_workspace", "<prefix>bwd_workspace") with their sizes
// at the maxima. Host-only for the atomic backward; the sorted one's size asks CUB (needs a device).
std::vector<TensorLifetime> embedding_layer_lifetimes(const EmbeddingLayerConfig& config,
                                                      const EmbeddingLayerOptions& options = {});

class EmbeddingLayer {
 public:
  // Validates config, weights, grads and options (throwing seqbench::Error before any CUDA call).
  // Allocates nothing: see reserve().
  EmbeddingLayer(const EmbeddingLayerConfig& config, const EmbeddingLayerWeights& weights,
                 const EmbeddingLayerGrads& grads, DeviceAllocator& allocator,
                 EmbeddingLayerOptions options = {});
  ~EmbeddingLayer();
  EmbeddingLayer(const EmbeddingLayer&) = delete;
  EmbeddingLayer& operator=(const EmbeddingLayer&) = delete;

  // Sizes the workspaces at the maxima and allocates the one block, unless done already (the
  // first forward() calls it). Needs the CUDA device for the sorted backward.
  void reserve();
  bool reserved() const;

  // y = embedding(tokens). tokens: device int32 [batch_size, seq_len]; y: device [B·L, H].
  void forward(void* y, const std::int32_t* tokens, std::size_t batch_size, std::size_t seq_len,
               std::uint64_t seed, std::uint64_t offset, cudaStream_t stream);

  // Writes grads.token_table (and grads.position_table) from dy = ∂loss/∂y [B·L, H] for the last
  // forward(), whose tokens pointer must be passed again (contents unchanged).
  void backward(const void* dy, const std::int32_t* tokens, cudaStream_t stream);

  const EmbeddingLayerConfig& config() const { return config_; }
  const EmbeddingLayerOptions& options() const { return options_; }
  // Throw unless reserved.
  const MemoryManager& memory() const;
  std::size_t block_bytes() const;

 private:
  struct Impl;

  EmbeddingLayerConfig config_;
  EmbeddingLayerOptions options_;
  EmbeddingLayerWeights weights_;
  EmbeddingLayerGrads grads_;
  DeviceAllocator& allocator_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
