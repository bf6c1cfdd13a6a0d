// The encoder and decoder layers' parameter views in the layer tests (CPU and GPU): one visitor
// for either layer's tensors, and the views of parameters packed back to back in one buffer (the
// GPU tests' device buffers, LightSeq2's layout). Host code only.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "layers/decoder_layer.h"
#include "layers/encoder_layer.h"
#include "layers/layer_run.h"

namespace seqbench::layers::layer_test {

// for_each_encoder_tensor or for_each_decoder_tensor, by the type of `t` (weights or grads).
template <class Tensors, class Fn>
void for_each_layer_tensor(Tensors& t, Fn&& fn) {
  using P = std::remove_cvref_t<decltype(t.fc2_bias)>;
  if constexpr (std::is_same_v<std::remove_const_t<Tensors>, EncoderLayerTensors<P>>) {
    for_each_encoder_tensor(t, fn);
  } else {
    static_assert(std::is_same_v<std::remove_const_t<Tensors>, DecoderLayerTensors<P>>,
                  "for_each_layer_tensor: EncoderLayerTensors or DecoderLayerTensors");
    for_each_decoder_tensor(t, fn);
  }
}

// Tensor i's start in one buffer holding `shapes` back to back; `total` gets the element count.
inline std::vector<std::size_t> packed_offsets(const std::vector<ParameterShape>& shapes,
                                               std::size_t& total) {
  total = 0;
  std::vector<std::size_t> offsets;
  for (const ParameterShape& sh : shapes) {
    offsets.push_back(total);
    total += sh.elements();
  }
  return offsets;
}

// Points the i-th tensor (in the for_each order) of `weights` at params + offsets[i] and of
// `grads` at grad_buffer + offsets[i].
template <class Weights, class Grads, class T>
void point_views(Weights& weights, Grads& grads, const T* params, T* grad_buffer,
                 const std::vector<std::size_t>& offsets) {
  std::size_t i = 0;
  for_each_layer_tensor(weights, [&](const char*, const void*& p) { p = params + offsets[i++]; });
  i = 0;
  for_each_layer_tensor(grads, [&](const char*, void*& p) { p = grad_buffer + offsets[i++]; });
}

}  // namespace seqbench::layers::layer_test
