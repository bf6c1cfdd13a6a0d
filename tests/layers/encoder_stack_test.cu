// EncoderStack on the GPU: a stack of n encoder layers with one planned block gives bitwise the
// results of n EncoderLayers chained by hand (each with its own block; layer i's dropout streams at
// base + 4·i; the backward in reverse, each layer's dx the previous one's dy). The two run the
// same kernels on the same shapes with the same GEMM plans (one shared Gemm), so any difference
// is a planning or wiring fault of the stack: a hidden state read from the wrong slot, a
// temporary overwritten while live, a layer run with the wrong parameters or dropout stream.
// EncoderLayer itself is checked against the CPU reference in encoder_layer_test.cu.
// The managed comparison runs twice, with opposite Recompute choices (layers/layer_run.h) on the
// two sides: chained layers that keep the dropped probabilities and FFN activations (none)
// against a stack that redraws them in the backward (pointwise), and the other way round; the
// results are promised bitwise equal either way, so this also checks the recomputation.
// Also: steady-state steps allocate nothing, and a repeated step is bitwise equal. The eager
// BaselineEncoderStack is checked the same way against BaselineEncoderLayers chained by hand.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/baseline_encoder_stack.h"
#include "layers/caching_allocator.h"
#include "layers/device_allocator.h"
#include "layers/encoder_layer.h"
#include "layers/encoder_stack.h"
#include "layers/gemm.h"
#include "suites/operators/check_util.h"
#include "tests/common/gpu_test.h"
#include "tests/layers/layer_cases.h"
#include "tests/layers/layer_params.h"
#include "tests/layers/poisoning_allocator.h"

