// The GPU layer tests' case setup: the LayerConfig of one random case (encoder, decoder and the
// cross-K/V stack draw their cases the same way), the steady-state tests' fixed config, and the
// padding lengths as a case description prints them.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "layers/config.h"

namespace seqbench::layers::layer_test {

// A random case's config: the plan sized by the caller above the batch (max_batch_tokens,
// max_seq_len), dropout probabilities 0.2 (attention), 0.1 (activation), 0.15 (hidden) when on.
inline LayerConfig case_config(int max_batch_tokens, int max_seq_len, int hidden, int heads, int ffn,
                               bool pre, Activation activation, bool dropout, DType dtype) {
  LayerConfig config;
  config.max_batch_tokens = max_batch_tokens;
  config.max_seq_len = max_seq_len;
  config.hidden = hidden;
  config.ffn = ffn;
  config.heads = heads;
  config.attn_dropout = dropout ? 0.2 : 0.0;
  config.activation_dropout = dropout ? 0.1 : 0.0;
  config.hidden_dropout = dropout ? 0.15 : 0.0;
  config.pre_layer_norm = pre;
  config.activation = activation;
  config.dtype = dtype;
  return config;
}

// The steady-state tests' layer: B·L <= 96, L <= 24, H = 20 in 4 heads, ffn 45, every dropout
// 0.1, fp16.
inline LayerConfig steady_state_config() {
  LayerConfig config;
  config.max_batch_tokens = 96;
  config.max_seq_len = 24;
  config.hidden = 20;
  config.ffn = 45;
  config.heads = 4;
  config.attn_dropout = config.activation_dropout = config.hidden_dropout = 0.1;
  config.dtype = DType::f16;
  return config;
}

// "5,0,3" for the lengths {5, 0, 3}; "" for none.
inline std::string joined(const std::vector<int>& lengths) {
  std::ostringstream os;
  for (std::size_t i = 0; i < lengths.size(); ++i) os << (i ? "," : "") << lengths[i];
  return os.str();
}

}  // namespace seqbench::layers::layer_test
