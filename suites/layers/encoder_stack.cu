// Fig. 20 at stack scale: the memory loop (layer_timing.h's run_memory_loop) over transformer-big's
// encoder, six layers deep: EncoderStack (one block for the whole stack) against
// BaselineEncoderStack (six eager-like layers chained through a caching allocator, as PyTorch eager
// runs nn.Sequential). A stack is where a caching allocator recovers the most (one layer's freed
// temporaries serve the next), so the 0.7 target is checked here as well as per layer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_encoder_stack.h"
#include "layers/config.h"
#include "layers/encoder_stack.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/layer_timing.h"
#include "suites/layers/parameter_block.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

using layers::LayerConfig;

namespace {

constexpr std::size_t kStackLayers = kEncoderStackLayers;

// Device parameters and gradients of every layer (each its own block, seeds apart), the stack's
// activations, and the views.
template <class T>
struct StackData : LayerActivations<T> {
  std::vector<std::unique_ptr<ParameterBlock<T>>> blocks;
  std::vector<layers::EncoderLayerWeights> weights;
  std::vector<layers::EncoderLayerGrads> grad_views;

  StackData(const LayerConfig& c, std::size_t rows)
      : LayerActivations<T>(rows, c.hidden), weights(kStackLayers), grad_views(kStackLayers) {
    for (std::size_t i = 0; i < kStackLayers; ++i) {
      blocks.push_back(std::make_unique<ParameterBlock<T>>(layers::encoder_layer_parameter_shapes(c),
                                                           kParamSeed + 100 * i));
      blocks.back()->bind(weights[i], grad_views[i], kEncoderTensors);
    }
  }
};

// The stack pair (layer_timing.h's Pair): EncoderStack against BaselineEncoderStack on x [B·L, H],
// no padding.
template <class T>
struct EncoderStackPair {
  using Value = T;
  using Managed = layers::EncoderStack;
  using Baseline = layers::BaselineEncoderStack;
  using ManagedOptions = layers::EncoderStackOptions;
  using Data = StackData<T>;
  static const char* layer() { return "encoder_stack"; }
  static constexpr std::uint64_t dropout_offsets() {
    return layers::kEncoderLayerDropoutOffsets * kStackLayers;
  }

  template <class Layer>
  static void forward(Layer& stack, Data& d, std::size_t B, std::size_t L, std::uint64_t offset,
                      cudaStream_t stream) {
    stack.forward(d.y.data(), d.x.data(), B, L, nullptr, kDropoutSeed, offset, stream);
  }
  static void backward(Managed& stack, Data& d, cudaStream_t stream) {
    stack.backward(d.dx.data(), d.dy.data(), d.x.data(), stream);
  }
  static void backward(Baseline& stack, Data& d, cudaStream_t stream, bool retain_graph) {
    stack.backward(d.dx.data(), d.dy.data(), d.x.data(), stream, retain_graph);
  }
};

}  // namespace

std::vector<CheckResult> encoder_stack_memory_checks(const LayersSuiteShapes& shapes, std::uint64_t seed) {
  return layer_memory_checks<EncoderStackPair>(shapes, seed);
}

}  // namespace seqbench::layer_experiments