namespace seqbench::layers {
namespace {

using namespace layer_test;
using operators::check_util::random_values;
using operators::check_util::same_bits;

struct Case {
  int layers, batch, len, hidden, heads, ffn;
  bool pre;
  Activation activation;
  bool dropout, causal;
  std::vector<int> lengths;  // empty: no padding mask
};

std::string describe(const Case& c, DType dtype) {
  std::ostringstream os;
  os << dtype_name(dtype) << " layers=" << c.layers << " B=" << c.batch << " L=" << c.len << " H=" << c.hidden
     << " heads=" << c.heads << " ffn=" << c.ffn << (c.pre ? " pre-LN" : " post-LN") << " "
     << activation_name(c.activation) << (c.dropout ? " dropout" : "") << (c.causal ? " causal" : "")
     << " lengths=[" << joined(c.lengths) << "]";
  return os.str();
}

// One layer's packed parameters (drawn U(-0.3, 0.3)) and a gradient buffer poisoned with `poison`
// bytes. The chained side poisons with 0xFF and the stack side with 0x7F, so that an element
// neither side writes cannot compare bitwise equal.
template <class T>
struct LayerParams {
  std::vector<std::size_t> offsets;
  DeviceBuffer<T> params, grads;
  EncoderLayerWeights weights;
  EncoderLayerGrads grad_views;
  LayerParams(const std::vector<ParameterShape>& shapes, std::uint64_t seed, unsigned char poison) {
    std::size_t total = 0;
    offsets = packed_offsets(shapes, total);
    params = DeviceBuffer<T>(random_values<T>(total, seed, -0.3f, 0.3f));
    grads = DeviceBuffer<T>(total);
    grads.fill_bytes(poison);
    point_views(weights, grad_views, params.data(), grads.data(), offsets);
  }
};

// `chained` is the hand-chained EncoderLayers' Recompute, `stacked` the EncoderStack's (managed
// only).
template <class T>
void run_case(const Case& cs, std::uint64_t seed, bool baseline, Recompute chained = Recompute::pointwise,
              Recompute stacked = Recompute::pointwise) {
  const DType dtype = DTypeTraits<T>::dtype;
  SCOPED_TRACE(std::string(baseline ? "baseline " : "") + describe(cs, dtype) +
               (baseline ? ""
                         : std::string(" chained recompute=") + recompute_name(chained) +
                               " stack recompute=" + recompute_name(stacked)));
  const std::size_t B = static_cast<std::size_t>(cs.batch), L = static_cast<std::size_t>(cs.len);
  const std::size_t n = static_cast<std::size_t>(cs.layers);
  const std::size_t TH = B * L * static_cast<std::size_t>(cs.hidden);
  const LayerConfig config = case_config(cs.batch * cs.len + 3, cs.len + 1, cs.hidden, cs.heads, cs.ffn,
                                         cs.pre, cs.activation, cs.dropout, dtype);
  const std::vector<ParameterShape> shapes = encoder_layer_parameter_shapes(config);
  // Two copies of every layer's parameters (the same draws): one for the chained layers, one for
  // the stack, so that each writes its own gradients.
  std::vector<std::unique_ptr<LayerParams<T>>> chained_params, stack_params;
  std::vector<EncoderLayerWeights> weights;
  std::vector<EncoderLayerGrads> grads;
  for (std::size_t i = 0; i < n; ++i) {
    chained_params.push_back(std::make_unique<LayerParams<T>>(shapes, seed + 100 * i, 0xFF));
    stack_params.push_back(std::make_unique<LayerParams<T>>(shapes, seed + 100 * i, 0x7F));
    weights.push_back(stack_params.back()->weights);
    grads.push_back(stack_params.back()->grad_views);
  }
  DeviceBuffer<T> x(random_values<T>(TH, seed + 1, -1.0f, 1.0f)),
      dy(random_values<T>(TH, seed + 2, -1.0f, 1.0f));
  std::vector<std::int32_t> lengths(cs.lengths.begin(), cs.lengths.end());
  DeviceBuffer<std::int32_t> d_lengths(lengths);
  const std::int32_t* key_lengths = lengths.empty() ? nullptr : d_lengths.data();
  const std::uint64_t dropout_seed = seed ^ 0x5eedull, base = 8;
  DeviceBuffer<char> workspace(kGemmWorkspaceBytes);
  Gemm gemm(workspace.data(), workspace.size());
  CudaAllocator cuda;
  // Every planned or cached block starts poisoned, with a different byte on each side, so that a
  // temporary's element neither side wrote cannot compare equal.
  PoisoningAllocator chained_poison(cuda, 0xFF), stack_poison(cuda, 0x7F);
  Stream stream;

  // The chained layers: hidden states h_1 .. h_{n-1} and their gradients in separate buffers.
  std::vector<DeviceBuffer<T>> h, dh;
  for (std::size_t i = 0; i <= n; ++i) {
    h.emplace_back(TH);
    dh.emplace_back(TH);
    h.back().fill_bytes(0xFF);
    dh.back().fill_bytes(0xFF);
  }
  {
    CountingAllocator counter(chained_poison);
    CachingAllocator cache(counter);
    std::vector<std::unique_ptr<EncoderLayer>> managed;
    std::vector<std::unique_ptr<BaselineEncoderLayer>> eager;
    for (std::size_t i = 0; i < n; ++i) {
      if (baseline) {
        BaselineEncoderLayerOptions o;
        o.causal = cs.causal;
        o.gemm = &gemm;
        eager.push_back(std::make_unique<BaselineEncoderLayer>(config, chained_params[i]->weights,
                                                               chained_params[i]->grad_views, cache, o));
      } else {
        EncoderLayerOptions o;
        o.causal = cs.causal;
        o.prefix = "enc" + std::to_string(i) + ".";
        o.gemm = &gemm;
        o.recompute = chained;
        managed.push_back(std::make_unique<EncoderLayer>(config, chained_params[i]->weights,
                                                         chained_params[i]->grad_views, counter, o));
      }
    }
    const auto chain = [&](auto& layers) {
      for (std::size_t i = 0; i < n; ++i)
        layers[i]->forward(h[i + 1].data(), i == 0 ? x.data() : h[i].data(), B, L, key_lengths, dropout_seed,
                           base + kEncoderLayerDropoutOffsets * i, stream.get());
      for (std::size_t i = n; i-- > 0;)
        layers[i]->backward(dh[i].data(), i + 1 == n ? dy.data() : dh[i + 1].data(),
                            i == 0 ? x.data() : h[i].data(), stream.get());
      stream.synchronize();
    };
    if (baseline)
      chain(eager);
    else
      chain(managed);
  }

  CountingAllocator counter(stack_poison);
  CachingAllocator cache(counter);
  DeviceBuffer<T> y(TH), dx(TH);
  const auto step = [&](auto& stack) {
    y.fill_bytes(0x7F);  // the chained side's h and dh are 0xFF
    dx.fill_bytes(0x7F);
    stack.forward(y.data(), x.data(), B, L, key_lengths, dropout_seed, base, stream.get());
    stack.backward(dx.data(), dy.data(), x.data(), stream.get());
    stream.synchronize();
  };
  const auto expect_chain = [&](const char* when) {
    EXPECT_TRUE(same_bits(y.copy_to_host(), h[n].copy_to_host())) << "y, " << when;
    EXPECT_TRUE(same_bits(dx.copy_to_host(), dh[0].copy_to_host())) << "dx, " << when;
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_TRUE(same_bits(stack_params[i]->grads.copy_to_host(), chained_params[i]->grads.copy_to_host()))
          << "layer " << i << "'s parameter gradients, " << when;
  };
  if (baseline) {
    BaselineEncoderLayerOptions o;
    o.causal = cs.causal;
    o.gemm = &gemm;
    BaselineEncoderStack stack(config, weights, grads, cache, o);
    step(stack);
    expect_chain("first step");
    // The backward dropped the graph: nothing saved, and nothing allocated beyond the cache's
    // blocks, which a second step of the same shape reuses.
    EXPECT_EQ(stack.saved_bytes(), 0u);
    EXPECT_EQ(cache.stats().allocated_bytes, 0u);
    const std::uint64_t allocations = counter.stats().allocations;
    step(stack);
    EXPECT_EQ(counter.stats().allocations, allocations);
    expect_chain("second step");
  } else {
    EncoderStackOptions o;
    o.causal = cs.causal;
    o.gemm = &gemm;
    o.recompute = stacked;
    EncoderStack stack(config, weights, grads, counter, o);
    EXPECT_EQ(counter.stats().allocations, 1u);
    step(stack);
    expect_chain("first step");
    step(stack);  // nothing allocated, the same bits
    EXPECT_EQ(counter.stats().allocations, 1u);
    expect_chain("second step");
  }
}

std::vector<Case> cases() {
  using A = Activation;
  return {
      {3, 2, 5, 12, 3, 37, true, A::relu, true, false, {5, 3}},
      {2, 3, 7, 20, 4, 33, false, A::gelu, true, false, {7, 0, 4}},
      {4, 2, 9, 16, 2, 31, true, A::gelu_tanh, true, true, {}},
      {1, 2, 6, 24, 6, 50, false, A::relu, false, false, {6, 2}},
  };
}

TEST(EncoderStackGpu, EqualsChainedLayersBitwise) {
  SEQBENCH_REQUIRE_GPU();
  for_each_dtype_and_case(cases(), 31337, [](const Case& c, std::uint64_t seed, auto tag) {
    run_case<decltype(tag)>(c, seed, false, Recompute::none, Recompute::pointwise);
    run_case<decltype(tag)>(c, seed, false, Recompute::pointwise, Recompute::none);
  });
}

// The eager stack against eager layers chained by hand: the same bits, the graph dropped after
// the backward, and a repeated step served from the caching allocator.
TEST(BaselineEncoderStackGpu, EqualsChainedBaselineLayersBitwise) {
  SEQBENCH_REQUIRE_GPU();
  for_each_dtype_and_case(cases(), 31337, [](const Case& c, std::uint64_t seed, auto tag) {
    run_case<decltype(tag)>(c, seed, true);
  });
}

}  // namespace
}  // namespace seqbench::layers
