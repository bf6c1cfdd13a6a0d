// CrossAttentionKV: LightSeq2's layer-batched cross-attention keys and values (Wang et al. 2022,
// §IV-A): every decoder layer's cross-attention projects the SAME encoder output to its K and V,
// so one GEMM computes K and V for all `layers` decoder layers at once, and the gradient to the
// encoder output is one GEMM too, formed after the last decoder layer to run backward (layer 0)
// has written its dK/dV. Used with DecoderLayer in external-K/V mode (DecoderLayerOptions::
// external_kv), which reads its heads from kv_heads(i) in forward_kv and writes dK/dV into
// d_kv_heads(i) in backward_kv.
//
// Parameters (device pointers of config.dtype, nn.Linear layout): W_kv_all [layers·2H, H],
// b_kv_all [layers·2H]. Layer i's block is rows [i·2H, (i+1)·2H) (its K rows, then its V rows),
// exactly a DecoderLayer's cross_kv_weight [2H, H] / cross_kv_bias [2H], so a stack's
// per-layer weights stacked in layer order are W_kv_all.
//
//   forward   kv_all [B·S, layers·2H] = encoder_out [B·S, H] · W_kv_allᵀ            (ONE GEMM)
//             kv_heads(i) [2, B, N, S, d] = split(kv_all[:, i·2H : (i+1)·2H] + b_i)  (one fused
//             bias+split per layer on the column block: kernels/qkv_reshape.h with projections = 2
//             and projected_ld = layers·2H, so no copy of the block is made)
//   backward  d_kv_all[:, i·2H : (i+1)·2H] = merge(d_kv_heads(i)), db_i = Σ_rows of it
//             (one fused merge + deterministic bias gradient per layer, written in place into the
//             column block of d_kv_all: projected_ld = layers·2H)
//             d_encoder_out [B·S, H] = d_kv_all · W_kv_all          (ONE GEMM, k = layers·2H:
//             the sum over the layers happens inside the GEMM's fp32 accumulation)
//             dW_kv_all [layers·2H, H] = d_kv_allᵀ · encoder_out    (ONE GEMM)
// backward() WRITES d_encoder_out, dW_kv_all and db_kv_all (not accumulated). A stack whose
// encoder output also feeds other consumers adds their gradients itself.
//
// Order (the stack's contract): forward(encoder_out) → each layer's forward_kv(.., *this, i, ..) →
// each layer's backward_kv(.., *this, i, ..) (any order) → backward(d_encoder_out, encoder_out).
// All on one stream. The object keeps the order honest, since each mistake would otherwise give
// silently wrong gradients:
//   - a layer takes B and S from the object, and must have the object's hidden, heads and dtype
//     (heads formed for another batch or layout are never read);
//   - backward() refuses to run unless every layer has written its d_kv_heads since the last
//     forward() (DecoderLayer::backward_kv marks it; a caller that writes d_kv_heads(i) by other
//     means calls mark_d_kv_heads_written(i)), naming the layers that have not;
//   - backward() consumes the heads (its d_kv_all may take their bytes): kv_heads() and a layer's
//     backward_kv then refuse until the next forward(). The gradient heads stay readable, and a
//     second backward() recomputes the same gradients from them.
//
// Memory: planned like the layers (a dry run, cross_kv_lifetimes, at the config's maxima, in one
// block allocated once at construction; forward/backward allocate nothing; ops announce their
// step). Tensors: kv_all and d_kv_all [max_batch_tokens, layers·2H] (lifetimes disjoint, so the
// planner may share them), kv_heads.i and d_kv_heads.i [2·max_batch_tokens·H] per layer, the
// split backward's workspace (one, reused layer after layer: stream-ordered), and the GEMM
// workspace when the object makes its own Gemm. The decoder layers' use of the heads lies between
// this object's forward and backward: the dry run records it as one op, "decoder_layers" (reads
// every kv_heads.i, writes every d_kv_heads.i; no work of its own, announced first by backward()),
// so the heads stay live until the layers are done and the gradient heads are live from then on;
// kv_all (dead after the split) may share bytes with the gradient heads, which is sound because
// everything runs on one stream.
//
// Bytes/FLOPs: forward GEMM 2·B·S·H·layers·2H FLOPs, reads B·S·H + layers·2H·H, writes
// B·S·layers·2H elements; the splits read and write B·S·layers·2H (+ the biases). Backward: the
// merges the same, two GEMMs of 2·B·S·H·layers·2H FLOPs each. Per layer this is what the
// per-layer K/V path costs; the gain is fewer, larger GEMMs (better tensor-core occupancy) and no
// per-layer d_encoder_out tensors to sum.
//
// Limits and contract (checked before any CUDA call, seqbench::Error naming the value): config
// .validate(); 1 <= layers, layers·2H <= 2^31 - 1; the four parameter pointers non-null, the two
// gradients overlapping neither each other nor the weights; encoder_out [B·S, H] non-null, outside
// the block, check_batch(B, S); backward needs the last forward's encoder_out (same pointer,
// unchanged), d_encoder_out non-null, overlapping neither encoder_out, the parameters nor the
// block, and the gradients not overlapping encoder_out. Not thread-safe; one stream at a time
// (the decoder layers' calls included).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/gemm.h"
#include "layers/layer_run.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {

