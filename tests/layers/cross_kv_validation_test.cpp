// CrossAttentionKV and DecoderLayer's external-K/V mode without a GPU: construction and argument
// validation (every check runs before any CUDA call; host-memory fake allocator), the one planned
// allocation, the dry run of CrossAttentionKV, and the decoder's dry run in external-K/V mode:
// exactly the default dry run without the cross-attention's K/V GEMM, split, their backward and
// their tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/cross_kv.h"
#include "layers/decoder_layer.h"
#include "layers/memory_planner.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using namespace layer_test;

// Four disjoint fake parameter ranges (host memory, never dereferenced), big enough for 3 layers
// of small_config: W [72, 12], b [72] in f16.
struct FakeKv {
  std::vector<char> storage = std::vector<char>(4 * 4096);
  const void* w = storage.data();
  const void* b = storage.data() + 4096;
  void* dw = storage.data() + 2 * 4096;
  void* db = storage.data() + 3 * 4096;
};

TEST(CrossKvValidation, ParameterShapes) {
  const std::vector<ParameterShape> s = cross_kv_parameter_shapes(small_config(), 3);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "kv_weight_all");
  EXPECT_EQ(s[0].rows, 72u);  // layers·2H
  EXPECT_EQ(s[0].cols, 12u);
  EXPECT_EQ(s[1].name, "kv_bias_all");
  EXPECT_EQ(s[1].elements(), 72u);
}

TEST(CrossKvValidation, BadArgumentsAreRefusedBeforeAnyAllocation) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeKv p;
  for (const int layers : {0, -1}) {
    expect_error([&] { CrossAttentionKV kv(small_config(), layers, p.w, p.b, p.dw, p.db, counter); },
                 "CrossAttentionKV: layers " + std::to_string(layers) + " must be at least 1");
  }
  expect_error([&] { cross_kv_lifetimes(small_config(), 0); },
               "cross_kv_lifetimes: layers 0 must be at least 1");
  expect_error([&] { cross_kv_parameter_shapes(small_config(), 0); }, "layers 0 must be at least 1");
  // layers·2H must fit one GEMM's (32-bit) column count: 2^31 / 24 layers of H = 12 do not.
  expect_error_all([&] { CrossAttentionKV kv(small_config(), 89478486, p.w, p.b, p.dw, p.db, counter); },
                   {"layers·2H = 89478486·24", "exceeds 2147483647"});
  LayerConfig bad = small_config();
  bad.hidden = 10;
  expect_error([&] { CrossAttentionKV kv(bad, 2, p.w, p.b, p.dw, p.db, counter); },
               "hidden (10) must be a multiple of heads (3)");
  expect_error_all([&] { CrossAttentionKV kv(small_config(), 2, nullptr, p.b, p.dw, nullptr, counter); },
                   {"null parameter pointer", "kv_weight_all", "d_kv_bias_all"});
  expect_error([&] { CrossAttentionKV kv(small_config(), 2, p.w, p.b, nullptr, p.db, counter); },
               "CrossAttentionKV: null parameter pointer(s): d_kv_weight_all");
  // Overlaps: 2 layers of f16 H = 12: W 48·12·2 = 1152 bytes, b 96 bytes.
  char* base = static_cast<char*>(p.dw);
  expect_error([&] { CrossAttentionKV kv(small_config(), 2, p.w, p.b, base, base + 1150, counter); },
               "CrossAttentionKV: the gradients d_kv_weight_all [48, 12] and d_kv_bias_all [48] overlap");
  expect_error(
      [&] { CrossAttentionKV kv(small_config(), 2, p.w, p.b, p.storage.data() + 10, p.db, counter); },
      "overlap each other or the weights");
  expect_error(
      [&] { CrossAttentionKV kv(small_config(), 2, p.w, p.b, p.dw, p.storage.data() + 4096 + 8, counter); },
      "overlap each other or the weights");
  // Adjacent is fine: the gradient bias right after the gradient weight.
  EXPECT_NO_THROW(CrossAttentionKV(small_config(), 2, p.w, p.b, base, base + 1152, counter));
  EXPECT_EQ(counter.stats().allocations, 1u);  // only the last, valid one allocated
  CrossAttentionKVOptions options;
  options.prefix = "";
  expect_error([&] { CrossAttentionKV kv(small_config(), 2, p.w, p.b, p.dw, p.db, counter, options); },
               "options.prefix is empty");
  EXPECT_EQ(counter.stats().allocations, 1u);
}

