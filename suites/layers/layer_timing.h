// The machinery the layers suite's layer experiments share (the contract: suites/layers/README.md):
//   - LayerPair: a state's baseline and managed layers with their allocators (the managed layer on a
//     counting allocator, the baseline on a PyTorch-like caching allocator over its own counter);
//   - PairWork and time_pair: the timing pattern. Forward experiments time forward(); backward
//     experiments run one forward of each layer while being prepared and time backward(), the
//     baseline's with retain_graph, so that every timed backward does the same work;
//   - layer_experiment, add_gemm_layer_params: an experiment's name, common params and variants;
//   - add_layer_sweep, checks_for_layer_dtypes: the loops over dtypes, directions and lengths;
//   - for the encoder and decoder layers (a Pair, see below): PairTimingState and pair_work (their
//     timing experiments) and Fig. 20's memory loop, run_memory_loop and layer_memory_checks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check_result.h"
#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/caching_allocator.h"
#include "layers/config.h"
#include "layers/device_allocator.h"
#include "suites/experiment.h"
#include "suites/layers/layer_experiments.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

// The dtypes of every layer experiment and memory check, in suite order.
inline constexpr DType kLayerDTypes[] = {DType::f16, DType::bf16};

// --- timing a baseline/managed pair ------------------------------------------------------------

// The allocators of a timing experiment's two layers: the managed layer allocates (its one block)
// through managed_counter; the baseline through `cache`, a caching allocator over baseline_counter.
struct PairAllocators {
  layers::CudaAllocator cuda;
  layers::CountingAllocator managed_counter{cuda}, baseline_counter{cuda};
  layers::CachingAllocator cache{baseline_counter};
};

// A timing experiment's two layers; the experiment's state derives from it and adds its buffers.
template <class Managed, class Baseline>
struct LayerPair : PairAllocators {
  std::unique_ptr<Managed> managed;
  std::unique_ptr<Baseline> baseline;
  std::unique_ptr<Managed> managed_keep;  // Recompute::none; backward experiments of a Pair only
};

// What a timing experiment runs of its pair on a stream; baseline_backward's flag is retain_graph.
struct PairWork {
  Work baseline_forward, managed_forward;
  std::function<void(cudaStream_t, bool)> baseline_backward;
  Work managed_backward;
  // The encoder's and decoder's backward experiments: the managed layer with Recompute::none (it
  // keeps the dropped probabilities and FFN activations that the default redraws in its backward;
  // layers/layer_run.h), variant "managed_keep", which prices the recomputation. Empty elsewhere.
  Work managed_keep_forward, managed_keep_backward;
};

// The variants {baseline, managed} of a timing experiment: the forwards (backward false), or the
// backwards after one forward of each here (backward true; the baseline's with retain_graph =
// true, so that it keeps its graph and every timed backward does the same work), then
// managed_keep's backward when the work has one. Runs each
// variant once before timing (GEMM plans, the caching allocator's first blocks) and synchronizes.
// The caller sets the result's state.
PreparedExperiment time_pair(const PairWork& work, bool backward);

// --- an experiment's description ---------------------------------------------------------------

// The part every layer experiment shares: name "<layer>_<fwd|bwd>/<dtype>/B=<batch>,L=<len>";
// params layer, direction, dtype, batch, seq_len, tokens (batch·len); baseline "baseline";
// variants "baseline" and "managed", both with the given bytes and flops, and for a backward with
// keep_variant "managed_keep" too (PairWork::managed_keep_backward). The caller adds its layer's
// params, inputs and prepare.
ExperimentSpec layer_experiment(const std::string& layer, DType dtype, std::int64_t batch, std::int64_t len,
                                bool backward, double bytes, double flops, bool keep_variant = false);

// The params of a GEMM-bound layer (encoder, decoder): model (the shapes'), hidden, ffn, heads,
// pre_layer_norm, activation, attn_dropout, activation_dropout, hidden_dropout, max_batch_tokens,
// max_seq_len from its config, and gemm_flops.
void add_gemm_layer_params(nlohmann::json& params, const std::string& model, const layers::LayerConfig& c,
                           double gemm_flops);

// suite.experiments gets make(shapes, dtype, L, backward) for each dtype of kLayerDTypes, backward
// false then true, and L of the shapes' lengths in that order, shapes = layers_suite_shapes(options)
// (batch tokens shapes.tokens, max_seq_len shapes.lengths.back()).
template <class Make>
void add_layer_sweep(SuiteSpec& suite, const SuiteOptions& options, Make&& make) {
  const LayersSuiteShapes shapes = layers_suite_shapes(options);
  for (const DType dtype : kLayerDTypes)
    for (const bool backward : {false, true})
      for (const int L : shapes.lengths) suite.experiments.push_back(make(shapes, dtype, L, backward));
}

