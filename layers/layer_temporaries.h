// The dry runs of the Transformer layers for the memory planner: each layer's forward and backward
// written as the sequence of ops LightSeq2's fused layers execute (§IV-A; LightSeq's
// TransformerEncoderLayer / TransformerDecoderLayer), each op with the tensors it reads and
// writes at the maximum shapes. The planner turns that into one block (layers/memory_planner.h),
// and the memory suite turns it into LightSeq2's Fig. 8 accounting.
//
// This is a model of LightSeq2's layers, not the plan of this project's layers
// (layers/encoder_layer.h, decoder_layer.h, whose own dry runs the MemoryManager plans): those keep
// the post-LN residual sum for the LayerNorm backward (it needs the LayerNorm's input; the model
// backs it out of the output, as LightSeq2 does), and add their Recompute temporaries and kernel
// workspaces. At each preset's maximum batch, with a shared Gemm (no workspace in the block), the
// real encoder layer's block against the model's is 320 / 320 MiB (Recompute none / pointwise)
// against 304 for transformer-base, 387 / 288 against 420 for bert-base, 961 / 820 against 1100
// for gpt2-large (dry runs on the CPU, 2026-11-24). The memory suite's Fig. 8 rows are this model; its Fig.
// 20 loop measures the real layers.
//
// What counts as a tensor here: every activation the forward keeps for the backward and every
// temporary of either pass, including the hidden states between stacked layers and their
// gradients. Not here: parameters and parameter gradients (the trainer's workspace owns them),
// and the tensors the caller owns, which are recorded as external (0 bytes): the stack's input
// and output and their gradients. Parameter-gradient GEMMs (dW, dbias) read activations, which
// the ops below list among their reads, but write only the workspace.
//
// Notation in the comments: B sentences of L positions (T = B·L tokens), hidden H, FFN width F,
// N heads; the encoder side of a decoder has Ls positions (Ts = B·Ls). Every tensor has the
// config's dtype, except LayerNorm statistics (fp32 mean and rstd per token) and stored dropout
// masks (one byte per element).
//
// Tensor names are "<prefix><sub-layer>.<tensor>", e.g. "enc3.attn.d_probs", "dec0.cross.q_heads",
// "dec0.ffn.act_out", so that a layer can find its planned tensors by name
// (MemoryManager::id). Each op is one step.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "layers/config.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {

struct BatchShape {
  std::size_t batch_size = 0;
  std::size_t seq_len = 0;
  std::size_t tokens() const { return batch_size * seq_len; }
};

struct TemporaryOptions {
  // LightSeq2 keeps each dropout's keep mask (one byte per element) for the backward. seqbench's
  // kernels draw the mask from Philox(seed, offset, index) and can draw it again in the backward,
  // so by default no mask is stored; set this to account LightSeq2's way.
  bool store_dropout_masks = false;
};

// ---------------------------------------------------------------------------------------------
// LightSeq2 Fig. 8: the self-attention backward alone, from the gradient of the output
// projection's output to the gradient of the QKV projection's input. Forward activations and the
// incoming gradient are external; the temporaries are, in order,
//   d_ctx [T,H] → d_ctx_heads [B,N,L,d] → d_v [B,N,L,d] and d_probs [B,N,L,L] (softmax and dropout
//   backward in place) → d_q, d_k [B,N,L,d] → d_qkv [T,3H] → d_qkv_in [T,H]
// which sum to 9·B·L·H + B·L²·N elements; the most of them live at one step is
// 3·B·L·H + max(3·B·L·H, B·L²·N) (at the scores backward, or at the QKV transform).
std::vector<TensorLifetime> attention_backward_temporaries(const LayerConfig& config, BatchShape shape);

struct AttentionBackwardFormula {
  std::size_t naive_bytes = 0;    // 9·B·L·H + B·L²·N elements
  std::size_t managed_bytes = 0;  // 3·B·L·H + max(3·B·L·H, B·L²·N) elements
};
// The paper's closed forms in bytes. With alignment 1 they are exactly the paper's; with the
// planner's alignment each tensor counts as its slot (rounded up), which is what the planner's
// block must then equal: 6·a(BLH) + a(3BLH) + a(BL²N) and 3·a(BLH) + max(a(3BLH), a(BL²N)).
AttentionBackwardFormula attention_backward_formula(const LayerConfig& config, BatchShape shape,
                                                    std::size_t alignment = 1);

// ---------------------------------------------------------------------------------------------
// Describing layers into a recorder, for stacks (and for a layer to learn its tensors' names).

// What a sub-layer's forward keeps for its backward (ids in the recorder). Fields that belong to
// another kind of sub-layer (the FFN's for an attention, ...) are left 0 and mean nothing.
struct SublayerSaved {
  std::string prefix;
  TensorId input = 0;                   // the sub-layer's input (the residual stream)
  TensorId output = 0;                  // its output
  TensorId gemm_input = 0;              // what the first GEMM read: LN(input) pre-LN, input post-LN
  std::optional<TensorId> ln_out;       // pre-LN: LN(input)
  TensorId ln_stats = 0;                // the LayerNorm's mean and rstd
  std::optional<TensorId> hidden_mask;  // the output dropout's mask, when stored
  // Attention only.
  TensorId q_heads = 0;              // self: the whole [3,B,N,L,d] QKV; cross: Q [B,N,L,d]
  std::optional<TensorId> kv_heads;  // cross: K and V of the encoder output
  std::size_t kv_len = 0;            // cross: Ls
  TensorId probs = 0;                // softmax output [B,N,L,Lk]
  TensorId context_probs = 0;        // what the context GEMM read: dropped probs, or probs
  std::optional<TensorId> probs_mask;
  TensorId ctx = 0;  // the context [T,H], the output projection's input
  // FFN only.
  TensorId ff1_raw = 0;  // the first GEMM's output, before bias and activation
  TensorId act_out = 0;  // dropout(act(ff1_raw + bias))
  std::optional<TensorId> act_mask;
};