TEST(CrossKvValidation, DryRunAndOneAllocation) {
  for (const int layers : {1, 2, 3}) {
    SCOPED_TRACE("layers " + std::to_string(layers));
    CrossAttentionKVOptions options;
    options.prefix = "ckv.";
    options.gemm_workspace_bytes = 4096;
    std::vector<std::string> ops;
    int forward_ops = 0;
    const std::vector<TensorLifetime> tensors =
        cross_kv_lifetimes(small_config(), layers, options, &ops, &forward_ops);
    EXPECT_EQ(ops, (std::vector<std::string>{"ckv.kv_gemm", "ckv.kv_bias_split", "ckv.decoder_layers",
                                             "ckv.kv_bias_split_bwd", "ckv.kv_gemm_bwd"}));
    EXPECT_EQ(forward_ops, 2);
    const std::set<std::string> names = names_of(tensors);
    std::set<std::string> want = {"encoder_out", "d_encoder_out", "ckv.gemm_workspace",
                                  "ckv.kv_all",  "ckv.d_kv_all",  "ckv.kv_bias_split_bwd_ws"};
    for (int l = 0; l < layers; ++l) {
      want.insert("ckv.kv_heads." + std::to_string(l));
      want.insert("ckv.d_kv_heads." + std::to_string(l));
    }
    EXPECT_EQ(names, want);
    const std::size_t T = 64, H = 12, e = 2, C = static_cast<std::size_t>(layers) * 2 * H;
    for (const TensorLifetime& t : tensors) {
      if (t.name == "ckv.kv_all" || t.name == "ckv.d_kv_all") {
        EXPECT_EQ(t.bytes, T * C * e) << t.name;
      }
      if (t.name.find("kv_heads.") != std::string::npos) {
        EXPECT_EQ(t.bytes, 2 * T * H * e) << t.name;
      }
      if (t.name.find("kv_heads.") != std::string::npos && t.name.find("d_kv") == std::string::npos) {
        // Written by the forward's split, live through the decoder_layers step (the layers
        // read them there).
        EXPECT_EQ(t.first_step, 1) << t.name;
        EXPECT_EQ(t.last_step, 2) << t.name;
      }
      if (t.name.find("d_kv_heads.") != std::string::npos) {
        // Written by the layers (the decoder_layers step), read by the backward's merge.
        EXPECT_EQ(t.first_step, 2) << t.name;
        EXPECT_EQ(t.last_step, 3) << t.name;
      }
    }
    EXPECT_NO_THROW(check_plan(tensors, plan_memory(tensors)));

    HostBackend backend;
    CountingAllocator counter(backend);
    FakeKv p;
    {
      CrossAttentionKV kv(small_config(), layers, p.w, p.b, p.dw, p.db, counter, options);
      EXPECT_EQ(counter.stats().allocations, 1u);
      EXPECT_EQ(counter.stats().bytes_allocated, kv.block_bytes());
      EXPECT_EQ(kv.layers(), layers);
      EXPECT_TRUE(find_plan_violations(kv.memory().tensors(), kv.memory().plan()).empty());
      EXPECT_GE(kv.block_bytes(), max_live_bytes(kv.memory().tensors(), /*padded=*/false));
    }
    EXPECT_EQ(counter.stats().live_bytes, 0u);
  }
}

