// ParameterRanges (layers/parameter_ranges.h) and the layers that use it, without a GPU: the
// construction rule (no gradient shares a byte with another gradient or a weight) against a
// brute-force pairwise check on random layouts, the per-call rules (a written caller tensor clear
// of every view, a read one clear of every gradient), and each encoder and decoder layer and stack
// refusing such arguments, with both tensors named, before any allocation or CUDA call. The
// parameter views are fake addresses (never dereferenced; see FakeLayerParams).
#include "layers/parameter_ranges.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/byte_range.h"
#include "core/error.h"
#include "layers/baseline_decoder_layer.h"
#include "layers/baseline_encoder_layer.h"
#include "layers/baseline_encoder_stack.h"
#include "layers/decoder_layer.h"
#include "layers/encoder_layer.h"
#include "layers/encoder_stack.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;
using namespace layer_test;

const void* at(std::uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

TEST(ParameterRanges, GradientsMayShareBytesWithNothingWeightsWithEachOther) {
  {
    ParameterRanges r("L");
    r.add("weights.a", at(0x1000), 64, false);
    r.add("weights.b", at(0x1020), 64, false);  // overlaps weights.a: both only read
    r.add("grads.a", at(0x2000), 64, true);
    r.add("grads.b", at(0x2040), 64, true);  // touches grads.a's end: no shared byte
    r.add("grads.null", nullptr, 64, true);
    r.add("grads.empty", at(0x2000), 0, true);
    EXPECT_EQ(r.size(), 4u);
    EXPECT_NO_THROW(r.require_gradients_disjoint());
  }
  {
    ParameterRanges r("EncoderLayer");
    r.add("weights.a", at(0x1000), 64, false);
    r.add("grads.a", at(0x103f), 1, true);
    expect_error_all([&] { r.require_gradients_disjoint(); },
                     {"EncoderLayer: grads.a (1 bytes at 0x103f) overlaps weights.a (64 bytes at 0x1000)",
                      "a gradient must share bytes with no other parameter or gradient"});
  }
  {
    ParameterRanges r("L");
    r.add("grads.b", at(0x2000), 8, true);
    r.add("grads.a", at(0x1000), 0x1001, true);  // reaches one byte into grads.b
    expect_error_all([&] { r.require_gradients_disjoint(); }, {"grads.b", "overlaps grads.a"});
  }
  {  // A long weight seen first must not hide a gradient overlapping a shorter earlier one.
    ParameterRanges r("L");
    r.add("grads.a", at(0x1000), 0x100, true);
    r.add("weights.long", at(0x1001), 0x10000, false);
    r.add("weights.c", at(0x1080), 8, false);
    expect_error([&] { r.require_gradients_disjoint(); }, "overlaps grads.a");
  }
}

// Random layouts: the sweep refuses exactly when a brute-force pairwise check finds a pair that
// shares a byte and holds a gradient.
TEST(ParameterRanges, SweepAgreesWithThePairwiseCheckOnRandomLayouts) {
  std::mt19937_64 rng(20261124);
  int refused = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    struct R {
      std::uintptr_t p;
      std::size_t bytes;
      bool gradient;
    };
    std::vector<R> rs;
    ParameterRanges ranges("L");
    for (int i = 0; i < n; ++i) {
      const R r{0x10000 + rng() % 4096, 1 + rng() % (trial % 3 == 0 ? 64 : 600), rng() % 2 == 0};
      rs.push_back(r);
      ranges.add((r.gradient ? "grads." : "weights.") + std::to_string(i), at(r.p), r.bytes, r.gradient);
    }
    bool clash = false;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j)
        clash = clash || ((rs[i].gradient || rs[j].gradient) &&
                          bytes_overlap(at(rs[i].p), rs[i].bytes, at(rs[j].p), rs[j].bytes));
    bool threw = false;
    try {
      ranges.require_gradients_disjoint();
    } catch (const Error&) {
      threw = true;
    }
    ASSERT_EQ(threw, clash) << "trial " << trial;
    (clash ? refused : accepted) += 1;
  }
  EXPECT_GT(refused, 300);  // both outcomes are exercised
  EXPECT_GT(accepted, 300);
}