struct CrossAttentionKVOptions {
  std::string prefix = "cross_kv.";  // the planned tensors' names: "<prefix>kv_heads.3", ...
  // GEMMs: a caller's Gemm (not owned), or null for one the object makes, with a workspace of
  // gemm_workspace_bytes planned in its block.
  Gemm* gemm = nullptr;
  std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes;
};

// The parameters' shapes: kv_weight_all [layers·2H, H], kv_bias_all [layers·2H] (validates).
std::vector<ParameterShape> cross_kv_parameter_shapes(const LayerConfig& config, int layers);

// The dry run: ops "<prefix>kv_gemm", "<prefix>kv_bias_split" (forward), "<prefix>decoder_layers"
// (the layers' use, see above), "<prefix>kv_bias_split_bwd", "<prefix>kv_gemm_bwd" (backward), and
// every temporary's lifetime at the config's maxima. Host
// only; validates config and layers.
std::vector<TensorLifetime> cross_kv_lifetimes(const LayerConfig& config, int layers,
                                               const CrossAttentionKVOptions& options = {},
                                               std::vector<std::string>* ops = nullptr,
                                               int* forward_ops = nullptr);

class CrossAttentionKV {
 public:
  // Validates (before any allocation or CUDA call), plans and allocates the one block through
  // `allocator` (which must outlive the object).
  CrossAttentionKV(const LayerConfig& config, int layers, const void* kv_weight_all, const void* kv_bias_all,
                   void* d_kv_weight_all, void* d_kv_bias_all, DeviceAllocator& allocator,
                   CrossAttentionKVOptions options = {});
  ~CrossAttentionKV();
  CrossAttentionKV(const CrossAttentionKV&) = delete;
  CrossAttentionKV& operator=(const CrossAttentionKV&) = delete;

  // Every layer's K/V heads from encoder_out [batch_size·source_len, H].
  void forward(const void* encoder_out, std::size_t batch_size, std::size_t source_len, cudaStream_t stream);
  // Layer i's K/V heads [2, B, N, S, d] (valid after forward, until backward or the next forward)
  // and the buffer its backward_kv writes dK/dV into, for the last forward's B and S.
  // 0 <= i < layers. DecoderLayer's forward_kv/backward_kv take the object rather than these
  // pointers; they are here for reading back and for callers of other layers.
  const void* kv_heads(int layer) const;
  void* d_kv_heads(int layer) const;
  // Records that layer i's d_kv_heads holds its gradient for the last forward (backward() requires
  // it of every layer). DecoderLayer::backward_kv calls it after enqueuing its write.
  void mark_d_kv_heads_written(int layer);
  // The last forward's batch size and source length, and how many forwards have run (a layer's
  // backward_kv checks that the heads it read are still the object's).
  std::size_t batch_size() const;
  std::size_t source_len() const;
  std::uint64_t forward_count() const;
  // d_encoder_out [B·S, H], dW_kv_all and db_kv_all (written) from every layer's d_kv_heads.
  void backward(void* d_encoder_out, const void* encoder_out, cudaStream_t stream);

  int layers() const { return layers_; }
  const LayerConfig& config() const { return config_; }
  const MemoryManager& memory() const;
  std::size_t block_bytes() const;

 private:
  struct Impl;

  LayerConfig config_;
  int layers_ = 0;
  CrossAttentionKVOptions options_;
  const void* w_ = nullptr;
  const void* b_ = nullptr;
  void* dw_ = nullptr;
  void* db_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
