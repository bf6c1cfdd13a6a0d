// ParameterRanges: the byte ranges of a layer's (or a stack's) parameter and gradient views, for
// the checks that keep the caller's tensors and the gradients apart from them. A layer reads its
// weights and x in the forward and again in the backward, and writes y, dx and the gradients at
// different steps, so an overlap no single kernel can see gives silently wrong results: y on top
// of a weight the backward reads, a gradient on top of x or dy, two gradient views sharing bytes
// (a wrong offset into a flat gradient buffer). The rules:
//   - no gradient overlaps another gradient or a weight (checked once, at construction);
//   - a caller tensor the layer writes (y, dx, d_encoder_out) overlaps no weight and no gradient;
//   - a caller tensor the layer reads (x, dy, encoder_out) overlaps no gradient.
// Weights may overlap each other (both only read: tied weights are the caller's business).
// Null pointers and empty tensors are skipped. Host only; every check throws seqbench::Error
// naming both tensors and their sizes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "layers/layer_run.h"

namespace seqbench::layers {

class ParameterRanges {
 public:
  // `layer` leads every message ("EncoderLayer").
  explicit ParameterRanges(std::string layer) : layer_(std::move(layer)) {}

  // `name` as the messages show it ("weights.fc1_bias", "layer 2 grads.fc1_bias").
  void add(std::string name, const void* p, std::size_t bytes, bool gradient);

  // Adds one layer's views: for_each(weights / grads, fn(name, pointer)) in the order of `shapes`,
  // each `element_bytes` per element; `label` prefixes the names ("layer 2 ").
  template <class Weights, class Grads, class ForEach>
  void add_layer(const std::vector<ParameterShape>& shapes, std::size_t element_bytes, const Weights& weights,
                 const Grads& grads, ForEach&& for_each, const std::string& label = "") {
    std::size_t i = 0;
    Weights w = weights;
    for_each(w, [&](const char* name, const void* p) {
      add(label + "weights." + name, p, bytes_of(shapes, i++, element_bytes), false);
    });
    i = 0;
    Grads g = grads;
    for_each(g, [&](const char* name, void* p) {
      add(label + "grads." + name, p, bytes_of(shapes, i++, element_bytes), true);
    });
  }

  // The construction rule: no gradient overlaps another gradient or a weight.
  void require_gradients_disjoint() const;
  // A caller tensor the layer writes: overlaps no weight and no gradient.
  void require_written_clear(const char* where, const char* what, const void* p, std::size_t bytes) const;
  // A caller tensor the layer reads: overlaps no gradient.
  void require_read_clear(const char* where, const char* what, const void* p, std::size_t bytes) const;

  std::size_t size() const { return ranges_.size(); }

 private:
  struct Range {
    std::string name;
    const void* p = nullptr;
    std::size_t bytes = 0;
    bool gradient = false;
  };
  static std::size_t bytes_of(const std::vector<ParameterShape>& shapes, std::size_t i,
                              std::size_t element_bytes);
  void require_clear(const char* where, const char* what, const void* p, std::size_t bytes,
                     bool weights_too) const;

  std::string layer_;
  std::vector<Range> ranges_;
};

}  // namespace seqbench::layers