TEST(ParameterRanges, WrittenTensorsClearOfEveryViewReadOnesOfEveryGradient) {
  ParameterRanges r("DecoderLayer");
  r.add("weights.w", at(0x1000), 256, false);
  r.add("grads.w", at(0x2000), 256, true);
  expect_error_all([&] { r.require_written_clear("forward", "y", at(0x10f0), 32); },
                   {"DecoderLayer::forward: y (32 bytes at 0x10f0) overlaps weights.w (256 bytes at 0x1000)",
                    "the layer writes it"});
  expect_error_all([&] { r.require_written_clear("backward", "dx", at(0x1ff0), 17); },
                   {"DecoderLayer::backward: dx", "overlaps grads.w"});
  EXPECT_NO_THROW(r.require_read_clear("forward", "x", at(0x1000), 256));  // reading a weight's bytes
  expect_error_all([&] { r.require_read_clear("backward", "dy", at(0x20ff), 1); },
                   {"DecoderLayer::backward: dy (1 bytes at 0x20ff) overlaps grads.w",
                    "the layer reads it and writes the gradients"});
  EXPECT_NO_THROW(r.require_written_clear("forward", "y", at(0x1100), 0xf00));  // between the two
  EXPECT_NO_THROW(r.require_written_clear("forward", "y", nullptr, 64));
  EXPECT_NO_THROW(r.require_read_clear("forward", "lengths", at(0x2000), 0));
}

