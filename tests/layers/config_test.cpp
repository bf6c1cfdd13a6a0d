// LayerConfig validation (every rule, each naming its fields), batch-shape limits, and the
// presets' numbers against their published configurations.
#include "layers/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/common/expect_error.h"

namespace seqbench::layers {
namespace {

using seqbench::testing::expect_error_all;

LayerConfig valid() {
  LayerConfig c;
  c.max_batch_tokens = 4096;
  c.max_seq_len = 256;
  c.hidden = 512;
  c.ffn = 2048;
  c.heads = 8;
  c.attn_dropout = 0.1;
  c.activation_dropout = 0.1;
  c.hidden_dropout = 0.1;
  return c;
}

TEST(LayerConfig, AValidConfigPasses) {
  EXPECT_NO_THROW(valid().validate());
  LayerConfig c = valid();
  c.attn_dropout = 0.0;
  c.activation_dropout = 0.0;
  // The largest ratio whose float (what the kernels take) is below 1.
  c.hidden_dropout = static_cast<double>(std::nextafter(1.0f, 0.0f));
  c.max_seq_len = c.max_batch_tokens;  // one full-length sentence fills a batch: allowed
  EXPECT_NO_THROW(c.validate());
  // A double below 1 that rounds to 1.0f would drop every element in the kernels: refused.
  for (const double below_one : {std::nextafter(1.0, 0.0), 1.0 - 0x1p-25, 0.99999999}) {
    LayerConfig d = c;
    d.hidden_dropout = below_one;
    expect_error_all([&] { d.validate(); }, {"hidden_dropout (0.99999", "rounds to 1 as the kernels' float"});
  }
  // Far above FLT_MAX (its float cast would be undefined): refused by the double's range.
  for (const double huge : {1e300, -1e300}) {
    LayerConfig d = c;
    d.hidden_dropout = huge;
    expect_error_all([&] { d.validate(); }, {"hidden_dropout (", "must be in [0, 1)"});
  }
  c.hidden_dropout = std::nextafter(1.0 - 0x1p-25, 0.0);  // rounds down to 1 - 2^-24
  EXPECT_NO_THROW(c.validate());
  c.heads = c.hidden;  // head_dim 1
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.head_dim(), 1);
  EXPECT_EQ(valid().head_dim(), 64);
}

TEST(LayerConfig, EverySizeMustBePositive) {
  struct Field {
    const char* name;
    int LayerConfig::*member;
  };
  const Field fields[] = {{"max_batch_tokens", &LayerConfig::max_batch_tokens},
                          {"max_seq_len", &LayerConfig::max_seq_len},
                          {"hidden", &LayerConfig::hidden},
                          {"ffn", &LayerConfig::ffn},
                          {"heads", &LayerConfig::heads}};
  for (const Field& f : fields) {
    for (int bad : {0, -1, std::numeric_limits<int>::min()}) {
      LayerConfig c = valid();
      c.*f.member = bad;
      SCOPED_TRACE(std::string(f.name) + " = " + std::to_string(bad));
      expect_error_all([&] { c.validate(); },
                       {"invalid LayerConfig", std::string(f.name) + " (" + std::to_string(bad) + ")",
                        "must be positive"});
    }
  }
}

TEST(LayerConfig, HeadsMustDivideHidden) {
  LayerConfig c = valid();
  c.hidden = 1000;
  c.heads = 16;
  expect_error_all([&] { c.validate(); }, {"hidden (1000)", "heads (16)", "multiple"});
  c.hidden = 7;
  c.heads = 8;  // more heads than features
  expect_error_all([&] { c.validate(); }, {"hidden (7)", "heads (8)"});
}

TEST(LayerConfig, MaxSeqLenMustFitInABatch) {
  LayerConfig c = valid();
  c.max_seq_len = c.max_batch_tokens + 1;
  expect_error_all([&] { c.validate(); }, {"max_seq_len (4097)", "max_batch_tokens (4096)"});
}

TEST(LayerConfig, EveryDropoutRatioMustBeInZeroOne) {
  struct Field {
    const char* name;
    double LayerConfig::*member;
  };
  const Field fields[] = {{"attn_dropout", &LayerConfig::attn_dropout},
                          {"activation_dropout", &LayerConfig::activation_dropout},
                          {"hidden_dropout", &LayerConfig::hidden_dropout}};
  const double bad_values[] = {-0.1,
                               -0.0 - 1e-300,
                               1.0,
                               1.5,
                               std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity()};
  for (const Field& f : fields) {
    for (double bad : bad_values) {
      LayerConfig c = valid();
      c.*f.member = bad;
      SCOPED_TRACE(std::string(f.name) + " = " + std::to_string(bad));
      expect_error_all([&] { c.validate(); }, {std::string(f.name) + " (", "[0, 1)"});
    }
  }
}

TEST(LayerConfig, LayerNormEpsMustBePositiveAndFinite) {
  for (double bad :
       {0.0, -1e-5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    LayerConfig c = valid();
    c.layer_norm_eps = bad;
    expect_error_all([&] { c.validate(); }, {"layer_norm_eps ("});
  }
}

// The kernels take eps as a float: a double that passes as positive and finite but is 0 or inf as
// a float is refused here, naming the field (the LayerNorm kernel refused it only at the forward,
// after the GEMMs before it, without naming layer_norm_eps).
TEST(LayerConfig, LayerNormEpsMustBePositiveAndFiniteAsAFloat) {
  for (const double zero : {1e-46, 1e-50}) {
    LayerConfig c = valid();
    c.layer_norm_eps = zero;
    expect_error_all([&] { c.validate(); }, {"layer_norm_eps (", ") is 0 as the kernels' float"});
  }
  for (const double huge : {1e39, 1e300}) {
    LayerConfig c = valid();
    c.layer_norm_eps = huge;
    expect_error_all([&] { c.validate(); }, {"layer_norm_eps (", ") is inf as the kernels' float"});
  }
  LayerConfig c = valid();
  c.layer_norm_eps = 1e-45;  // the smallest float subnormal, 1.4e-45: positive
  EXPECT_NO_THROW(c.validate());
  c.layer_norm_eps = std::numeric_limits<float>::max();
  EXPECT_NO_THROW(c.validate());
}

// What the layers plan from the fields is checked at validate(), not at the first forward: the
// softmax's rows (max_batch_tokens x heads <= 2^31 - 1) and every planned tensor within 2^62 bytes
// (max_batch_tokens = max_seq_len = 2^30 with 8 heads planned 0-byte attention scores: B·L²·N·2
// wrapped size_t).
TEST(LayerConfig, PlannedSizesMustFit) {
  LayerConfig c = valid();
  c.max_batch_tokens = 1 << 30;
  c.max_seq_len = 1 << 30;
  c.hidden = c.heads = c.ffn = 8;
  expect_error_all(
      [&] { c.validate(); },
      {"the attention scores (max_batch_tokens x max_seq_len x heads = 9.22337e+18 elements) "
       "exceed 2^62 bytes in fp32",
       "max_batch_tokens (1073741824) x heads (8) = 8589934592 attention-softmax rows exceed 2147483647"});
  c = valid();
  c.max_batch_tokens = 1 << 28;  // x 8 heads = 2^31 rows: one past the limit
  c.max_seq_len = 1;
  expect_error_all([&] { c.validate(); },
                   {"x heads (8) = 2147483648 attention-softmax rows exceed 2147483647"});
  c.heads = 4;  // 2^30 rows
  c.hidden = 512;
  EXPECT_NO_THROW(c.validate());
  c.ffn = 1 << 30;  // 2^28 x 2^30 x 4 bytes = 2^60: fits
  EXPECT_NO_THROW(c.validate());
  c.max_batch_tokens = (1 << 30);
  c.heads = 1;
  c.ffn = 1 << 30;  // 2^60 elements, 2^62 bytes: the limit itself
  EXPECT_NO_THROW(c.validate());
  c.ffn = (1 << 30) + 1;
  expect_error_all([&] { c.validate(); }, {"the FFN activation (max_batch_tokens x ffn = "});
  c.ffn = 8;
  c.hidden = (1 << 29) + 1;  // 3 x 2^30 x (2^29 + 1) x 4 > 2^62
  c.heads = 1;
  expect_error_all([&] { c.validate(); }, {"the QKV projection (3 x max_batch_tokens x hidden = "});
}

TEST(LayerConfig, EnumsMustBeEnumerators) {
  LayerConfig c = valid();
  c.activation = static_cast<Activation>(7);
  expect_error_all([&] { c.validate(); }, {"activation (7)"});
  c = valid();
  c.dtype = static_cast<DType>(9);
  expect_error_all([&] { c.validate(); }, {"dtype (9)"});
}

TEST(LayerConfig, OneMessageListsEveryProblem) {
  LayerConfig c = valid();
  c.hidden = 100;
  c.heads = 3;
  c.attn_dropout = 2.0;
  c.ffn = 0;
  c.max_seq_len = 5000;
  expect_error_all([&] { c.validate(); },
                   {"ffn (0)", "hidden (100)", "heads (3)", "attn_dropout (2)", "max_seq_len (5000)", "; "});
}

TEST(LayerConfig, CheckBatchNamesTheValueAndTheLimit) {
  const LayerConfig c = valid();            // 4096 tokens, 256 positions
  EXPECT_NO_THROW(c.check_batch(16, 256));  // exactly the token limit
  EXPECT_NO_THROW(c.check_batch(4096, 1));  // many one-token sentences
  EXPECT_NO_THROW(c.check_batch(1, 1));
  expect_error_all([&] { c.check_batch(1, 257); }, {"seq_len 257", "max_seq_len 256"});
  expect_error_all([&] { c.check_batch(17, 256); }, {"17 x 256", "4352", "max_batch_tokens 4096"});
  expect_error_all([&] { c.check_batch(0, 10); }, {"batch_size 0"});
  expect_error_all([&] { c.check_batch(10, 0); }, {"seq_len 0"});
  // A product that would wrap around size_t is still refused.
  expect_error_all([&] { c.check_batch(std::numeric_limits<std::size_t>::max() / 2 + 1, 2); },
                   {"max_batch_tokens 4096"});
}

TEST(LayerConfig, ActivationNamesRoundTrip) {
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh})
    EXPECT_EQ(parse_activation(activation_name(a)), a);
  EXPECT_EQ(parse_activation("gelu_new"), Activation::gelu_tanh);  // Hugging Face's name for it
  expect_error_all([] { parse_activation("swish"); }, {"'swish'", "relu, gelu, gelu_tanh"});
}

