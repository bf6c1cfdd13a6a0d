// What the Transformer layers' validation tests (CPU, no GPU) construct a layer from and read its
// dry run with: a small LayerConfig that every layer accepts (and its pre-/post-LN, dropout
// variants), parameter views of distinct non-null fake addresses that are never dereferenced
// (every check these tests reach runs before any CUDA call), and the tensor names of a dry run.
// The allocator fakes are in tests/layers/fake_allocators.h.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "layers/config.h"
#include "layers/decoder_layer.h"
#include "layers/encoder_layer.h"
#include "layers/memory_planner.h"
#include "tests/layers/layer_params.h"

namespace seqbench::layers::layer_test {

// B·L <= 64 tokens, L <= 16, H = 12 in 3 heads, ffn 37 (odd), every dropout 0.1, fp16.
inline LayerConfig small_config() {
  LayerConfig c;
  c.max_batch_tokens = 64;
  c.max_seq_len = 16;
  c.hidden = 12;
  c.ffn = 37;
  c.heads = 3;
  c.attn_dropout = 0.1;
  c.activation_dropout = 0.1;
  c.hidden_dropout = 0.1;
  c.dtype = DType::f16;
  return c;
}

// The dry-run tests' variants: small_config() pre- or post-LN, with the probabilities' dropout
// attn_dropout; variant_name says which in the test's trace.
inline LayerConfig small_config(bool pre, double attn_dropout) {
  LayerConfig c = small_config();
  c.pre_layer_norm = pre;
  c.attn_dropout = attn_dropout;
  return c;
}
inline std::string variant_name(bool pre, double attn_dropout) {
  return std::string(pre ? "pre-LN" : "post-LN") + (attn_dropout > 0 ? ", attn dropout" : "");
}

// The names of a dry run's tensors.
inline std::set<std::string> names_of(const std::vector<TensorLifetime>& tensors) {
  std::set<std::string> names;
  for (const TensorLifetime& t : tensors) names.insert(t.name);
  return names;
}

// Weights and grads of an encoder or decoder layer (EncoderLayerWeights/Grads or
// DecoderLayerWeights/Grads), every pointer a distinct byte of `storage`, in the order of
// for_each_{encoder,decoder}_tensor: the weights first, then the grads.
template <class Weights, class Grads>
struct FakeLayerParams {
  std::vector<char> storage = std::vector<char>(64);
  Weights weights;
  Grads grads;

  FakeLayerParams() {
    int i = 0;
    for_each_layer_tensor(weights, [&](const char*, const void*& p) { p = storage.data() + i++; });
    for_each_layer_tensor(grads, [&](const char*, void*& p) { p = storage.data() + i++; });
  }
};

using FakeEncoderParams = FakeLayerParams<EncoderLayerWeights, EncoderLayerGrads>;
using FakeDecoderParams = FakeLayerParams<DecoderLayerWeights, DecoderLayerGrads>;

}  // namespace seqbench::layers::layer_test
