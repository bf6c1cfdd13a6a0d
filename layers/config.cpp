#include "layers/config.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "kernels/softmax.h"

namespace seqbench::layers {

std::string_view activation_name(Activation activation) {
  switch (activation) {
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
  }
  return "invalid";
}

Activation parse_activation(std::string_view text) {
  if (text == "relu") return Activation::relu;
  if (text == "gelu") return Activation::gelu;
  if (text == "gelu_tanh" || text == "gelu_new") return Activation::gelu_tanh;
  SEQBENCH_FAIL("unknown activation '" << text << "': expected one of relu, gelu, gelu_tanh");
}

namespace {

bool is_valid_activation(Activation a) {
  return a == Activation::relu || a == Activation::gelu || a == Activation::gelu_tanh;
}

bool is_valid_dtype(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

// Every rule is checked, so that one message lists everything that needs fixing.
class Problems {
 public:
  template <class Fn>
  void require(bool ok, Fn&& describe_problem) {
    if (ok) return;
    std::ostringstream os;
    describe_problem(os);
    if (count_++ > 0) text_ += "; ";
    text_ += os.str();
  }
  bool empty() const { return count_ == 0; }
  const std::string& text() const { return text_; }

 private:
  int count_ = 0;
  std::string text_;
};

void require_positive(Problems& p, const char* field, int value) {
  p.require(value > 0, [&](std::ostream& os) { os << field << " (" << value << ") must be positive"; });
}

void require_ratio(Problems& p, const char* field, double value) {
  // NaN fails both comparisons, so it is reported here too.
  // The kernels take the ratio as a float: a double just below 1 that rounds to 1.0f would drop
  // every element, so the float is what must be below 1. (The double is compared first: casting one
  // above FLT_MAX to float is undefined.)
  p.require(std::isfinite(value) && value >= 0.0 && value < 1.0 && static_cast<float>(value) < 1.0f,
            [&](std::ostream& os) {
              if (value >= 0.0 && value < 1.0) {
                os << field << " (" << std::setprecision(17) << value << std::setprecision(6)
                   << ") rounds to 1 as the kernels' float: a ratio of 1 would drop every element";
              } else {
                os << field << " (" << value << ") must be in [0, 1): a ratio of 1 would drop every element";
              }
            });
}

}  // namespace

void LayerConfig::validate() const {
  Problems p;
  require_positive(p, "max_batch_tokens", max_batch_tokens);
  require_positive(p, "max_seq_len", max_seq_len);
  require_positive(p, "hidden", hidden);
  require_positive(p, "ffn", ffn);
  require_positive(p, "heads", heads);
  if (hidden > 0 && heads > 0) {
    p.require(hidden % heads == 0, [&](std::ostream& os) {
      os << "hidden (" << hidden << ") must be a multiple of heads (" << heads << ")";
    });
  }
  if (max_seq_len > 0 && max_batch_tokens > 0) {
    p.require(max_seq_len <= max_batch_tokens, [&](std::ostream& os) {
      os << "max_seq_len (" << max_seq_len << ") must not exceed max_batch_tokens (" << max_batch_tokens
         << "): no batch could hold one full-length sentence";
    });
  }
  require_ratio(p, "attn_dropout", attn_dropout);
  require_ratio(p, "activation_dropout", activation_dropout);
  require_ratio(p, "hidden_dropout", hidden_dropout);
  p.require(std::isfinite(layer_norm_eps) && layer_norm_eps > 0.0, [&](std::ostream& os) {
    os << "layer_norm_eps (" << layer_norm_eps << ") must be positive and finite";
  });
  // The LayerNorm kernels take eps as a float (and refuse 0 or inf, but only at the forward, after
  // the GEMMs before it): the float must be positive and finite too. (The double is compared
  // first: casting one above FLT_MAX to float is undefined.)
  if (std::isfinite(layer_norm_eps) && layer_norm_eps > 0.0) {
    p.require(
        layer_norm_eps <= std::numeric_limits<float>::max() && static_cast<float>(layer_norm_eps) > 0.0f,
        [&](std::ostream& os) {
          os << "layer_norm_eps (" << layer_norm_eps << ") is " << (layer_norm_eps > 1.0 ? "inf" : "0")
             << " as the kernels' float";
        });
  }
  // Sizes the layers plan from these fields, checked here so that no product wraps and no kernel
  // refuses a shape mid-step: the attention softmax runs max_batch_tokens·heads rows (the kernel's
  // limit), and every planned tensor, the largest being the attention scores (max_batch_tokens ·
  // max_seq_len · heads elements), the FFN activation (max_batch_tokens · ffn) and the QKV
  // projection (3 · max_batch_tokens · hidden), stays within 2^62 bytes in fp32.
  if (max_batch_tokens > 0 && heads > 0) {
    const std::int64_t rows = std::int64_t{max_batch_tokens} * heads;
    p.require(rows <= kernels::kSoftmaxMaxRows, [&](std::ostream& os) {
      os << "max_batch_tokens (" << max_batch_tokens << ") x heads (" << heads << ") = " << rows
         << " attention-softmax rows exceed " << kernels::kSoftmaxMaxRows;
    });
  }
  const auto bytes_fit = [](std::initializer_list<int> factors) {
    unsigned __int128 product = 4;  // fp32 elements
    for (const int f : factors) product *= static_cast<unsigned __int128>(f);
    return product <= (static_cast<unsigned __int128>(1) << 62);
  };
  const struct {
    const char* what;
    std::initializer_list<int> factors;
    const char* formula;
  } planned[] = {
      {"attention scores", {max_batch_tokens, max_seq_len, heads}, "max_batch_tokens x max_seq_len x heads"},
      {"FFN activation", {max_batch_tokens, ffn}, "max_batch_tokens x ffn"},
      {"QKV projection", {max_batch_tokens, hidden, 3}, "3 x max_batch_tokens x hidden"},
  };
  if (max_batch_tokens > 0 && max_seq_len > 0 && heads > 0 && ffn > 0 && hidden > 0) {
    for (const auto& t : planned) {
      p.require(bytes_fit(t.factors), [&](std::ostream& os) {
        os << "the " << t.what << " (" << t.formula << " = ";
        long double n = 1;
        for (const int f : t.factors) n *= f;
        os << n << " elements) exceed 2^62 bytes in fp32";
      });
    }
  }
  p.require(is_valid_activation(activation), [&](std::ostream& os) {
    os << "activation (" << static_cast<int>(activation) << ") is not relu, gelu or gelu_tanh";
  });
  p.require(is_valid_dtype(dtype), [&](std::ostream& os) {
    os << "dtype (" << static_cast<int>(dtype) << ") is not f32, f16 or bf16";
  });
  SEQBENCH_REQUIRE(p.empty(), "invalid LayerConfig: " << p.text());
}

void LayerConfig::check_batch(std::size_t batch_size, std::size_t seq_len) const {
  check_batch_maxima(batch_size, seq_len, max_batch_tokens, max_seq_len);
}

void check_batch_maxima(std::size_t batch_size, std::size_t seq_len, int max_batch_tokens, int max_seq_len) {
  SEQBENCH_REQUIRE(batch_size >= 1, "batch_size " << batch_size << " must be at least 1");
  SEQBENCH_REQUIRE(seq_len >= 1, "seq_len " << seq_len << " must be at least 1");
  SEQBENCH_REQUIRE(seq_len <= static_cast<std::size_t>(max_seq_len),
                   "seq_len " << seq_len << " exceeds max_seq_len " << max_seq_len
                              << " (the length the layer's memory was planned for)");
  // Divide rather than multiply, so that a huge batch_size cannot wrap around.
  SEQBENCH_REQUIRE(batch_size <= static_cast<std::size_t>(max_batch_tokens) / seq_len,
                   "batch tokens " << batch_size << " x " << seq_len << " = "
                                   << static_cast<double>(batch_size) * static_cast<double>(seq_len)
                                   << " exceed max_batch_tokens " << max_batch_tokens
                                   << " (the tokens the layer's memory was planned for)");
}

std::string describe(const LayerConfig& c) {
  std::ostringstream os;
  os << "max_batch_tokens=" << c.max_batch_tokens << " max_seq_len=" << c.max_seq_len
     << " hidden=" << c.hidden << " ffn=" << c.ffn << " heads=" << c.heads
     << " attn_dropout=" << c.attn_dropout << " activation_dropout=" << c.activation_dropout
     << " hidden_dropout=" << c.hidden_dropout << " pre_layer_norm=" << (c.pre_layer_norm ? "true" : "false")
     << " activation=" << activation_name(c.activation) << " dtype=" << dtype_name(c.dtype)
     << " layer_norm_eps=" << c.layer_norm_eps;
  return os.str();
}

namespace {

// Batch-size maxima are training settings, not model properties. Every preset plans for 8192
// padded tokens, the --max-tokens of LightSeq's own WMT14 recipe
// (bytedance/lightseq examples/training/fairseq/ls_fairseq_wmt14en2de.sh), so that the presets
// compare at equal token counts. Every preset trains in fp16, as all of LightSeq2's experiments do.
constexpr int kMaxBatchTokens = 8192;

LayerConfig make(int max_seq_len, int hidden, int ffn, int heads, double attn_dropout,
                 double activation_dropout, double hidden_dropout, bool pre_layer_norm, Activation activation,
                 double layer_norm_eps) {
  LayerConfig c;
  c.max_batch_tokens = kMaxBatchTokens;
  c.max_seq_len = max_seq_len;
  c.hidden = hidden;
  c.ffn = ffn;
  c.heads = heads;
  c.attn_dropout = attn_dropout;
  c.activation_dropout = activation_dropout;
  c.hidden_dropout = hidden_dropout;
  c.pre_layer_norm = pre_layer_norm;
  c.activation = activation;
  c.dtype = DType::f16;
  c.layer_norm_eps = layer_norm_eps;
  return c;
}

std::vector<ModelPreset> make_presets() {
  std::vector<ModelPreset> p;
  // fairseq's DEFAULT_MAX_SOURCE_POSITIONS/TARGET_POSITIONS = 1024 bound the sentence length (not
  // LightSeq's hard-coded MAX_SEQ_LENGTH = 300, one of the pitfalls this project avoids).
  p.push_back({"transformer-base", make(1024, 512, 2048, 8, 0.0, 0.0, 0.1, false, Activation::relu, 1e-5), 6,
               6, false,
               "Vaswani et al. 2017, Table 3 'base' (d_model 512, d_ff 2048, h 8, N 6, P_drop 0.1, post-LN); "
               "fairseq arch transformer_wmt_en_de (attention_dropout 0, activation_dropout 0, "
               "max_source_positions 1024, LayerNorm eps 1e-5)"});
  p.push_back(
      {"transformer-big", make(1024, 1024, 4096, 16, 0.1, 0.1, 0.3, true, Activation::relu, 1e-5), 6, 6,
       false,
       "Vaswani et al. 2017, Table 3 'big' (d_model 1024, d_ff 4096, h 16, N 6, P_drop 0.3 on EN-DE); "
       "fairseq arch transformer_wmt_en_de_big_t2t, which LightSeq's WMT14 recipe trains "
       "(ls_transformer_wmt_en_de_big_t2t: pre-LN, attention_dropout 0.1, activation_dropout 0.1)"});
  // BERT: Hugging Face configs of google-bert/bert-base-uncased and bert-large-uncased
  // (hidden_act "gelu" = erf GELU in transformers; the original TF code used the tanh form).
  p.push_back({"bert-base", make(512, 768, 3072, 12, 0.1, 0.0, 0.1, false, Activation::gelu, 1e-12), 12, 0,
               false,
               "huggingface.co/google-bert/bert-base-uncased config.json: hidden_size 768, intermediate_size "
               "3072, num_attention_heads 12, num_hidden_layers 12, max_position_embeddings 512, "
               "hidden/attention_probs_dropout_prob 0.1, layer_norm_eps 1e-12, post-LN"});
  p.push_back(
      {"bert-large", make(512, 1024, 4096, 16, 0.1, 0.0, 0.1, false, Activation::gelu, 1e-12), 24, 0, false,
       "huggingface.co/google-bert/bert-large-uncased config.json: hidden_size 1024, intermediate_size "
       "4096, num_attention_heads 16, num_hidden_layers 24, max_position_embeddings 512, "
       "hidden/attention_probs_dropout_prob 0.1, layer_norm_eps 1e-12, post-LN"});
  // GPT-2: n_inner null means 4 x n_embd; resid_pdrop is the hidden dropout; pre-LN blocks.
  p.push_back({"gpt2-small", make(1024, 768, 3072, 12, 0.1, 0.0, 0.1, true, Activation::gelu_tanh, 1e-5), 12,
               0, true,
               "huggingface.co/openai-community/gpt2 config.json: n_embd 768, n_head 12, n_layer 12, "
               "n_positions 1024, n_inner null (= 4 x 768), activation gelu_new, attn_pdrop/resid_pdrop 0.1, "
               "layer_norm_epsilon 1e-5, pre-LN"});
  p.push_back(
      {"gpt2-large", make(1024, 1280, 5120, 20, 0.1, 0.0, 0.1, true, Activation::gelu_tanh, 1e-5), 36, 0,
       true,
       "huggingface.co/openai-community/gpt2-large config.json: n_embd 1280, n_head 20, n_layer 36, "
       "n_positions 1024, n_inner null (= 4 x 1280), activation gelu_new, attn_pdrop/resid_pdrop 0.1, "
       "layer_norm_epsilon 1e-5, pre-LN"});
  // ViT at 224 x 224 with 32 x 32 patches: (224/32)^2 = 49 patches + the class token = 50 positions.
  p.push_back(
      {"vit-b-32", make(50, 768, 3072, 12, 0.0, 0.1, 0.1, true, Activation::gelu, 1e-12), 12, 0, false,
       "huggingface.co/google/vit-base-patch32-224-in21k config.json: hidden_size 768, intermediate_size "
       "3072, num_attention_heads 12, num_hidden_layers 12, patch_size 32, image_size 224 (50 "
       "positions), layer_norm_eps 1e-12, pre-LN; dropout 0.1 as Dosovitskiy et al. 2021, Table 3 "
       "(ImageNet-21k pre-training), applied after the GELU and after each sub-layer as the reference "
       "MlpBlock does (google-research/vision_transformer), attention dropout 0"});
  p.push_back(
      {"vit-l-32", make(50, 1024, 4096, 16, 0.0, 0.1, 0.1, true, Activation::gelu, 1e-12), 24, 0, false,
       "huggingface.co/google/vit-large-patch32-224-in21k config.json: hidden_size 1024, "
       "intermediate_size 4096, num_attention_heads 16, num_hidden_layers 24, patch_size 32, image_size "
       "224 (50 positions), layer_norm_eps 1e-12, pre-LN; dropout 0.1 as Dosovitskiy et al. 2021, "
       "Table 3 (ImageNet-21k pre-training), after the GELU and after each sub-layer, attention "
       "dropout 0"});
  for (const ModelPreset& m : p) m.layer.validate();
  return p;
}

const std::vector<ModelPreset>& all_presets() {
  static const std::vector<ModelPreset> presets = make_presets();
  return presets;
}

}  // namespace

const ModelPreset& preset(std::string_view name) {
  std::string known;
  for (const ModelPreset& m : all_presets()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  SEQBENCH_FAIL("unknown model preset '" << name << "': known presets are " << known);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelPreset& m : all_presets()) names.push_back(m.name);
  return names;
}

}  // namespace seqbench::layers
