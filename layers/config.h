// LayerConfig: the configuration of one Transformer layer, with the fields LightSeq2's users know
// (LSTransformerEncoderLayer.get_config: max_batch_tokens, max_seq_len, hidden_size,
// intermediate_size, nhead, the three dropout ratios, pre_layer_norm, activation_fn, fp16), and the
// named model presets (transformer-base/-big, bert-base/-large, gpt2-small/-large, vit-b-32/-l-32).
//
// The maxima are what the memory planner plans for: every temporary is sized at max_batch_tokens
// tokens and max_seq_len positions, once, and a batch beyond them is refused by check_batch() with
// both numbers in the message (LightSeq's "batch token numbers exceeds the limit", made explicit).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace seqbench::layers {

// The FFN activation. `gelu` is the exact erf form (PyTorch nn.GELU(), Hugging Face "gelu");
// `gelu_tanh` is the tanh approximation (Hugging Face "gelu_new", GPT-2).
enum class Activation { relu, gelu, gelu_tanh };

std::string_view activation_name(Activation activation);
// Accepts the names above; throws seqbench::Error naming the value and the accepted names.
Activation parse_activation(std::string_view text);

struct LayerConfig {
  int max_batch_tokens = 0;         // padded tokens (batch × length) per batch, at most
  int max_seq_len = 0;              // positions per sentence, at most
  int hidden = 0;                   // model width H
  int ffn = 0;                      // FFN inner width (LightSeq2's intermediate_size)
  int heads = 0;                    // attention heads N; hidden must be a multiple of heads
  double attn_dropout = 0.0;        // on the attention probabilities
  double activation_dropout = 0.0;  // after the FFN activation
  double hidden_dropout = 0.0;      // on each sub-layer's output, before the residual add
  bool pre_layer_norm = true;       // LayerNorm before each sub-layer (true) or after the residual (false)
  Activation activation = Activation::relu;
  DType dtype = DType::f16;
  double layer_norm_eps = 1e-5;

  int head_dim() const { return heads > 0 ? hidden / heads : 0; }

  // Throws one seqbench::Error that lists every rule the config breaks, each naming its fields
  // and their values: a size that is not positive; hidden not a multiple of heads; a dropout
  // ratio outside [0, 1) or not finite; max_seq_len above max_batch_tokens (no batch could hold
  // one full sentence); layer_norm_eps not positive and finite, as a double or as the kernels'
  // float; max_batch_tokens x heads above the attention softmax's rows (2^31 - 1); a planned
  // tensor (the attention scores, max_batch_tokens x max_seq_len x heads; the FFN activation; the
  // QKV projection) over 2^62 bytes in fp32; an activation or dtype that is not one of the
  // enumerators.
  void validate() const;

  // Throws (naming the value and the limit) unless 1 <= seq_len <= max_seq_len, batch_size >= 1
  // and batch_size × seq_len <= max_batch_tokens: the shapes a planned layer can run.
  void check_batch(std::size_t batch_size, std::size_t seq_len) const;
};

// One line: "hidden=1024 ffn=4096 heads=16 ...", for messages and report details.
std::string describe(const LayerConfig& config);

// LayerConfig::check_batch's rule for any planned layer with these maxima (the embedding and
// criterion layers use it too): throws, naming the value and the limit, unless
// 1 <= seq_len <= max_seq_len, batch_size >= 1 and batch_size × seq_len <= max_batch_tokens.
void check_batch_maxima(std::size_t batch_size, std::size_t seq_len, int max_batch_tokens, int max_seq_len);

// A named model: the per-layer config plus how many layers it stacks, and where the numbers come
// from. Decoder-only models (GPT-2) are stacks of encoder layers with a causal mask, as LightSeq2
// builds them (mask_future_tokens); encoder-decoder models have both stacks.
struct ModelPreset {
  std::string name;
  LayerConfig layer;
  int encoder_layers = 0;
  int decoder_layers = 0;
  bool causal = false;  // the encoder layers mask future tokens (decoder-only language models)
  std::string source;   // where hidden/ffn/heads/layers/lengths/dropouts come from
};

// The preset of that name; throws seqbench::Error naming the unknown name and the known ones.
const ModelPreset& preset(std::string_view name);
// Every preset name, in a fixed order.
std::vector<std::string> preset_names();

}  // namespace seqbench::layers