// Sizes below are small_config()'s (H = 12, ffn = 37, f16).
std::uintptr_t address_of(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

TEST(ParameterRangesLayers, EncoderLayersRefuseOverlappingGradientsBeforeAnyAllocation) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeEncoderParams p;
  // fc1_bias [ffn = 37] f16 placed 16 bytes into fc1_weight's gradient [37, 12].
  p.grads.fc1_bias = reinterpret_cast<void*>(address_of(p.grads.fc1_weight) + 16);
  const std::vector<std::string> needles = {"grads.fc1_bias (74 bytes",
                                            "overlaps grads.fc1_weight (888 bytes"};
  expect_error_all([&] { EncoderLayer l(small_config(), p.weights, p.grads, counter); }, needles);
  expect_error_all([&] { BaselineEncoderLayer l(small_config(), p.weights, p.grads, counter); }, needles);
  FakeEncoderParams q;
  // A gradient of layer 1 on a weight of layer 0: only the stack sees both.
  FakeEncoderParams ok;
  q.grads.qkv_bias = reinterpret_cast<void*>(address_of(ok.weights.out_weight) + 2);
  expect_error_all(
      [&] {
        EncoderStack s(small_config(), {ok.weights, q.weights}, {ok.grads, q.grads}, counter);
      },
      {"EncoderStack: layer 1 grads.qkv_bias", "overlaps layer 0 weights.out_weight"});
  expect_error_all(
      [&] {
        BaselineEncoderStack s(small_config(), {ok.weights, q.weights}, {ok.grads, q.grads}, counter);
      },
      {"BaselineEncoderStack: layer 1 grads.qkv_bias", "overlaps layer 0 weights.out_weight"});
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(ParameterRangesLayers, DecoderLayersRefuseOverlappingGradientsBeforeAnyAllocation) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeDecoderParams p;
  p.grads.cross_out_bias = const_cast<void*>(p.weights.cross_q_weight);  // a gradient written over a weight
  const std::vector<std::string> needles = {"grads.cross_out_bias", "weights.cross_q_weight"};
  expect_error_all([&] { DecoderLayer l(small_config(), p.weights, p.grads, counter); }, needles);
  expect_error_all([&] { BaselineDecoderLayer l(small_config(), p.weights, p.grads, counter); }, needles);
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(ParameterRangesLayers, ForwardRefusesCallerTensorsOnTheParameters) {
  HostBackend backend;
  CountingAllocator counter(backend);
  std::vector<char> host(1 << 16);
  void* x = host.data();
  void* y = host.data() + 8192;
  const void* enc = host.data() + 16384;
  FakeEncoderParams e;
  void* on_weight = const_cast<void*>(e.weights.fc2_weight);
  const void* on_grad = e.grads.attn_ln_beta;
  const std::vector<std::string> y_needles = {"::forward: y (", "overlaps weights.fc2_weight"};
  const std::vector<std::string> x_needles = {"::forward: x (", "overlaps grads.attn_ln_beta"};
  {
    EncoderLayer l(small_config(), e.weights, e.grads, counter);
    expect_error_all([&] { l.forward(on_weight, x, 2, 4, nullptr, 1, 0, nullptr); }, y_needles);
    expect_error_all([&] { l.forward(y, on_grad, 2, 4, nullptr, 1, 0, nullptr); }, x_needles);
    expect_error_all([&] { l.forward(y, x, 2, 4, static_cast<const std::int32_t*>(on_grad), 1, 0, nullptr); },
                     {"EncoderLayer::forward: key_lengths (8 bytes", "overlaps grads.attn_ln_beta"});
  }
  {
    BaselineEncoderLayer l(small_config(), e.weights, e.grads, counter);
    expect_error_all([&] { l.forward(on_weight, x, 2, 4, nullptr, 1, 0, nullptr); }, y_needles);
    expect_error_all([&] { l.forward(y, on_grad, 2, 4, nullptr, 1, 0, nullptr); }, x_needles);
  }
  FakeEncoderParams e1;
  {
    EncoderStack s(small_config(), {e.weights, e1.weights}, {e.grads, e1.grads}, counter);
    expect_error_all([&] { s.forward(on_weight, x, 2, 4, nullptr, 1, 0, nullptr); },
                     {"EncoderStack::forward: y (", "overlaps layer 0 weights.fc2_weight"});
    expect_error_all([&] { s.forward(y, e1.grads.fc1_bias, 2, 4, nullptr, 1, 0, nullptr); },
                     {"EncoderStack::forward: x (", "overlaps layer 1 grads.fc1_bias"});
  }
  {
    BaselineEncoderLayerOptions o;  // the stack's own Gemm would need a device; this one is never used
    o.gemm = reinterpret_cast<Gemm*>(std::uintptr_t{1} << 40);
    BaselineEncoderStack s(small_config(), {e.weights, e1.weights}, {e.grads, e1.grads}, counter, o);
    expect_error_all([&] { s.forward(on_weight, x, 2, 4, nullptr, 1, 0, nullptr); },
                     {"BaselineEncoderStack::forward: y (", "overlaps layer 0 weights.fc2_weight"});
  }
  FakeDecoderParams d;
  void* on_dec_weight = const_cast<void*>(d.weights.self_qkv_weight);
  {
    DecoderLayer l(small_config(), d.weights, d.grads, counter);
    expect_error_all([&] { l.forward(on_dec_weight, x, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
                     {"DecoderLayer::forward: y (", "overlaps weights.self_qkv_weight"});
    expect_error_all([&] { l.forward(y, x, d.grads.ffn_ln_gamma, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
                     {"DecoderLayer::forward: encoder_out (", "overlaps grads.ffn_ln_gamma"});
  }
  {
    BaselineDecoderLayer l(small_config(), d.weights, d.grads, counter);
    expect_error_all([&] { l.forward(on_dec_weight, x, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
                     {"BaselineDecoderLayer::forward: y (", "overlaps weights.self_qkv_weight"});
    expect_error_all(
        [&] {
          l.forward(y, x, enc, 2, 4, 3, nullptr, static_cast<const std::int32_t*>(d.grads.fc2_bias), 1, 0,
                    nullptr);
        },
        {"BaselineDecoderLayer::forward: source_lengths (8 bytes", "overlaps grads.fc2_bias"});
  }
}

}  // namespace
}  // namespace seqbench::layers
