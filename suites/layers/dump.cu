// `seqbench dump` for the layer experiments (issue #6): the inputs and outputs of separate parity
// instances of the managed layers, for suites/pytorch's parity oracle (seqbench_torch/parity_layers.py).
//
// Why a separate instance: the layers draw their dropout masks inside fused kernels (softmax +
// dropout, bias + act + dropout, ...) from Philox streams that torch cannot reproduce, and no mask
// is stored. So the dump does not copy the timed layers; it builds the managed layer again with
// every dropout ratio 0 (params.parity_dropout = 0), at kLayersParityTokens tokens (parity_batch =
// max(1, 1024 / L) sentences of the experiment's L, the decoder's S = L: a torch fp32 oracle of
// transformer-big at 8192 tokens, and criterion logits of 8192 × 32000 in f32, would make dumps of
// gigabytes), once in the experiment's dtype and once in f32 (parity_dtypes), with the timing
// experiments' seeds, ranges and padding rules, and runs forward (and for _bwd experiments
// backward). What is dumped, per instance dtype D, each array named "D.<name>":
//   encoder    inputs  x [B, L, H], every parameter by its name in encoder_layer_parameter_shapes
//                      ([rows, cols], vectors [cols]); bwd: dy [B, L, H]
//              outputs y [B, L, H]; bwd: dx, and d_<name> for every parameter
//   decoder    the encoder's with encoder_out [B, S, H] (input) and d_encoder_out (bwd output)
//   embedding  inputs  tokens i32 [B, L] (tail-padded as the experiments are), token_table [V, H];
//                      bwd: dy [B, L, H]
//              outputs y [B, L, H]; bwd: d_token_table [V, H]
//   criterion  inputs  logits [B·L, V], targets i32 [B·L]
//              outputs loss, nll, lse f32 [B·L], loss_sum, nll_sum f32 [1], counted_tokens i32 [1];
//                      bwd: dlogits [B·L, V] for grad_loss_sum = 1
// ReLU's kink. The encoder and decoder instances (ReLU, as transformer-big) have their fc1 bias
// moved off the kink before they run (center_fc1_bias below, reference/relu_centering.h): else
// pre-activations within rounding of 0 take opposite signs in seqbench and in torch, and move fc1's
// gradients by O(1) (measured on the CPU executor: d_fc1_weight at 0.77 of its f16 bound, f32 at
// 1e-3 where rounding gives 1e-6). The dumped fc1_bias is the centered one, so torch sees the same.
// The manifest's params.parity_relu_margin gives, per instance dtype, the margin achieved: the
// smallest |pre-activation| relative to its column's scale (compare it with u_T: 1024 rows leave
// gaps of a few u_T, so flips become rare, not impossible).
// The timed experiment is neither prepared nor run for the dump (ExperimentSpec::dump_standalone).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "layers/criterion_layer.h"
#include "layers/decoder_layer.h"
#include "layers/device_allocator.h"
#include "layers/embedding_layer.h"
#include "layers/encoder_layer.h"
#include "reference/layernorm.h"
#include "reference/relu_centering.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/parameter_block.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