TEST(LayerConfig, DescribeNamesEveryField) {
  const std::string d = describe(valid());
  for (const char* field : {"max_batch_tokens=4096", "max_seq_len=256", "hidden=512", "ffn=2048", "heads=8",
                            "attn_dropout=0.1", "activation_dropout=0.1", "hidden_dropout=0.1",
                            "pre_layer_norm=true", "activation=relu", "dtype=f16", "layer_norm_eps=1e-05"})
    EXPECT_NE(d.find(field), std::string::npos) << field << " not in " << d;
}

// ---------------------------------------------------------------------------------------------
// Presets, against the published configurations cited in layers/config.cpp.

struct Expected {
  const char* name;
  int hidden, ffn, heads, encoder_layers, decoder_layers, max_seq_len;
  bool pre_ln, causal;
  Activation activation;
  double attn_dropout, activation_dropout, hidden_dropout, eps;
};

const Expected kExpected[] = {
    {"transformer-base", 512, 2048, 8, 6, 6, 1024, false, false, Activation::relu, 0.0, 0.0, 0.1, 1e-5},
    {"transformer-big", 1024, 4096, 16, 6, 6, 1024, true, false, Activation::relu, 0.1, 0.1, 0.3, 1e-5},
    {"bert-base", 768, 3072, 12, 12, 0, 512, false, false, Activation::gelu, 0.1, 0.0, 0.1, 1e-12},
    {"bert-large", 1024, 4096, 16, 24, 0, 512, false, false, Activation::gelu, 0.1, 0.0, 0.1, 1e-12},
    {"gpt2-small", 768, 3072, 12, 12, 0, 1024, true, true, Activation::gelu_tanh, 0.1, 0.0, 0.1, 1e-5},
    {"gpt2-large", 1280, 5120, 20, 36, 0, 1024, true, true, Activation::gelu_tanh, 0.1, 0.0, 0.1, 1e-5},
    {"vit-b-32", 768, 3072, 12, 12, 0, 50, true, false, Activation::gelu, 0.0, 0.1, 0.1, 1e-12},
    {"vit-l-32", 1024, 4096, 16, 24, 0, 50, true, false, Activation::gelu, 0.0, 0.1, 0.1, 1e-12},
};

