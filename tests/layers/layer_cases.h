// The GPU layer tests' case setup: the LayerConfig of one random case (encoder, decoder and the
// cross-K/V stack draw their cases the same way) and the sweep over dtypes and cases that hands
// each its seed, the steady-state tests' fixed config and packed device parameters, and the
// padding lengths as a case description prints them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/config.h"
#include "layers/layer_run.h"
#include "suites/operators/check_util.h"
#include "tests/layers/layer_params.h"

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

// run(case, seed, tag) for every case in f32, then f16, then bf16 (tag: a value of the dtype's
// element type, as dispatch_dtype passes it), with the seeds first_seed + 1, first_seed + 2, ...
// in that order.
template <class Case, class Run>
void for_each_dtype_and_case(const std::vector<Case>& cases, std::uint64_t first_seed, Run&& run) {
  std::uint64_t seed = first_seed;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      ++seed;
      dispatch_dtype(dtype, [&](auto tag) { run(c, seed, tag); });
    }
  }
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

// The steady-state tests' parameters: `shapes` (of steady_state_config()) packed in one device
// buffer drawn U(-0.3, 0.3) with seed 7, the gradients in a second one of the same layout (not
// initialised), and the weights and grads of a layer viewing them.
template <class T, class Weights, class Grads>
struct SteadyStateParams {
  std::size_t total = 0;
  std::vector<std::size_t> offsets;
  DeviceBuffer<T> d_params;
  DeviceBuffer<T> d_grads;
  Weights weights;
  Grads grads;

  explicit SteadyStateParams(const std::vector<ParameterShape>& shapes)
      : offsets(packed_offsets(shapes, total)),
        d_params(operators::check_util::random_values<T>(total, 7, -0.3f, 0.3f)),
        d_grads(total) {
    point_views(weights, grads, d_params.data(), d_grads.data(), offsets);
  }
};

// "5,0,3" for the lengths {5, 0, 3}; "" for none.
inline std::string joined(const std::vector<int>& lengths) {
  std::ostringstream os;
  for (std::size_t i = 0; i < lengths.size(); ++i) os << (i ? "," : "") << lengths[i];
  return os.str();
}

}  // namespace seqbench::layers::layer_test
