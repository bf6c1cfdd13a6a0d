// The criterion layer's experiments (Fig. 19: forward and backward, baseline vs managed, over
// sequence lengths; the contract in suites/suite_layers.h and suites/layers/README.md).
//
// Layer: label-smoothed cross-entropy over the shapes' vocab (32000), ε = 0.1, fairseq's convention, padding
// targets (index 1) ignored, rows = the batch's B·L tokens. Variants: "baseline"
// (BaselineCriterionLayer on a CachingAllocator: log_softmax writing logp in T, the NLL/smoothing
// kernel, totals; backward the five autograd launches from logp) and "managed" (CriterionLayer:
// one fused forward pass and the totals kernel; one fused backward pass from lse).
// Inputs (fixed seeds): logits uniform in [-4, 4]; targets uniform in [2, vocab), each sentence's
// tail padding_idx, with the sentence lengths of the embedding experiments of the same shape
// (layers_suite_sentence_lengths: about kLayersSuitePadFraction padded; params.pad_fraction is
// the exact share, inputs.sentence_lengths the kept lengths). Backward: grad_loss_sum = 1.
//
// Minimal bytes (memory-bound; flops 0), N = B·L rows, C of them counted (target not padding),
// s = sizeof(T), V = vocab. An ignored row's loss is 0 whatever its logits: its logits (and lse)
// need not be read (the managed kernels read nothing of them):
//   forward   C·V·s (logits) + 4N (targets) read; 8N (loss, nll) + 16 (totals) written
//   backward  C·V·s (logits) + 4N (targets) + 4C (the forward's per-row state: lse) read;
//             N·V·s (dlogits, ignored rows written as zeros) written
// Not counted: the managed forward's lse (4N written), the baseline's logp and its backward's
// dlogp / branch factors (kernels/cross_entropy.h: 7 N·V·s of backward traffic against 2).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_criterion_layer.h"
#include "layers/criterion_layer.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/layer_timing.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

namespace {

constexpr float kLogitRange = 4.0f;

template <class T>
struct CriterionState : LayerPair<layers::CriterionLayer, layers::BaselineCriterionLayer> {
  DeviceBuffer<T> logits, dlogits;
  DeviceBuffer<std::int32_t> targets;
};

template <class T>
PreparedExperiment prepare_criterion(const layers::CriterionLayerConfig& c,
                                     const std::vector<std::int32_t>& targets, std::int64_t vocab,
                                     bool backward) {
  auto st = std::make_shared<CriterionState<T>>();
  const auto rows = static_cast<std::int64_t>(targets.size());
  const std::size_t n = targets.size() * static_cast<std::size_t>(vocab);
  st->logits = DeviceBuffer<T>(n);
  operators::check_util::fill(st->logits, kInputSeed + 3, -kLogitRange, kLogitRange);
  st->dlogits = DeviceBuffer<T>(n);
  st->targets = DeviceBuffer<std::int32_t>(targets);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  st->managed = std::make_unique<layers::CriterionLayer>(c, st->managed_counter);
  st->baseline = std::make_unique<layers::BaselineCriterionLayer>(c, st->cache);
  CriterionState<T>* s = st.get();
  PreparedExperiment p =
      time_pair({[s, rows, vocab](cudaStream_t stream) {
                   (void)s->baseline->forward(s->logits.data(), s->targets.data(), rows, vocab, stream);
                 },
                 [s, rows, vocab](cudaStream_t stream) {
                   (void)s->managed->forward(s->logits.data(), s->targets.data(), rows, vocab, stream);
                 },
                 [s](cudaStream_t stream, bool retain_graph) {
                   s->baseline->backward(s->dlogits.data(), s->logits.data(), s->targets.data(), 1.0f, stream,
                                         retain_graph);
                 },
                 [s](cudaStream_t stream) {
                   s->managed->backward(s->dlogits.data(), s->logits.data(), s->targets.data(), 1.0f, stream);
                 },
                 {},
                 {}},
                backward);
  p.state = st;
  return p;
}

}  // namespace

layers::CriterionLayerConfig layers_suite_criterion_config(DType dtype, int max_batch_tokens) {
  layers::CriterionLayerConfig c;
  c.max_batch_tokens = max_batch_tokens;
  c.padding_idx = kLayersSuitePaddingIdx;
  c.epsilon = kLayersSuiteEpsilon;
  c.convention = "fairseq";
  c.dtype = dtype;
  c.validate();
  return c;
}

namespace {

ExperimentSpec criterion_experiment(const LayersSuiteShapes& shapes, DType dtype, int L, bool backward) {
  const layers::CriterionLayerConfig c = layers_suite_criterion_config(dtype, shapes.tokens);
  const std::int64_t B = shapes.tokens / L, N = B * L, V = shapes.vocab;
  const std::vector<std::int64_t> lengths = layers_suite_sentence_lengths(B, L, kInputSeed);
  const std::vector<std::int32_t> targets =
      layers_suite_tokens_with_padding(lengths, L, shapes.vocab, kInputSeed + 4);
  std::int64_t counted = 0;
  for (const std::int32_t t : targets) counted += t != kLayersSuitePaddingIdx ? 1 : 0;
  const double s = static_cast<double>(dtype_size(dtype)), v = static_cast<double>(V);
  const double n = static_cast<double>(N), C = static_cast<double>(counted);
  // Minimal bytes: see the top of this file.
  const double bytes = backward ? C * v * s + 4 * n + 4 * C + n * v * s : C * v * s + 4 * n + 8 * n + 16;

  ExperimentSpec e = layer_experiment("criterion", dtype, B, L, backward, bytes, 0.0);
  e.params.update({{"vocab", V},
                   {"epsilon", c.epsilon},
                   {"convention", c.convention},
                   {"padding_idx", kLayersSuitePaddingIdx},
                   {"pad_fraction", std::round((n - C) / n * 1e6) / 1e6},
                   {"counted_tokens", counted},
                   {"logit_range", kLogitRange},
                   {"grad_loss_sum", 1.0},
                   {"max_batch_tokens", c.max_batch_tokens}});
  e.inputs = {{"sentence_lengths", lengths}};
  e.prepare = [c, targets, V, backward] {
    return dispatch_dtype(
        c.dtype, [&](auto tag) { return prepare_criterion<decltype(tag)>(c, targets, V, backward); });
  };
  if (shapes.dumps) enable_layer_dump(e);  // dump.cu: a dropout-free parity instance, for `seqbench dump`
  return e;
}

}  // namespace

void add_criterion_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  add_layer_sweep(suite, options, criterion_experiment);
}

}  // namespace seqbench::layer_experiments