TEST(ModelPreset, NumbersMatchThePublishedConfigs) {
  ASSERT_EQ(preset_names().size(), std::size(kExpected));
  std::size_t i = 0;
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(preset_names()[i++], e.name);  // the fixed order
    const ModelPreset& p = preset(e.name);
    EXPECT_EQ(p.name, e.name);
    EXPECT_EQ(p.layer.hidden, e.hidden);
    EXPECT_EQ(p.layer.ffn, e.ffn);
    EXPECT_EQ(p.layer.heads, e.heads);
    EXPECT_EQ(p.encoder_layers, e.encoder_layers);
    EXPECT_EQ(p.decoder_layers, e.decoder_layers);
    EXPECT_EQ(p.layer.max_seq_len, e.max_seq_len);
    EXPECT_EQ(p.layer.max_batch_tokens, 8192);
    EXPECT_EQ(p.layer.pre_layer_norm, e.pre_ln);
    EXPECT_EQ(p.causal, e.causal);
    EXPECT_EQ(p.layer.activation, e.activation);
    EXPECT_EQ(p.layer.attn_dropout, e.attn_dropout);
    EXPECT_EQ(p.layer.activation_dropout, e.activation_dropout);
    EXPECT_EQ(p.layer.hidden_dropout, e.hidden_dropout);
    EXPECT_EQ(p.layer.layer_norm_eps, e.eps);
    EXPECT_EQ(p.layer.dtype, DType::f16);
    EXPECT_FALSE(p.source.empty());
    EXPECT_NO_THROW(p.layer.validate());
    EXPECT_EQ(p.layer.hidden % p.layer.heads, 0);
    // Every published model here uses 64-wide heads.
    EXPECT_EQ(p.layer.head_dim(), 64);
  }
}

TEST(ModelPreset, ViTLengthIsThePatchCountPlusTheClassToken) {
  for (const char* name : {"vit-b-32", "vit-l-32"})
    EXPECT_EQ(preset(name).layer.max_seq_len, (224 / 32) * (224 / 32) + 1) << name;
}

TEST(ModelPreset, UnknownNameListsTheKnownOnes) {
  std::vector<std::string> needles{"'gpt3'"};
  for (const std::string& n : preset_names()) needles.push_back(n);
  expect_error_all([] { preset("gpt3"); }, needles);
  expect_error_all([] { preset(""); }, {"''", "transformer-base"});
  expect_error_all([] { preset("Bert-Base"); }, {"'Bert-Base'"});  // names are exact
}

}  // namespace
}  // namespace seqbench::layers