// With the caller's Gemm the object plans no GEMM workspace of its own (the dry run only looks
// at whether the pointer is set; it is never dereferenced here).
TEST(CrossKvValidation, ASharedGemmPlansNoWorkspace) {
  CrossAttentionKVOptions options;
  options.gemm = reinterpret_cast<Gemm*>(std::uintptr_t{1} << 40);
  const std::set<std::string> names = names_of(cross_kv_lifetimes(small_config(), 2, options));
  EXPECT_EQ(names.count("cross_kv.gemm_workspace"), 0u);
  EXPECT_EQ(names.count("cross_kv.kv_all"), 1u);
  EXPECT_EQ(names_of(cross_kv_lifetimes(small_config(), 2)).count("cross_kv.gemm_workspace"), 1u);
}

TEST(CrossKvValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeKv p;
  CrossAttentionKV kv(small_config(), 2, p.w, p.b, p.dw, p.db, counter);
  std::vector<char> host(1 << 14);
  void* enc = host.data();
  expect_error_all([&] { kv.forward(enc, 8, 16, nullptr); }, {"batch tokens 8 x 16", "max_batch_tokens 64"});
  expect_error([&] { kv.forward(enc, 1, 17, nullptr); }, "exceeds max_seq_len 16");
  expect_error([&] { kv.forward(enc, 0, 4, nullptr); }, "batch_size 0 must be at least 1");
  expect_error([&] { kv.forward(nullptr, 2, 4, nullptr); }, "CrossAttentionKV::forward: encoder_out is null");
  const char* block = static_cast<const char*>(kv.memory().block());
  expect_error([&] { kv.forward(block + 16, 2, 4, nullptr); },
               "CrossAttentionKV::forward: encoder_out overlaps the layer's planned block");
  expect_error([&] { kv.backward(host.data() + 4096, enc, nullptr); },
               "CrossAttentionKV::backward: no forward() to differentiate");
  expect_error([&] { kv.kv_heads(0); }, "CrossAttentionKV::kv_heads: no forward() yet");
  expect_error([&] { kv.d_kv_heads(1); }, "CrossAttentionKV::d_kv_heads: no forward() yet");
  EXPECT_EQ(counter.stats().allocations, 1u);
}

// The external-K/V decoder: its dry run is the default one less the cross-attention's K/V GEMM,
// split and their backward (and their tensors), with the externals renamed; every other tensor
// keeps its name and size and every other op its order.
TEST(CrossKvValidation, DecoderDryRunInExternalKvModeOmitsTheKvTensors) {
  for (const bool pre : {true, false}) {
    for (const double attn_dropout : {0.0, 0.1}) {
      const LayerConfig c = small_config(pre, attn_dropout);
      SCOPED_TRACE(variant_name(pre, attn_dropout));
      DecoderLayerOptions def;
      def.prefix = "dec1.";
      DecoderLayerOptions ext = def;
      ext.external_kv = true;
      std::vector<std::string> def_ops, ext_ops;
      int def_fwd = 0, ext_fwd = 0;
      const std::vector<TensorLifetime> dt = decoder_layer_lifetimes(c, def, &def_ops, &def_fwd);
      const std::vector<TensorLifetime> et = decoder_layer_lifetimes(c, ext, &ext_ops, &ext_fwd);
      const std::set<std::string> kv_ops = {"dec1.cross.kv_gemm", "dec1.cross.kv_bias_split",
                                            "dec1.cross.kv_bias_split_bwd", "dec1.cross.kv_gemm_bwd"};
      std::vector<std::string> want_ops;
      for (const std::string& op : def_ops)
        if (kv_ops.count(op) == 0) want_ops.push_back(op);
      EXPECT_EQ(want_ops.size(), def_ops.size() - 4);
      EXPECT_EQ(ext_ops, want_ops);
      EXPECT_EQ(ext_fwd, def_fwd - 2);
      const std::set<std::string> kv_tensors = {"dec1.cross.kv_raw", "dec1.cross.kv_heads",
                                                "dec1.cross.d_kv_heads", "dec1.cross.d_kv",
                                                "dec1.cross.kv_bias_split_bwd_ws"};
      const std::map<std::string, std::string> renamed = {{"encoder_out", "kv_heads"},
                                                          {"d_encoder_out", "d_kv_heads"}};
      std::map<std::string, std::size_t> want_tensors;
      for (const TensorLifetime& t : dt) {
        if (kv_tensors.count(t.name) != 0) continue;
        const auto r = renamed.find(t.name);
        want_tensors[r == renamed.end() ? t.name : r->second] = t.bytes;
      }
      std::map<std::string, std::size_t> got_tensors;
      for (const TensorLifetime& t : et) got_tensors[t.name] = t.bytes;
      EXPECT_EQ(got_tensors, want_tensors);
      const std::set<std::string> dnames = names_of(dt);
      for (const std::string& n : kv_tensors) EXPECT_EQ(dnames.count(n), 1u) << n;  // the default keeps them
      for (const TensorLifetime& t : et) {
        if (t.name == "kv_heads" || t.name == "d_kv_heads") {
          EXPECT_TRUE(t.external) << t.name;
        }
      }
      EXPECT_NO_THROW(check_plan(et, plan_memory(et)));
      EXPECT_LT(max_live_bytes(et, false), max_live_bytes(dt, false) + 1);
    }
  }
}