namespace {

// What the parity instance of one experiment is: the layer, its direction and shape, and the dtypes.
struct ParitySpec {
  std::string layer;
  bool backward = false;
  DType dtype = DType::f16;  // the experiment's
  std::int64_t batch = 0, seq_len = 0;
  std::vector<DType> dtypes;  // the experiment's, then f32 (once, for an f32 experiment)
};

ParitySpec parity_spec(const nlohmann::json& params) {
  ParitySpec s;
  s.layer = params.at("layer").get<std::string>();
  SEQBENCH_REQUIRE(
      s.layer == "encoder" || s.layer == "decoder" || s.layer == "embedding" || s.layer == "criterion",
      "layers dump: params.layer '" << s.layer << "' is not one of encoder, decoder, embedding, criterion");
  const std::string direction = params.at("direction").get<std::string>();
  SEQBENCH_REQUIRE(direction == "fwd" || direction == "bwd",
                   "layers dump: params.direction '" << direction << "' is not fwd or bwd");
  s.backward = direction == "bwd";
  s.dtype = parse_dtype(params.at("dtype").get<std::string>());
  s.seq_len = params.at("seq_len").get<std::int64_t>();
  SEQBENCH_REQUIRE(s.seq_len >= 1, "layers dump: params.seq_len " << s.seq_len << " is not positive");
  s.batch = layers_parity_batch(s.seq_len);
  s.dtypes = {s.dtype};
  if (s.dtype != DType::f32) s.dtypes.push_back(DType::f32);
  return s;
}

// The parity configs: the suite's, at the parity shape, every dropout 0.
layers::LayerConfig parity_layer_config(DType dtype, std::int64_t batch, std::int64_t seq_len) {
  layers::LayerConfig c = layers_suite_config(layers_suite_shapes(SuiteOptions{}), dtype,
                                              static_cast<int>(batch * seq_len), static_cast<int>(seq_len));
  c.attn_dropout = c.activation_dropout = c.hidden_dropout = 0.0;
  c.validate();
  return c;
}

layers::EmbeddingLayerConfig parity_embedding_config(DType dtype, std::int64_t batch, std::int64_t seq_len) {
  layers::EmbeddingLayerConfig c =
      layers_suite_embedding_config(layers_suite_shapes(SuiteOptions{}), dtype,
                                    static_cast<int>(batch * seq_len), static_cast<int>(seq_len));
  c.dropout = 0.0;
  c.validate();
  return c;
}

std::string prefix_of(DType dtype) {
  return std::string(dtype_name(dtype)) + ".";
}

DumpArray layout_array(std::string name, std::string role, DType dtype, std::vector<std::int64_t> shape) {
  return DumpArray{std::move(name), std::move(role), dtype, std::move(shape), {}, {}};
}

DumpArray layout_int(std::string name, std::string role, const char* int_type,
                     std::vector<std::int64_t> shape) {
  return DumpArray{std::move(name), std::move(role), DType::f32, std::move(shape), {}, int_type};
}

std::vector<std::int64_t> parameter_dims(const layers::ParameterShape& s) {
  if (s.rows == 1) return {static_cast<std::int64_t>(s.cols)};
  return {static_cast<std::int64_t>(s.rows), static_cast<std::int64_t>(s.cols)};
}

// One instance's arrays (names without the dtype prefix), inputs first.
std::vector<DumpArray> instance_layout(const ParitySpec& s, DType d) {
  const std::int64_t B = s.batch, L = s.seq_len, N = B * L;
  std::vector<DumpArray> in, out;
  if (s.layer == "encoder" || s.layer == "decoder") {
    const layers::LayerConfig c = parity_layer_config(d, B, L);
    const std::int64_t H = c.hidden;
    const std::vector<layers::ParameterShape> shapes = s.layer == "encoder"
                                                           ? layers::encoder_layer_parameter_shapes(c)
                                                           : layers::decoder_layer_parameter_shapes(c);
    in.push_back(layout_array("x", "input", d, {B, L, H}));
    if (s.layer == "decoder") in.push_back(layout_array("encoder_out", "input", d, {B, L, H}));  // S = L
    for (const auto& p : shapes) in.push_back(layout_array(p.name, "input", d, parameter_dims(p)));
    out.push_back(layout_array("y", "output", d, {B, L, H}));
    if (s.backward) {
      in.push_back(layout_array("dy", "input", d, {B, L, H}));
      out.push_back(layout_array("dx", "output", d, {B, L, H}));
      if (s.layer == "decoder") out.push_back(layout_array("d_encoder_out", "output", d, {B, L, H}));
      for (const auto& p : shapes) out.push_back(layout_array("d_" + p.name, "output", d, parameter_dims(p)));
    }
  } else if (s.layer == "embedding") {
    const layers::EmbeddingLayerConfig c = parity_embedding_config(d, B, L);
    const std::int64_t H = c.embedding_dim;
    in.push_back(layout_int("tokens", "input", "i32", {B, L}));
    const std::vector<layers::ParameterShape> shapes = layers::embedding_layer_parameter_shapes(c);
    for (const auto& p : shapes) in.push_back(layout_array(p.name, "input", d, parameter_dims(p)));
    out.push_back(layout_array("y", "output", d, {B, L, H}));
    if (s.backward) {
      in.push_back(layout_array("dy", "input", d, {B, L, H}));
      for (const auto& p : shapes) out.push_back(layout_array("d_" + p.name, "output", d, parameter_dims(p)));
    }
  } else {
    const std::int64_t V = kLayersSuiteVocab;
    in.push_back(layout_array("logits", "input", d, {N, V}));
    in.push_back(layout_int("targets", "input", "i32", {N}));
    for (const char* name : {"loss", "nll", "lse"})
      out.push_back(layout_array(name, "output", DType::f32, {N}));
    out.push_back(layout_array("loss_sum", "output", DType::f32, {1}));
    out.push_back(layout_array("nll_sum", "output", DType::f32, {1}));
    out.push_back(layout_int("counted_tokens", "output", "i32", {1}));
    if (s.backward) out.push_back(layout_array("dlogits", "output", d, {N, V}));
  }
  in.insert(in.end(), std::make_move_iterator(out.begin()), std::make_move_iterator(out.end()));
  return in;
}

std::size_t element_bytes(const DumpArray& a) {
  if (a.int_type == "u8") return 1;
  if (a.int_type == "i32") return 4;
  return dtype_size(a.dtype);
}

std::size_t array_bytes(const DumpArray& a) {
  std::size_t n = element_bytes(a);
  for (const std::int64_t d : a.shape) n *= static_cast<std::size_t>(d);
  return n;
}

// Device pointers by array name (without the dtype prefix), copied into the layout's arrays.
class DeviceSources {
 public:
  void add(const std::string& name, const void* device, std::size_t bytes) {
    SEQBENCH_REQUIRE(sources_.emplace(name, std::make_pair(device, bytes)).second,
                     "layers dump: source '" << name << "' added twice");
  }
  template <class T>
  void add(const std::string& name, const DeviceBuffer<T>& buffer) {
    add(name, buffer.data(), buffer.size() * sizeof(T));
  }
  // Fills every array of `arrays` whose name starts with `prefix` (synchronous copies).
  void fill(std::vector<DumpArray>& arrays, const std::string& prefix) const {
    for (DumpArray& a : arrays) {
      if (a.name.rfind(prefix, 0) != 0) continue;
      const std::string key = a.name.substr(prefix.size());
      const auto it = sources_.find(key);
      SEQBENCH_REQUIRE(it != sources_.end(), "layers dump: no device source for array '" << a.name << "'");
      const std::size_t bytes = array_bytes(a);
      SEQBENCH_REQUIRE(it->second.second == bytes, "layers dump: array '" << a.name << "' needs " << bytes
                                                                          << " bytes, its source holds "
                                                                          << it->second.second);
      a.bytes.resize(bytes);
      if (bytes > 0)
        SEQBENCH_CUDA_CHECK(cudaMemcpy(a.bytes.data(), it->second.first, bytes, cudaMemcpyDeviceToHost));
    }
  }

