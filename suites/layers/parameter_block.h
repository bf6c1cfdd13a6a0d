// One layer's parameters and gradients for the layers suite: two device buffers laid out in the
// order of the layer's parameter shapes (layers/layer_run.h ParameterShape), parameters drawn so
// that activations stay realistic and nothing overflows in f16:
//   matrices [out, in]  U(-1/√in, 1/√in)   (unit-gain projections)
//   LayerNorm gammas    U(0.5, 1.5)
//   other vectors       U(-0.05, 0.05)      (biases, betas)
// Gradients start at zero. offsets[i] is tensor i's element offset in both buffers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "layers/decoder_layer.h"
#include "layers/encoder_layer.h"
#include "layers/layer_run.h"
#include "suites/layers/layer_experiments.h"
#include "suites/operators/check_util.h"

namespace seqbench::layer_experiments {

template <class T>
struct ParameterBlock {
  DeviceBuffer<T> params, grads;
  std::vector<std::size_t> offsets;

  ParameterBlock(const std::vector<layers::ParameterShape>& shapes, std::uint64_t seed) {
    std::size_t total = 0;
    for (const auto& s : shapes) total += s.elements();
    params = DeviceBuffer<T>(total);
    grads = DeviceBuffer<T>(total);
    grads.fill_bytes(0);
    std::size_t offset = 0, i = 0;
    for (const auto& s : shapes) {
      offsets.push_back(offset);
      const bool gamma = s.name.find("gamma") != std::string::npos;
      const float r = s.rows > 1 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.cols))) : 0.05f;
      const std::vector<T> host = operators::check_util::random_values<T>(
          s.elements(), seed + i++, gamma ? 0.5f : -r, gamma ? 1.5f : r);
      SEQBENCH_CUDA_CHECK(
          cudaMemcpy(params.data() + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
      offset += s.elements();
    }
  }

  T* param(std::size_t i) { return params.data() + offsets.at(i); }
  T* grad(std::size_t i) { return grads.data() + offsets.at(i); }

  // Points a layer's weight and gradient views at this block, tensor i at offsets[i]: for_each is
  // the layer's visitor (for_each_encoder_tensor, ...), called as for_each(views, fn), which visits
  // the tensors in the order of the parameter shapes the block was built from.
  template <class Weights, class Grads, class ForEach>
  void bind(Weights& weights, Grads& grad_views, ForEach&& for_each) {
    std::size_t i = 0;
    for_each(weights, [&](const char*, const void*& p) { p = param(i++); });
    i = 0;
    for_each(grad_views, [&](const char*, void*& p) { p = grad(i++); });
  }
};

// The visitors bind() takes, as callables (the layers' for_each_* are function templates).
inline constexpr auto kEncoderTensors = [](auto& views, auto&& fn) {
  layers::for_each_encoder_tensor(views, fn);
};
inline constexpr auto kDecoderTensors = [](auto& views, auto&& fn) {
  layers::for_each_decoder_tensor(views, fn);
};

// The hidden-state activations every encoder and decoder experiment runs on: x and dy [rows, H]
// drawn U(-1, 1) with seeds kInputSeed and kInputSeed + 1, y and dx not initialised. An
// experiment's data derives from it and adds its parameters (and, for the decoder, the encoder
// side).
template <class T>
struct LayerActivations {
  DeviceBuffer<T> x, y, dy, dx;

  LayerActivations(std::size_t rows, int hidden)
      : x(rows * static_cast<std::size_t>(hidden)),
        y(rows * static_cast<std::size_t>(hidden)),
        dy(rows * static_cast<std::size_t>(hidden)),
        dx(rows * static_cast<std::size_t>(hidden)) {
    operators::check_util::fill(x, kInputSeed, -1.0f, 1.0f);
    operators::check_util::fill(dy, kInputSeed + 1, -1.0f, 1.0f);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

}  // namespace seqbench::layer_experiments