// f(T{}) for the element type T of each dtype of kLayerDTypes, the results concatenated.
template <class F>
std::vector<CheckResult> checks_for_layer_dtypes(F&& f) {
  std::vector<CheckResult> all;
  for (const DType dtype : kLayerDTypes) {
    auto some = dispatch_dtype(dtype, [&](auto tag) -> std::vector<CheckResult> {
      if constexpr (std::is_same_v<decltype(tag), float>)
        return {};
      else
        return f(tag);
    });
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

// --- the encoder and decoder layers: a Pair --------------------------------------------------------
//
// A Pair (encoder.cu's EncoderPair<T>, decoder.cu's DecoderPair<T>) names a managed layer and its
// baseline, both constructed as Layer(config, weights, grads, allocator), and how to run them:
//   using Value;     the element type T
//   using Managed, Baseline;
//   using ManagedOptions;  the Managed constructor's options (with a `recompute` field)
//   using Data;      Data(config, rows): parameters (weights, grad_views) and inputs/outputs for up
//                    to `rows` target tokens
//   static const char* layer();                        "encoder", "decoder"
//   static constexpr std::uint64_t dropout_offsets();  the Philox offsets one forward uses
// (functions, not constants: nvcc warns of a template's static member the float instantiation,
// which the timing experiments' dtype dispatch compiles, never reads).
//   template <class Layer> static void forward(Layer&, Data&, std::size_t batch, std::size_t len,
//                                              std::uint64_t dropout_offset, cudaStream_t);
//   static void backward(Managed&, Data&, cudaStream_t);
//   static void backward(Baseline&, Data&, cudaStream_t, bool retain_graph);

// A timing experiment's state for a Pair: its data for `rows` tokens and both layers, and with
// `keep` (backward experiments) the managed layer with Recompute::none as well. A backward
// experiment times many backwards of one forward (time_pair), so its managed layers retain the
// forward (ManagedOptions::retain_forward, as the baseline's retain_graph): without it the first
// backward's temporaries overwrite what the forward kept and a managed layer refuses a second
// backward. Retaining moves where tensors sit in the block, not what any kernel does.
template <class Pair>
struct PairTimingState : LayerPair<typename Pair::Managed, typename Pair::Baseline> {
  typename Pair::Data data;

  PairTimingState(const layers::LayerConfig& c, std::size_t rows, bool keep) : data(c, rows) {
    typename Pair::ManagedOptions managed_options;
    managed_options.retain_forward = keep;
    this->managed = std::make_unique<typename Pair::Managed>(c, data.weights, data.grad_views,
                                                             this->managed_counter, managed_options);
    this->baseline = std::make_unique<typename Pair::Baseline>(c, data.weights, data.grad_views, this->cache);
    if (keep) {
      typename Pair::ManagedOptions o;
      o.recompute = layers::Recompute::none;
      o.retain_forward = true;
      this->managed_keep = std::make_unique<typename Pair::Managed>(c, data.weights, data.grad_views,
                                                                    this->managed_counter, o);
    }
  }
};

// The timing work of a Pair's state at batch × len (dropout offset 0).
template <class Pair>
PairWork pair_work(PairTimingState<Pair>& state, std::int64_t batch, std::int64_t len) {
  PairTimingState<Pair>* s = &state;
  const auto b = static_cast<std::size_t>(batch), l = static_cast<std::size_t>(len);
  PairWork w{[s, b, l](cudaStream_t stream) { Pair::forward(*s->baseline, s->data, b, l, 0, stream); },
             [s, b, l](cudaStream_t stream) { Pair::forward(*s->managed, s->data, b, l, 0, stream); },
             [s](cudaStream_t stream, bool retain_graph) {
               Pair::backward(*s->baseline, s->data, stream, retain_graph);
             },
             [s](cudaStream_t stream) { Pair::backward(*s->managed, s->data, stream); },
             {},
             {}};
  if (s->managed_keep) {
    w.managed_keep_forward = [s, b, l](cudaStream_t stream) {
      Pair::forward(*s->managed_keep, s->data, b, l, 0, stream);
    };
    w.managed_keep_backward = [s](cudaStream_t stream) { Pair::backward(*s->managed_keep, s->data, stream); };
  }
  return w;
}

// --- Fig. 20: the memory loop ------------------------------------------------------------------

// One layer of the Pair (the baseline, or the managed layer) alone on a fresh counting allocator
// (the baseline through a caching allocator over it), constructed and then run over `shapes`: each
// step one forward (dropout offset step · dropout_offsets()) and one backward, the baseline's
// consuming its graph (retain_graph false) as a training step does. The managed layer runs with
// `recompute` (layers/layer_run.h).
template <class Pair>
LoopStats run_memory_loop(const layers::LayerConfig& c, typename Pair::Data& data, bool baseline,
                          const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes,
                          layers::Recompute recompute = layers::Recompute::pointwise) {
  layers::CudaAllocator cuda;
  layers::CountingAllocator counter(cuda);
  LoopStats st;
  {
    layers::CachingAllocator cache(counter);
    std::unique_ptr<typename Pair::Managed> managed;
    std::unique_ptr<typename Pair::Baseline> eager;
    if (baseline)
      eager = std::make_unique<typename Pair::Baseline>(c, data.weights, data.grad_views, cache);
    else {
      typename Pair::ManagedOptions options;
      options.recompute = recompute;
      managed = std::make_unique<typename Pair::Managed>(c, data.weights, data.grad_views, counter, options);
    }
    st.setup_allocations = counter.stats().allocations;
    Stream stream;
    std::uint64_t half = 0;
    std::size_t free_at_half = 0, free_at_end = 0, total = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      if (i == shapes.size() / 2) {
        half = counter.stats().allocations;
        SEQBENCH_CUDA_CHECK(cudaMemGetInfo(&free_at_half, &total));
      }
      const std::size_t B = static_cast<std::size_t>(shapes[i].first),
                        L = static_cast<std::size_t>(shapes[i].second);
      const std::uint64_t offset = i * Pair::dropout_offsets();
      if (baseline) {
        Pair::forward(*eager, data, B, L, offset, stream.get());
        Pair::backward(*eager, data, stream.get(), false);
      } else {
        Pair::forward(*managed, data, B, L, offset, stream.get());
        Pair::backward(*managed, data, stream.get());
      }
    }
    stream.synchronize();
    SEQBENCH_CUDA_CHECK(cudaMemGetInfo(&free_at_end, &total));
    const layers::AllocationStats s = counter.stats();
    st.loop_allocations = s.allocations - st.setup_allocations;
    st.late_allocations = s.allocations - half;
    st.late_device_bytes = static_cast<std::int64_t>(free_at_half) - static_cast<std::int64_t>(free_at_end);
    st.peak_reserved_bytes = s.peak_live_bytes;
    st.peak_bytes = baseline ? cache.stats().peak_allocated_bytes : s.peak_live_bytes;
  }
  return st;
}

// The memory checks of one Pair at its dtype (see suites/suite_layers.h): both layers over the
// same memory_loop_shapes, on one Data of max_batch_tokens rows; the managed layer once more with
// Recompute::none, reported beside the check.
template <class Pair>
std::vector<CheckResult> pair_memory_checks(const LayersSuiteShapes& sh, std::uint64_t seed) {
  const DType dtype = DTypeTraits<typename Pair::Value>::dtype;
  const int tokens = sh.tokens;
  const int max_len = sh.lengths.back();
  const layers::LayerConfig c = layers_suite_config(sh, dtype, tokens, max_len);
  const auto shapes = memory_loop_shapes(seed, sh.memory_steps, tokens, max_len);
  typename Pair::Data data(c, static_cast<std::size_t>(tokens));
  const LoopStats managed = run_memory_loop<Pair>(c, data, false, shapes);
  const LoopStats kept = run_memory_loop<Pair>(c, data, false, shapes, layers::Recompute::none);
  const LoopStats eager = run_memory_loop<Pair>(c, data, true, shapes);
  return memory_loop_checks(sh.model, Pair::layer(), dtype, seed, tokens, max_len, shapes, managed, eager,
                            &kept);
}

// layer_memory_checks<EncoderPair>(shapes, seed): the Pair's memory checks for every dtype of
// kLayerDTypes.
template <template <class> class Pair>
std::vector<CheckResult> layer_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed) {
  return checks_for_layer_dtypes(
      [&](auto tag) { return pair_memory_checks<Pair<decltype(tag)>>(shapes, seed); });
}

}  // namespace seqbench::layer_experiments
