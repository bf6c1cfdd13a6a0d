// The embedding layer's experiments (Fig. 19: forward and backward, baseline vs managed, over
// sequence lengths; the contract in suites/suite_layers.h and suites/layers/README.md).
//
// Layer: layers_suite_embedding_config: vocab 32000, hidden 1024 (transformer-big; the tiny shapes'
// differ: suites/suite_layers.h), padding_idx 1,
// sinusoidal positions indexed by the non-padding count from position_offset 2 (fairseq's
// make_positions: padding_idx + 1), scale sqrt(1024) = 32, dropout = the layer config's hidden_dropout (0.3),
// deterministic (sorted) backward for the managed layer. Variants: "baseline"
// (BaselineEmbeddingLayer on a CachingAllocator: the unfused op sequence, uint8 mask, index_add_
// atomics) and "managed" (EmbeddingLayer: one fused forward kernel, the sorted backward).
// Inputs (fixed seeds): tokens uniform in [2, vocab) (mt19937_64, modulo), each sentence's tail
// padded: sentence b keeps L - p_b tokens, p_b uniform in [0, floor(2·kPadFraction·L)] (capped
// at L - 1), so about kPadFraction of the batch is padding; params.pad_fraction is the batch's
// exact share and `inputs.sentence_lengths` the kept lengths, for an outside runner. dy uniform in
// [-1, 1].
//
// Minimal bytes (the layer is memory-bound; flops 0), with N = B·L tokens, C of them not padding,
// D distinct non-padding token ids, s = sizeof(T), H = hidden:
//   forward   N·4 (tokens) + D·H·s (each needed token-table row read once; sinusoids are
//             computed, not read: the fused forward's per-launch table of L·H floats is written
//             and then read from L2; padded rows read nothing) + N·H·s (y written once)
//   backward  N·4 (tokens) + C·H·s (dy of the non-padding rows; padded rows send no gradient)
//             + vocab·H·s (d_token_table written once: the layer's contract overwrites the whole
//             table: the atomic variant zeroes it first, the sorted one writes the rows without a
//             gradient with zeros and the others with their sums; params.zero_fill_bytes = (vocab - D)·H·s of
//             it are the zero rows, for a reader who counts only the rows with a gradient)
// Not counted (above the minimum): the baseline's intermediates and uint8 mask, the managed
// layer's positions pre-pass, sinusoid table, sort arrays and partials.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_embedding_layer.h"
#include "layers/embedding_layer.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/layer_timing.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

namespace {

constexpr std::uint64_t kEmbeddingOffset = 0;

// The state of one timing experiment: inputs, the parameters, both layers and their allocators.
template <class T>
struct EmbeddingState : LayerPair<layers::EmbeddingLayer, layers::BaselineEmbeddingLayer> {
  DeviceBuffer<std::int32_t> tokens;
  DeviceBuffer<T> table, d_table, y, dy;
};

template <class T>
PreparedExperiment prepare_embedding(const layers::EmbeddingLayerConfig& c,
                                     const std::vector<std::int32_t>& tokens, std::int64_t B, std::int64_t L,
                                     bool backward) {
  auto st = std::make_shared<EmbeddingState<T>>();
  const auto n = static_cast<std::size_t>(B * L), h = static_cast<std::size_t>(c.embedding_dim);
  st->tokens = DeviceBuffer<std::int32_t>(tokens);
  st->table = DeviceBuffer<T>(static_cast<std::size_t>(c.vocab_size) * h);
  operators::check_util::fill(st->table, kParamSeed, -1.0f, 1.0f);
  st->d_table = DeviceBuffer<T>(static_cast<std::size_t>(c.vocab_size) * h);
  st->y = DeviceBuffer<T>(n * h);
  st->dy = DeviceBuffer<T>(n * h);
  operators::check_util::fill(st->dy, kInputSeed + 1, -1.0f, 1.0f);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const layers::EmbeddingLayerWeights w{st->table.data(), nullptr};
  const layers::EmbeddingLayerGrads g{st->d_table.data(), nullptr};
  st->managed = std::make_unique<layers::EmbeddingLayer>(c, w, g, st->managed_counter);
  st->baseline = std::make_unique<layers::BaselineEmbeddingLayer>(c, w, g, st->cache);
  EmbeddingState<T>* s = st.get();
  const auto ub = static_cast<std::size_t>(B), ul = static_cast<std::size_t>(L);
  // One run of each before timing also builds the sinusoid table.
  PreparedExperiment p = time_pair(
      {[s, ub, ul](cudaStream_t stream) {
         s->baseline->forward(s->y.data(), s->tokens.data(), ub, ul, kDropoutSeed, kEmbeddingOffset, stream);
       },
       [s, ub, ul](cudaStream_t stream) {
         s->managed->forward(s->y.data(), s->tokens.data(), ub, ul, kDropoutSeed, kEmbeddingOffset, stream);
       },
       [s](cudaStream_t stream, bool retain_graph) {
         s->baseline->backward(s->dy.data(), s->tokens.data(), stream, retain_graph);
       },
       [s](cudaStream_t stream) { s->managed->backward(s->dy.data(), s->tokens.data(), stream); },
       {},
       {}},
      backward);
  p.state = st;
  return p;
}

}  // namespace