// The decoder's fake parameters, with the cross-attention's K/V projection null in external-K/V mode.
struct FakeParams : layer_test::FakeDecoderParams {
  explicit FakeParams(bool external_kv) {
    if (external_kv) {
      weights.cross_kv_weight = weights.cross_kv_bias = nullptr;
      grads.cross_kv_weight = grads.cross_kv_bias = nullptr;
    }
  }
};

TEST(CrossKvValidation, ExternalKvDecoderArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  DecoderLayerOptions ext;
  ext.external_kv = true;
  {
    FakeParams with_kv(false);
    expect_error([&] { DecoderLayer layer(small_config(), with_kv.weights, with_kv.grads, counter, ext); },
                 "options.external_kv: weights and grads cross_kv_weight and cross_kv_bias must be null");
    FakeParams one(true);
    one.grads.cross_kv_bias = one.grads.fc1_bias;
    expect_error([&] { DecoderLayer layer(small_config(), one.weights, one.grads, counter, ext); },
                 "cross_kv_weight and cross_kv_bias must be null");
    FakeParams missing(true);
    missing.weights.fc2_bias = nullptr;
    expect_error_all(
        [&] { DecoderLayer layer(small_config(), missing.weights, missing.grads, counter, ext); },
        {"null parameter pointer", "weights.fc2_bias"});
    // The default mode still requires the K/V projection.
    FakeParams none(true);
    expect_error_all(
        [&] { DecoderLayer layer(small_config(), none.weights, none.grads, counter); },
        {"weights.cross_kv_weight", "weights.cross_kv_bias", "grads.cross_kv_weight", "grads.cross_kv_bias"});
    EXPECT_EQ(counter.stats().allocations, 0u);
  }
  FakeParams params(true);
  DecoderLayer layer(small_config(), params.weights, params.grads, counter, ext);
  EXPECT_EQ(counter.stats().allocations, 1u);
  FakeParams dparams(false);
  DecoderLayer def(small_config(), dparams.weights, dparams.grads, counter);
  std::vector<char> host(1 << 16);
  char* h = host.data();
  void* x = h;
  void* kvh = h + 4096;  // [2, 2, 3, 3, 4] f16 = 288 bytes at B = 2, S = 3
  void* y = h + 8192;
  expect_error(
      [&] { layer.forward(y, x, kvh, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
      "DecoderLayer::forward: the layer takes external K/V heads (options.external_kv): call forward_kv");
  expect_error([&] { layer.backward(y, kvh, x, x, kvh, nullptr); },
               "DecoderLayer::backward: the layer takes external K/V heads");
  expect_error([&] { def.forward_kv(y, x, kvh, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "DecoderLayer::forward_kv: the layer projects the encoder output itself");
  expect_error([&] { def.backward_kv(y, kvh, x, x, kvh, nullptr); },
               "DecoderLayer::backward_kv: the layer projects the encoder output itself");
  expect_error([&] { layer.forward_kv(y, x, nullptr, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "DecoderLayer::forward_kv: kv_heads is null");
  expect_error([&] { layer.forward_kv(y, nullptr, kvh, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "DecoderLayer::forward_kv: x is null");
  expect_error([&] { layer.forward_kv(y, x, kvh, 2, 4, 17, nullptr, nullptr, 1, 0, nullptr); },
               "exceeds max_seq_len 16");
  // The heads are 2·B·S·H elements: y [B·L, H] starting 200 bytes after them overlaps (the
  // encoder output's B·S·H = 144 bytes would not).
  expect_error([&] { layer.forward_kv(h + 4096 + 200, x, kvh, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "DecoderLayer::forward_kv: y overlaps x or kv_heads; backward needs both unchanged");
  const char* block = static_cast<const char*>(layer.memory().block());
  expect_error([&] { layer.forward_kv(y, x, block + 64, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "DecoderLayer::forward_kv: kv_heads overlaps the layer's planned block");
  expect_error([&] { layer.forward_kv(y, x, kvh, 2, 4, 3, nullptr, nullptr, 1, UINT64_MAX - 5, nullptr); },
               "DecoderLayer::forward_kv: base_offset");
  expect_error([&] { layer.backward_kv(y, kvh, x, x, kvh, nullptr); },
               "DecoderLayer::backward_kv: no forward_kv() to differentiate (call forward_kv first");
  EXPECT_EQ(counter.stats().allocations, 2u);
}

// The CrossAttentionKV overloads: the heads' layout must be the layer's, the object must have
// run forward(), and a backward_kv must be for the object and layer its forward_kv read (the
// order checks that need a real forward are in tests/layers/cross_kv_test.cu).
TEST(CrossKvValidation, ExternalKvDecoderTakesOnlyMatchingHeadsFromTheObject) {
  HostBackend backend;
  CountingAllocator counter(backend);
  DecoderLayerOptions ext;
  ext.external_kv = true;
  FakeParams params(true);
  DecoderLayer layer(small_config(), params.weights, params.grads, counter, ext);
  FakeParams dparams(false);
  DecoderLayer def(small_config(), dparams.weights, dparams.grads, counter);
  FakeKv p;
  CrossAttentionKV kv(small_config(), 2, p.w, p.b, p.dw, p.db, counter);
  std::vector<char> host(1 << 16);
  void* x = host.data();
  void* y = host.data() + 8192;
  expect_error([&] { def.forward_kv(y, x, kv, 0, 4, nullptr, nullptr, 1, 0, nullptr); },
               "DecoderLayer::forward_kv: the layer projects the encoder output itself");
  expect_error([&] { def.backward_kv(y, kv, 0, x, x, nullptr); },
               "DecoderLayer::backward_kv: the layer projects the encoder output itself");
  expect_error([&] { layer.forward_kv(y, x, kv, 0, 4, nullptr, nullptr, 1, 0, nullptr); },
               "CrossAttentionKV::kv_heads: no forward() yet");
  expect_error([&] { layer.backward_kv(y, kv, 0, x, x, nullptr); },
               "DecoderLayer::backward_kv: the last forward_kv did not read layer 0 of this CrossAttentionKV "
               "(it took raw heads, or none ran)");
  expect_error([&] { kv.mark_d_kv_heads_written(0); },
               "CrossAttentionKV::mark_d_kv_heads_written: no forward() yet");
  // Heads laid out for another hidden size, head count or dtype are refused by name.
  LayerConfig other_dtype = small_config();
  other_dtype.dtype = DType::f32;
  LayerConfig other_heads = small_config();
  other_heads.heads = small_config().heads == 1 ? 2 : 1;
  for (const LayerConfig& c : {other_dtype, other_heads}) {
    CrossAttentionKV other(c, 2, p.w, p.b, p.dw, p.db, counter);
    expect_error_all([&] { layer.forward_kv(y, x, other, 0, 4, nullptr, nullptr, 1, 0, nullptr); },
                     {"DecoderLayer::forward_kv: the CrossAttentionKV's heads are laid out for hidden",
                      "but this layer has hidden " + std::to_string(small_config().hidden)});
  }
  EXPECT_EQ(counter.stats().allocations, 5u);
}

}  // namespace
}  // namespace seqbench::layers
