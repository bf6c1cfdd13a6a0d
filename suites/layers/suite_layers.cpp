// The layers suite: its shared helpers (config, lengths, FLOPs, the memory loop's shapes) and the
// assembly of the per-layer files in suites/layers/.
#include "suites/suite_layers.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "suites/layers/layer_experiments.h"

namespace seqbench {

using layers::LayerConfig;

LayersSuiteShapes layers_suite_shapes(const SuiteOptions& options) {
  LayersSuiteShapes s;
  if (options.tiny) {
    s.model = "tiny";
    s.hidden = 36;
    s.ffn = 68;
    s.heads = 4;
    s.tokens = 96;
    s.lengths = {13, 24};
    s.memory_steps = kMemoryStepsTiny;
    s.vocab = 1003;
    s.dumps = false;
    return s;
  }
  const LayerConfig big = layers::preset("transformer-big").layer;
  s.model = "transformer-big";
  s.hidden = big.hidden;
  s.ffn = big.ffn;
  s.heads = big.heads;
  s.tokens = options.quick ? 4096 : 8192;
  s.lengths = options.quick ? std::vector<int>{64, 128} : std::vector<int>{32, 64, 128, 256};
  s.memory_steps = options.quick ? kMemoryStepsQuick : kMemorySteps;
  s.vocab = layer_experiments::kLayersSuiteVocab;
  return s;
}

LayerConfig layers_suite_config(const LayersSuiteShapes& shapes, DType dtype, int max_batch_tokens,
                                int max_seq_len) {
  LayerConfig c = layers::preset("transformer-big").layer;
  c.hidden = shapes.hidden;
  c.ffn = shapes.ffn;
  c.heads = shapes.heads;
  c.max_batch_tokens = max_batch_tokens;
  c.max_seq_len = max_seq_len;
  c.dtype = dtype;
  c.validate();
  return c;
}

double encoder_layer_gemm_flops(const LayerConfig& config, std::int64_t batch, std::int64_t len,
                                bool backward) {
  const double T = static_cast<double>(batch) * static_cast<double>(len);
  const double H = config.hidden, F = config.ffn;
  const double forward = 2.0 * T * H * (4.0 * H + 2.0 * F) + 4.0 * static_cast<double>(batch) *
                                                                 static_cast<double>(len) *
                                                                 static_cast<double>(len) * H;
  return backward ? 2.0 * forward : forward;
}

double decoder_layer_gemm_flops(const LayerConfig& config, std::int64_t batch, std::int64_t len,
                                std::int64_t src_len, bool backward) {
  const double B = static_cast<double>(batch), L = static_cast<double>(len), S = static_cast<double>(src_len);
  const double T = B * L;
  const double H = config.hidden, F = config.ffn;
  const double forward = 2.0 * T * H * 4.0 * H        // self-attention QKV and output
                         + 2.0 * T * H * 2.0 * H      // cross-attention Q and output
                         + 2.0 * B * S * H * 2.0 * H  // cross-attention K/V of the encoder output
                         + 2.0 * T * H * 2.0 * F      // fc1 and fc2
                         + 4.0 * B * L * L * H        // self-attention scores and context (*)
                         + 4.0 * B * L * S * H;       // cross-attention scores and context
  // (*) The work executed: the causal self-attention runs whole L×L GEMMs and masks the upper half
  // in the softmax. The "useful FLOPs" convention of flash-attention papers halves causal scores
  // and context (2·B·L²·H); by it the decoder's TFLOP/s would read lower by 2TLH of 32TH² + 8TLH
  // (F = 4H, S = L): L/(16H + 4L), 1.5 % at L 256 and hidden 1024.
  return backward ? 2.0 * forward : forward;
}

std::vector<std::pair<std::int64_t, std::int64_t>> memory_loop_shapes(std::uint64_t seed, int steps,
                                                                      int tokens, int max_seq_len) {
  SEQBENCH_REQUIRE(steps >= 1 && max_seq_len >= 8 && tokens >= max_seq_len,
                   "memory_loop_shapes: steps " << steps << " (>= 1), max_seq_len " << max_seq_len
                                                << " (>= 8), tokens " << tokens << " (>= max_seq_len)");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> length(8, max_seq_len);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  for (int i = 0; i < steps; ++i) {
    const int L = i == 0 ? max_seq_len : length(rng);
    shapes.emplace_back(tokens / L, L);
  }
  return shapes;
}

SuiteSpec layers_suite(const SuiteOptions& options) {
  SuiteSpec suite;
  suite.name = "layers";
  suite.description =
      "LightSeq2 Fig. 19/20: the Transformer-Big embedding, encoder, decoder and criterion layers, "
      "forward and backward, eager-like baseline (unfused kernels, caching allocator, uint8 masks) against "
      "the managed fused layer over sequence lengths; cuBLASLt epilogues against separate kernels at the "
      "FFN and projection GEMMs; GPU checks: the encoder's and the decoder's peak device memory and "
      "allocation counts over a "
      "variable-length training loop";
  suite.needs_gpu = true;
  layer_experiments::add_encoder_experiments(suite, options);
  layer_experiments::add_decoder_experiments(suite, options);
  layer_experiments::add_gemm_epilogue_experiments(suite, options);
  layer_experiments::add_embedding_experiments(suite, options);
  layer_experiments::add_criterion_experiments(suite, options);
  const LayersSuiteShapes shapes = layers_suite_shapes(options);
  // Each family on its own (checks_or_failure): one that throws is its failed check, not the suite's end.
  suite.gpu_checks = [shapes](std::uint64_t seed) {
    std::vector<CheckResult> all;
    const auto add = [&](const char* name, const std::function<std::vector<CheckResult>()>& family) {
      auto some = checks_or_failure(std::string("layers/gpu/") + name, family);
      all.insert(all.end(), some.begin(), some.end());
    };
    add("encoder_memory", [&] { return layer_experiments::encoder_memory_checks(shapes, seed); });
    add("decoder_memory", [&] { return layer_experiments::decoder_memory_checks(shapes, seed); });
    add("encoder_stack_memory", [&] { return layer_experiments::encoder_stack_memory_checks(shapes, seed); });
    return all;
  };
  return suite;
}

}  // namespace seqbench