 private:
  std::map<std::string, std::pair<const void*, std::size_t>> sources_;
};

// The parameters of a parity instance (ParameterBlock, the timing experiments' seed) as sources.
template <class T>
void add_parameters(DeviceSources& src, ParameterBlock<T>& block,
                    const std::vector<layers::ParameterShape>& shapes, bool grads) {
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    src.add(shapes[i].name, block.param(i), shapes[i].elements() * sizeof(T));
    if (grads) src.add("d_" + shapes[i].name, block.grad(i), shapes[i].elements() * sizeof(T));
  }
}

std::size_t tensor_index(const std::vector<layers::ParameterShape>& shapes, const std::string& name) {
  for (std::size_t i = 0; i < shapes.size(); ++i)
    if (shapes[i].name == name) return i;
  SEQBENCH_FAIL("layers dump: the layer has no parameter '" << name << "'");
}

template <class T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> host(n);
  if (n > 0) SEQBENCH_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// Moves the fc1 bias in `block` off ReLU's kink (reference/relu_centering.h) and returns the margin.
// The FFN's input x1 comes from an auxiliary forward of the same layer (forward(y), on `block`'s
// views) with fc2's weight and bias set to 0 for it and restored after: in a pre-LN layer
// y = x1 + fc2(act(fc1(LN(x1)))) + b2 is then x1 exactly, the x1 of the real run (no sub-layer
// before the FFN reads fc2). The host
// forms LN_ffn(x1)·W1ᵀ in double and picks the biases; they are rounded to T as the layer stores
// them. A post-LN layer's y = LN(x1 + ...) does not give x1 back: refused, naming the field.
template <class T, class Forward>
double center_fc1_bias(const layers::LayerConfig& c, ParameterBlock<T>& block,
                       const std::vector<layers::ParameterShape>& shapes, std::size_t rows,
                       Forward&& forward) {
  SEQBENCH_REQUIRE(c.pre_layer_norm,
                   "layers dump: centering the ReLU bias needs a pre-LN layer (pre_layer_norm "
                   "is false: its output does not give the FFN's input back)");
  const std::size_t H = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.ffn);
  const std::size_t gamma = tensor_index(shapes, "ffn_ln_gamma"), beta = tensor_index(shapes, "ffn_ln_beta");
  const std::size_t w1 = tensor_index(shapes, "fc1_weight"), b1 = tensor_index(shapes, "fc1_bias");
  const std::size_t w2 = tensor_index(shapes, "fc2_weight"), b2 = tensor_index(shapes, "fc2_bias");
  DeviceBuffer<T> x1(rows * H);
  {
    DeviceBuffer<T> saved_w2(shapes[w2].elements()), saved_b2(shapes[b2].elements());
    const auto swap_out = [&](std::size_t i, DeviceBuffer<T>& saved) {
      SEQBENCH_CUDA_CHECK(
          cudaMemcpy(saved.data(), block.param(i), saved.size() * sizeof(T), cudaMemcpyDeviceToDevice));
      SEQBENCH_CUDA_CHECK(cudaMemset(block.param(i), 0, saved.size() * sizeof(T)));  // +0 in every T
    };
    swap_out(w2, saved_w2);
    swap_out(b2, saved_b2);
    forward(x1);
    SEQBENCH_CUDA_CHECK(
        cudaMemcpy(block.param(w2), saved_w2.data(), saved_w2.size() * sizeof(T), cudaMemcpyDeviceToDevice));
    SEQBENCH_CUDA_CHECK(
        cudaMemcpy(block.param(b2), saved_b2.data(), saved_b2.size() * sizeof(T), cudaMemcpyDeviceToDevice));
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  namespace cu = operators::check_util;
  const auto r = static_cast<ref::Index>(rows), h = static_cast<ref::Index>(H),
             f = static_cast<ref::Index>(F);
  const ref::Matrix fc1_input =
      ref::layernorm_forward(cu::to_matrix(to_host(x1.data(), rows * H), r, h),
                             cu::to_vector(to_host(block.param(gamma), H)),
                             cu::to_vector(to_host(block.param(beta), H)), c.layer_norm_eps)
          .y;
  const ref::ReluBiasCentering centered = ref::center_relu_bias(
      fc1_input, cu::to_matrix(to_host(block.param(w1), F * H), f, h),
      [](double b) { return static_cast<double>(to_float(from_float<T>(static_cast<float>(b)))); });
  std::vector<T> bias(F);
  for (std::size_t j = 0; j < F; ++j)
    bias[j] = from_float<T>(static_cast<float>(centered.bias(static_cast<ref::Index>(j))));
  SEQBENCH_CUDA_CHECK(cudaMemcpy(block.param(b1), bias.data(), F * sizeof(T), cudaMemcpyHostToDevice));
  return centered.margin;
}