layers::EmbeddingLayerConfig layers_suite_embedding_config(const LayersSuiteShapes& shapes, DType dtype,
                                                           int max_batch_tokens, int max_seq_len) {
  const layers::LayerConfig layer = layers_suite_config(shapes, dtype, max_batch_tokens, max_seq_len);
  layers::EmbeddingLayerConfig c;
  c.vocab_size = shapes.vocab;
  c.embedding_dim = layer.hidden;
  c.max_batch_tokens = max_batch_tokens;
  c.max_seq_len = max_seq_len;
  c.padding_idx = kLayersSuitePaddingIdx;
  c.dropout = layer.hidden_dropout;
  c.positions = kernels::PositionEncoding::sinusoidal;
  c.indexing = kernels::PositionIndexing::nonpad_count;
  c.position_offset = kLayersSuitePaddingIdx + 1;
  c.dtype = dtype;
  c.validate();
  return c;
}

std::vector<std::int64_t> layers_suite_sentence_lengths(std::int64_t batch, std::int64_t len,
                                                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto max_pad =
      static_cast<std::uint64_t>(std::floor(2.0 * kLayersSuitePadFraction * static_cast<double>(len)));
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(batch));
  for (auto& kept : lengths) {
    const auto pad = static_cast<std::int64_t>(rng() % (max_pad + 1));
    kept = std::max<std::int64_t>(1, len - pad);
  }
  return lengths;
}

std::vector<std::int32_t> layers_suite_tokens_with_padding(const std::vector<std::int64_t>& lengths,
                                                           std::int64_t len, int vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> tokens;
  tokens.reserve(lengths.size() * static_cast<std::size_t>(len));
  const auto span = static_cast<std::uint64_t>(vocab - kLayersSuitePaddingIdx - 1);
  for (const std::int64_t kept : lengths)
    for (std::int64_t l = 0; l < len; ++l)
      tokens.push_back(l < kept ? static_cast<std::int32_t>(kLayersSuitePaddingIdx + 1 +
                                                            static_cast<std::int64_t>(rng() % span))
                                : kLayersSuitePaddingIdx);
  return tokens;
}

namespace {

ExperimentSpec embedding_experiment(const LayersSuiteShapes& shapes, DType dtype, int L, bool backward) {
  const layers::EmbeddingLayerConfig c =
      layers_suite_embedding_config(shapes, dtype, shapes.tokens, shapes.lengths.back());
  const std::int64_t B = shapes.tokens / L, N = B * L;
  const std::vector<std::int64_t> lengths = layers_suite_sentence_lengths(B, L, kInputSeed);
  const std::vector<std::int32_t> host_tokens =
      layers_suite_tokens_with_padding(lengths, L, c.vocab_size, kInputSeed + 2);
  std::set<std::int32_t> distinct;
  std::int64_t counted = 0;
  for (const std::int32_t t : host_tokens) {
    if (t == c.padding_idx) continue;
    ++counted;
    distinct.insert(t);
  }
  const double s = static_cast<double>(dtype_size(dtype)), H = c.embedding_dim, V = c.vocab_size;
  const double D = static_cast<double>(distinct.size()), C = static_cast<double>(counted),
               n = static_cast<double>(N);
  // Minimal bytes: see the top of this file.
  const double bytes = backward ? n * 4 + C * H * s + V * H * s : n * 4 + D * H * s + n * H * s;
  const double pad_fraction = std::round((n - C) / n * 1e6) / 1e6;

  ExperimentSpec e = layer_experiment("embedding", dtype, B, L, backward, bytes, 0.0);
  e.params.update({{"vocab", c.vocab_size},
                   {"hidden", c.embedding_dim},
                   {"padding_idx", c.padding_idx},
                   {"positions", "sinusoidal"},
                   {"indexing", "nonpad_count"},
                   {"position_offset", c.position_offset},
                   {"scale", c.effective_scale()},
                   {"dropout", c.dropout},
                   {"deterministic_backward", true},
                   {"pad_fraction", pad_fraction},
                   {"nonpad_tokens", counted},
                   {"distinct_token_rows", distinct.size()},
                   {"zero_fill_bytes", backward ? (V - D) * H * s : 0.0},
                   {"max_batch_tokens", c.max_batch_tokens},
                   {"max_seq_len", c.max_seq_len}});
  e.inputs = {{"sentence_lengths", lengths}};
  e.prepare = [c, host_tokens, B, L, backward] {
    return dispatch_dtype(
        c.dtype, [&](auto tag) { return prepare_embedding<decltype(tag)>(c, host_tokens, B, L, backward); });
  };
  if (shapes.dumps) enable_layer_dump(e);  // dump.cu: a dropout-free parity instance, for `seqbench dump`
  return e;
}

}  // namespace

void add_embedding_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  add_layer_sweep(suite, options, embedding_experiment);
}

}  // namespace seqbench::layer_experiments