class LayerDescriber {
 public:
  LayerDescriber(LifetimeRecorder& recorder, const LayerConfig& config, BatchShape shape,
                 TemporaryOptions options = {});

  SublayerSaved self_attention_forward(const std::string& prefix, TensorId input, TensorId output);
  void self_attention_backward(const SublayerSaved& saved, TensorId d_output, TensorId d_input);
  // Cross-attention over Ls encoder positions whose K and V (bias added, per head:
  // [2,B,N,Ls,d]) are `kv_heads`; the backward writes the gradient of the K/V GEMM's output,
  // [Ts,2H], into `d_kv_raw` (a slice of the layer-batched one in a stack).
  SublayerSaved cross_attention_forward(const std::string& prefix, TensorId input, TensorId output,
                                        TensorId kv_heads, std::size_t kv_len);
  void cross_attention_backward(const SublayerSaved& saved, TensorId d_output, TensorId d_input,
                                TensorId d_kv_raw);
  SublayerSaved ffn_forward(const std::string& prefix, TensorId input, TensorId output);
  void ffn_backward(const SublayerSaved& saved, TensorId d_output, TensorId d_input);

  // Whole layers: attention then FFN (encoder), self-attention, cross-attention then FFN
  // (decoder); the hidden states between sub-layers and their gradients are declared here.
  struct LayerSaved {
    std::string prefix;
    std::vector<SublayerSaved> sublayers;
    std::vector<TensorId> hidden;  // between sub-layers: [sublayers - 1]
  };
  LayerSaved encoder_forward(const std::string& prefix, TensorId input, TensorId output);
  void encoder_backward(const LayerSaved& saved, TensorId d_output, TensorId d_input);
  LayerSaved decoder_forward(const std::string& prefix, TensorId input, TensorId output, TensorId kv_heads,
                             std::size_t kv_len);
  void decoder_backward(const LayerSaved& saved, TensorId d_output, TensorId d_input, TensorId d_kv_raw);

  // The attention backward from d_out_raw (the output projection's output gradient) to the QKV
  // GEMM input's gradient, which it returns: the part Fig. 8 accounts.
  TensorId self_attention_core_backward(const std::string& prefix, TensorId d_out_raw, TensorId ctx,
                                        TensorId context_probs, TensorId probs,
                                        std::optional<TensorId> probs_mask, TensorId qkv_heads,
                                        TensorId gemm_input);

  std::size_t activation_bytes(std::size_t elements) const { return elements * element_bytes_; }

 private:
  TensorId act(const std::string& name, std::size_t elements);
  std::optional<TensorId> mask(const std::string& name, double ratio, std::size_t elements);
  TensorId stats(const std::string& name);
  // The pieces every sub-layer forward shares, recorded in this order by each caller:
  // the saved-state header and the pre-LN (when configured) that feeds the sub-layer's GEMM;
  SublayerSaved begin_sublayer(const std::string& prefix, TensorId input, TensorId output);
  // softmax over the scores (in place) and the optional attention dropout;
  void attention_probs(SublayerSaved& s, std::size_t scores, const std::vector<TensorId>& gemm_inputs);
  // context GEMM, output projection, bias + dropout + residual, and the post-LN.
  void attention_output(SublayerSaved& s, TensorId value_heads);
  // The backward of a sub-layer's output end (post-LN, bias + dropout + residual) into d_raw, the
  // gradient of the sub-layer's last GEMM output; returns the residual's gradient under post-LN.
  std::optional<TensorId> output_backward(const SublayerSaved& s, TensorId d_output, TensorId d_raw);

  LifetimeRecorder& rec_;
  LayerConfig config_;
  TemporaryOptions options_;
  std::size_t element_bytes_;
  std::size_t B_, L_, T_, H_, F_, N_;
};

// One encoder layer (also a GPT block: the causal mask costs no memory): forward, then backward
// at once. External: x, y, dy, dx.
std::vector<TensorLifetime> encoder_layer_temporaries(const LayerConfig& config, BatchShape shape,
                                                      TemporaryOptions options = {});
// One decoder layer with its own K/V GEMM over `src_len` encoder positions: forward, then
// backward. External: x, encoder_out, y, dy, dx, d_encoder_out.
std::vector<TensorLifetime> decoder_layer_temporaries(const LayerConfig& config, BatchShape shape,
                                                      std::size_t src_len, TemporaryOptions options = {});
// The preset's whole stack, as a training step runs it: the encoder layers forward, the
// layer-batched K/V GEMM of every decoder layer (one GEMM, split once), the decoder layers
// forward, then every backward in reverse, the K/V GEMM's backward forming the encoder output's
// gradient after decoder layer 0's backward. Source and target both have `shape`. External: the
// embeddings' outputs, the stack's outputs and their gradients. Final LayerNorms outside the
// layers (pre-LN stacks) are not included.
std::vector<TensorLifetime> model_temporaries(const ModelPreset& preset, BatchShape shape,
                                              TemporaryOptions options = {});

}  // namespace seqbench::layers