template <class T>
double run_encoder(const ParitySpec& s, DType d, std::vector<DumpArray>& arrays) {
  const layers::LayerConfig c = parity_layer_config(d, s.batch, s.seq_len);
  const std::vector<layers::ParameterShape> shapes = layers::encoder_layer_parameter_shapes(c);
  ParameterBlock<T> block(shapes, kParamSeed);
  layers::EncoderLayerWeights w;
  layers::EncoderLayerGrads g;
  block.bind(w, g, kEncoderTensors);
  LayerActivations<T> a(static_cast<std::size_t>(s.batch * s.seq_len), c.hidden);
  auto& [x, y, dy, dx] = a;
  double margin = INFINITY;
  if (c.activation == layers::Activation::relu)
    margin = center_fc1_bias(
        c, block, shapes, a.x.size() / static_cast<std::size_t>(c.hidden), [&](DeviceBuffer<T>& out) {
          layers::CudaAllocator cuda;
          layers::EncoderLayer layer(c, w, g, cuda);
          layer.forward(out.data(), a.x.data(), static_cast<std::size_t>(s.batch),
                        static_cast<std::size_t>(s.seq_len), nullptr, kDropoutSeed, 0, nullptr);
          SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
        });
  {
    layers::CudaAllocator cuda;
    layers::EncoderLayer layer(c, w, g, cuda);
    layer.forward(y.data(), x.data(), static_cast<std::size_t>(s.batch), static_cast<std::size_t>(s.seq_len),
                  nullptr, kDropoutSeed, 0, nullptr);
    if (s.backward) layer.backward(dx.data(), dy.data(), x.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  DeviceSources src;
  src.add("x", x);
  src.add("y", y);
  src.add("dy", dy);
  src.add("dx", dx);
  add_parameters(src, block, shapes, true);
  src.fill(arrays, prefix_of(d));
  return margin;
}

template <class T>
double run_decoder(const ParitySpec& s, DType d, std::vector<DumpArray>& arrays) {
  const layers::LayerConfig c = parity_layer_config(d, s.batch, s.seq_len);
  const std::vector<layers::ParameterShape> shapes = layers::decoder_layer_parameter_shapes(c);
  ParameterBlock<T> block(shapes, kParamSeed);
  layers::DecoderLayerWeights w;
  layers::DecoderLayerGrads g;
  block.bind(w, g, kDecoderTensors);
  const auto b = static_cast<std::size_t>(s.batch), l = static_cast<std::size_t>(s.seq_len);
  LayerActivations<T> a(b * l, c.hidden);
  auto& [x, y, dy, dx] = a;
  const std::size_t n = b * l * static_cast<std::size_t>(c.hidden);  // S = L: encoder_out has n too
  DeviceBuffer<T> enc(n), denc(n);
  operators::check_util::fill(enc, kInputSeed + 2, -1.0f, 1.0f);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  double margin = INFINITY;
  if (c.activation == layers::Activation::relu)
    margin = center_fc1_bias(c, block, shapes, b * l, [&](DeviceBuffer<T>& out) {
      layers::CudaAllocator cuda;
      layers::DecoderLayer layer(c, w, g, cuda);
      layer.forward(out.data(), a.x.data(), enc.data(), b, l, l, nullptr, nullptr, kDropoutSeed, 0, nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    });
  {
    layers::CudaAllocator cuda;
    layers::DecoderLayer layer(c, w, g, cuda);
    layer.forward(y.data(), x.data(), enc.data(), b, l, l, nullptr, nullptr, kDropoutSeed, 0, nullptr);
    if (s.backward) layer.backward(dx.data(), denc.data(), dy.data(), x.data(), enc.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  DeviceSources src;
  src.add("x", x);
  src.add("encoder_out", enc);
  src.add("y", y);
  src.add("dy", dy);
  src.add("dx", dx);
  src.add("d_encoder_out", denc);
  add_parameters(src, block, shapes, true);
  src.fill(arrays, prefix_of(d));
  return margin;
}

template <class T>
void run_embedding(const ParitySpec& s, DType d, std::vector<DumpArray>& arrays) {
  const layers::EmbeddingLayerConfig c = parity_embedding_config(d, s.batch, s.seq_len);
  const std::vector<std::int64_t> lengths = layers_suite_sentence_lengths(s.batch, s.seq_len, kInputSeed);
  const DeviceBuffer<std::int32_t> tokens(
      layers_suite_tokens_with_padding(lengths, s.seq_len, c.vocab_size, kInputSeed + 2));
  const std::size_t h = static_cast<std::size_t>(c.embedding_dim);
  const std::size_t n = static_cast<std::size_t>(s.batch * s.seq_len) * h;
  const std::size_t table_n = static_cast<std::size_t>(c.vocab_size) * h;
  DeviceBuffer<T> table(table_n), d_table(table_n), y(n), dy(n);
  operators::check_util::fill(table, kParamSeed, -1.0f, 1.0f);
  operators::check_util::fill(dy, kInputSeed + 1, -1.0f, 1.0f);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  {
    layers::CudaAllocator cuda;
    layers::EmbeddingLayer layer(c, layers::EmbeddingLayerWeights{table.data(), nullptr},
                                 layers::EmbeddingLayerGrads{d_table.data(), nullptr}, cuda);
    layer.forward(y.data(), tokens.data(), static_cast<std::size_t>(s.batch),
                  static_cast<std::size_t>(s.seq_len), kDropoutSeed, 0, nullptr);
    if (s.backward) layer.backward(dy.data(), tokens.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  DeviceSources src;
  src.add("tokens", tokens);
  src.add("token_table", table);
  src.add("d_token_table", d_table);
  src.add("y", y);
  src.add("dy", dy);
  src.fill(arrays, prefix_of(d));
}

template <class T>
void run_criterion(const ParitySpec& s, DType d, std::vector<DumpArray>& arrays) {
  const layers::CriterionLayerConfig c =
      layers_suite_criterion_config(d, static_cast<int>(s.batch * s.seq_len));
  const std::int64_t rows = s.batch * s.seq_len, V = kLayersSuiteVocab;
  const std::vector<std::int64_t> lengths = layers_suite_sentence_lengths(s.batch, s.seq_len, kInputSeed);
  const DeviceBuffer<std::int32_t> targets(
      layers_suite_tokens_with_padding(lengths, s.seq_len, kLayersSuiteVocab, kInputSeed + 4));
  const std::size_t n = static_cast<std::size_t>(rows * V);
  DeviceBuffer<T> logits(n), dlogits(n);
  operators::check_util::fill(logits, kInputSeed + 3, -4.0f, 4.0f);  // criterion.cu's kLogitRange
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  layers::CudaAllocator cuda;
  layers::CriterionLayer layer(c, cuda);
  const layers::CriterionOutputs out = layer.forward(logits.data(), targets.data(), rows, V, nullptr);
  if (s.backward) layer.backward(dlogits.data(), logits.data(), targets.data(), 1.0f, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto urows = static_cast<std::size_t>(rows) * sizeof(float);
  const auto* totals = reinterpret_cast<const unsigned char*>(out.totals);  // a device address
  DeviceSources src;
  src.add("logits", logits);
  src.add("targets", targets);
  src.add("dlogits", dlogits);
  src.add("loss", out.loss, urows);
  src.add("nll", out.nll, urows);
  src.add("lse", out.lse, urows);
  src.add("loss_sum", totals + offsetof(kernels::CrossEntropyTotals, loss_sum), sizeof(float));
  src.add("nll_sum", totals + offsetof(kernels::CrossEntropyTotals, nll_sum), sizeof(float));
  src.add("counted_tokens", totals + offsetof(kernels::CrossEntropyTotals, tokens), sizeof(std::int32_t));
  src.fill(arrays, prefix_of(d));  // before the layer (which owns loss, nll, lse, totals) goes
}

// manifest_params gets parity_relu_margin {dtype: margin} for a ReLU encoder or decoder instance.
std::vector<DumpArray> run_parity(const nlohmann::json& params, nlohmann::json& manifest_params) {
  const ParitySpec s = parity_spec(params);
  std::vector<DumpArray> arrays = layer_parity_layout(params);
  nlohmann::json margins = nlohmann::json::object();
  for (const DType d : s.dtypes) {
    dispatch_dtype(d, [&](auto tag) {
      using T = decltype(tag);
      double margin = INFINITY;
      if (s.layer == "encoder")
        margin = run_encoder<T>(s, d, arrays);
      else if (s.layer == "decoder")
        margin = run_decoder<T>(s, d, arrays);
      else if (s.layer == "embedding")
        run_embedding<T>(s, d, arrays);
      else
        run_criterion<T>(s, d, arrays);
      if (std::isfinite(margin)) margins[std::string(dtype_name(d))] = margin;
    });
  }
  if (!margins.empty()) manifest_params["parity_relu_margin"] = margins;
  for (const DumpArray& a : arrays)
    SEQBENCH_REQUIRE(a.bytes.size() == array_bytes(a),
                     "layers dump: array '" << a.name << "' was not filled");
  return arrays;
}

}  // namespace

std::int64_t layers_parity_batch(std::int64_t seq_len) {
  SEQBENCH_REQUIRE(seq_len >= 1, "layers_parity_batch: seq_len " << seq_len << " is not positive");
  return std::max<std::int64_t>(1, kLayersParityTokens / seq_len);
}

std::vector<DumpArray> layer_parity_layout(const nlohmann::json& params) {
  const ParitySpec s = parity_spec(params);
  std::vector<DumpArray> all;
  for (const DType d : s.dtypes)
    for (DumpArray& a : instance_layout(s, d)) {
      a.name = prefix_of(d) + a.name;
      all.push_back(std::move(a));
    }
  return all;
}

void enable_layer_dump(ExperimentSpec& e) {
  const ParitySpec s = parity_spec(e.params);
  e.dump_variant = "managed";
  nlohmann::json dtypes = nlohmann::json::array();
  for (const DType d : s.dtypes) dtypes.push_back(std::string(dtype_name(d)));
  e.dump_params = {{"parity_dropout", 0.0},
                   {"parity_batch", s.batch},
                   {"parity_seq_len", s.seq_len},
                   {"parity_tokens", s.batch * s.seq_len},
                   {"parity_dtypes", dtypes}};
  if (s.layer == "decoder") e.dump_params["parity_src_len"] = s.seq_len;
  // The parity instance is built and run on its own: preparing and running the timed experiment
  // first (as other families' dumps do) would cost a full-size forward and backward whose outputs
  // are not written.
  e.dump_standalone = [params = e.params](nlohmann::json& manifest_params) {
    return run_parity(params, manifest_params);
  };
}

}  // namespace seqbench::layer_experiments
