#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "suites/suite_trainer.h"
#include "trainer/trainer.h"

namespace seqbench {
namespace {

using trainer::FusedOptimizer;
using trainer::OptimizerConfig;
using trainer::OptimizerKind;
using trainer::PrecisionMode;
using trainer::TensorSpec;
using trainer::Workspace;
using trainer::WorkspaceLayout;

// The parameter tensors of a model, one entry per PyTorch parameter (weights and biases apart), so
// the per-tensor and multi-tensor baselines see the tensor counts a real optimizer sees.
class TensorList {
 public:
  void add(std::string name, std::size_t count) { specs_.push_back({std::move(name), count}); }
  void linear(const std::string& prefix, std::size_t in, std::size_t out) {
    add(prefix + ".weight", in * out);
    add(prefix + ".bias", out);
  }
  void layer_norm(const std::string& prefix, std::size_t d) {
    add(prefix + ".weight", d);
    add(prefix + ".bias", d);
  }
  std::vector<TensorSpec> take() { return std::move(specs_); }

 private:
  std::vector<TensorSpec> specs_;
};

struct Model {
  std::string name;
  std::string source;
  std::vector<TensorSpec> tensors;
};

// Fairseq's `transformer` (post-norm, sinusoidal positions, --share-all-embeddings: one embedding
// shared by encoder input, decoder input and output projection), 6 + 6 layers.
// Sizes: Vaswani et al. 2017, "Attention Is All You Need", Table 3 (base: d_model 512, d_ff 2048;
// big: 1024, 4096), as fairseq's transformer_wmt_en_de / transformer_vaswani_wmt_en_de_big with
// the 32768-entry joined BPE dictionary of fairseq's WMT16 en-de recipe (examples/scaling_nmt).
// Count: 60,915,712 (base) and 209,911,808 (big); the paper's 65M / 213M use a 37000-token vocab.
// `vocab` and `layers` (each side) differ only for the tiny model (models()).
Model transformer(const std::string& name, std::size_t d, std::size_t ffn, std::size_t vocab = 32768,
                  std::size_t layers = 6,
                  std::string source =
                      "Vaswani et al. 2017 Table 3; fairseq transformer, shared 32768-token "
                      "dictionary") {
  TensorList t;
  t.add("embed_tokens.weight", vocab * d);
  const auto attention = [&](const std::string& p) {
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) t.linear(p + "." + proj, d, d);
  };
  for (std::size_t i = 0; i < layers; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i);
    attention(p + ".self_attn");
    t.layer_norm(p + ".self_attn_layer_norm", d);
    t.linear(p + ".fc1", d, ffn);
    t.linear(p + ".fc2", ffn, d);
    t.layer_norm(p + ".final_layer_norm", d);
  }
  for (std::size_t i = 0; i < layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i);
    attention(p + ".self_attn");
    t.layer_norm(p + ".self_attn_layer_norm", d);
    attention(p + ".encoder_attn");
    t.layer_norm(p + ".encoder_attn_layer_norm", d);
    t.linear(p + ".fc1", d, ffn);
    t.linear(p + ".fc2", ffn, d);
    t.layer_norm(p + ".final_layer_norm", d);
  }
  return {name, std::move(source), t.take()};
}

// Hugging Face BertModel (embeddings, encoder, pooler; the MLM head's decoder is tied to the word
// embeddings). Sizes: Devlin et al. 2019, "BERT", Sec. 3 (base: L 12, H 768, 110M; large: L 24,
// H 1024, 340M), vocab 30522 and 512 positions from google-research/bert's bert_config.json.
// Count: 109,482,240 (base) and 335,141,888 (large).
Model bert(const std::string& name, std::size_t h, std::size_t layers) {
  const std::size_t vocab = 30522, positions = 512, types = 2, ffn = 4 * h;
  TensorList t;
  t.add("embeddings.word_embeddings.weight", vocab * h);
  t.add("embeddings.position_embeddings.weight", positions * h);
  t.add("embeddings.token_type_embeddings.weight", types * h);
  t.layer_norm("embeddings.LayerNorm", h);
  for (std::size_t i = 0; i < layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i);
    for (const char* proj : {"query", "key", "value"}) t.linear(p + ".attention.self." + proj, h, h);
    t.linear(p + ".attention.output.dense", h, h);
    t.layer_norm(p + ".attention.output.LayerNorm", h);
    t.linear(p + ".intermediate.dense", h, ffn);
    t.linear(p + ".output.dense", ffn, h);
    t.layer_norm(p + ".output.LayerNorm", h);
  }
  t.linear("pooler.dense", h, h);
  return {name, "Devlin et al. 2019 Sec. 3; Hugging Face BertModel, vocab 30522", t.take()};
}

// Hugging Face GPT2Model (the LM head is tied to wte). Sizes: Radford et al. 2019, "Language Models
// are Unsupervised Multitask Learners", Table 2 (small: 12 layers, d 768; large: 36 layers, d 1280;
// the paper reports 117M / 762M), vocab 50257 and 1024 positions as the released checkpoints,
// whose counts are the ones used here: 124,439,808 (gpt2) and 774,030,080 (gpt2-large).
Model gpt2(const std::string& name, std::size_t d, std::size_t layers) {
  const std::size_t vocab = 50257, positions = 1024;
  TensorList t;
  t.add("wte.weight", vocab * d);
  t.add("wpe.weight", positions * d);
  for (std::size_t i = 0; i < layers; ++i) {
    const std::string p = "h." + std::to_string(i);
    t.layer_norm(p + ".ln_1", d);
    t.linear(p + ".attn.c_attn", d, 3 * d);
    t.linear(p + ".attn.c_proj", d, d);
    t.layer_norm(p + ".ln_2", d);
    t.linear(p + ".mlp.c_fc", d, 4 * d);
    t.linear(p + ".mlp.c_proj", 4 * d, d);
  }
  t.layer_norm("ln_f", d);
  return {name, "Radford et al. 2019 Table 2; Hugging Face GPT2Model checkpoints, vocab 50257", t.take()};
}

// Smallest first: quick mode keeps the first two. The tiny tier (SuiteOptions::tiny, for running the
// suite's timing path under tests/simt's CPU emulation) has one model of no paper: fairseq's
// transformer tensor list at odd sizes (d 21, ffn 50, vocab 997, 2 + 2 layers: 41,129 parameters
// in 85 tensors, most of them not a multiple of 4 elements), small enough for CPU fibers.
std::vector<Model> models(const SuiteOptions& options) {
  if (options.tiny)
    return {transformer("tiny-transformer", 21, 50, 997, 2,
                        "synthetic (SuiteOptions::tiny, tests/simt only): fairseq transformer's tensors at "
                        "d 21, ffn 50, vocab 997, 2 + 2 layers")};
  const bool quick = options.quick;
  std::vector<Model> all;
  all.push_back(transformer("transformer-base", 512, 2048));  // 61M
  all.push_back(bert("bert-base", 768, 12));                  // 110M
  if (quick) return all;
  all.push_back(gpt2("gpt2-small", 768, 12));                 // 124M
  all.push_back(transformer("transformer-big", 1024, 4096));  // 210M
  all.push_back(bert("bert-large", 1024, 24));                // 335M
  all.push_back(gpt2("gpt2-large", 1280, 36));                // 774M
  return all;
}

// Adam as LightSeq2/Fairseq train Transformers (betas 0.9/0.98); SGD with momentum 0.9.
OptimizerConfig optimizer_config(OptimizerKind kind) {
  OptimizerConfig c;
  c.kind = kind;
  if (kind == OptimizerKind::adam) {
    c.beta1 = 0.9;
    c.beta2 = 0.98;
    c.eps = 1e-8;
  } else {
    c.momentum = 0.9;
  }
  return c;
}

constexpr DType kDType = DType::f16;
// Mode (c), bf16 parameters with stochastic rounding: the same step over the same bytes in bf16,
// so that its time beside "fused" shows what the rounding's Philox draws cost.
constexpr DType kRoundingDType = DType::bf16;
constexpr std::uint64_t kRoundingSeed = 0x5eed0f5a;
constexpr double kLearningRate = 1e-3;
// Gradients are stored in [-1.01, -0.01] U [0.01, 1.01): finite fp16 values, never zero; divided by
// this fixed scale they are at most ~1e-3, and their squared sum stays far below float's range.
constexpr float kLossScale = 1024.0f;
constexpr std::uint64_t kParamSeed = 0x7121a1, kGradSeed = 0x9bad5eed;

template <class T>
__global__ void fill_kernel(T* out, std::size_t offset, std::size_t n, std::uint64_t seed, bool gradient) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    float v = 2.0f * philox_uniform(seed, 0, offset + i) - 1.0f;
    if (gradient) v += v < 0.0f ? -0.01f : 0.01f;
    out[offset + i] = from_float<T>(v);
  }
}

// Fills each tensor of the layout (never the zero padding between them) with values that depend
// only on the global index, so every variant starts from the same parameters and gradients.
void fill_tensors(const WorkspaceLayout& layout, DType dtype, void* base, std::uint64_t seed, bool gradient) {
  for (const trainer::TensorSlot& slot : layout.tensors()) {
    if (slot.count == 0) continue;
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(1024, (slot.count + 255) / 256));
    if (dtype == DType::f16)
      fill_kernel<__half>
          <<<blocks, 256>>>(static_cast<__half*>(base), slot.offset, slot.count, seed, gradient);
    else
      fill_kernel<__nv_bfloat16>
          <<<blocks, 256>>>(static_cast<__nv_bfloat16*>(base), slot.offset, slot.count, seed, gradient);
    SEQBENCH_CUDA_CHECK_LAUNCH();
  }
}

// One variant's training state: its own workspace (params, grads, master when needed) and optimizer
// (m/v or momentum, step count, scratch), plus Fairseq's fp32 gradient copy for the per-tensor one.
struct VariantState {
  std::unique_ptr<Workspace> workspace;
  std::unique_ptr<FusedOptimizer> optimizer;
  DeviceBuffer<float> grads_fp32;
};

struct TrainerState {
  DeviceBuffer<float> loss_scale;
  std::vector<std::unique_ptr<VariantState>> variants;
};

std::unique_ptr<VariantState> make_variant(const WorkspaceLayout& layout, const OptimizerConfig& config,
                                           PrecisionMode mode, bool per_tensor, DType dtype = kDType) {
  auto v = std::make_unique<VariantState>();
  const bool master = mode == PrecisionMode::master_fp32;
  v->workspace = std::make_unique<Workspace>(layout, dtype, master);
  fill_tensors(layout, dtype, v->workspace->params(), kParamSeed, false);
  fill_tensors(layout, dtype, v->workspace->grads(), kGradSeed, true);
  if (master) v->workspace->copy_params_to_master(nullptr);
  const std::uint64_t seed = mode == PrecisionMode::stochastic_rounding ? kRoundingSeed : 0;
  v->optimizer = std::make_unique<FusedOptimizer>(*v->workspace, config, mode, seed);
  if (per_tensor) {
    v->grads_fp32 = DeviceBuffer<float>(layout.total_elements());
    v->grads_fp32.fill_bytes(0);
  }
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  return v;
}

ExperimentSpec trainer_experiment(const Model& model, OptimizerKind kind) {
  const OptimizerConfig config = optimizer_config(kind);
  auto layout = std::make_shared<WorkspaceLayout>(model.tensors);
  const std::size_t n = layout->parameter_count();
  const auto footprint = [&](PrecisionMode mode) {
    return trainer::memory_footprint(n, kDType, config, mode).total();
  };
  // Minimal traffic of one update, the same for every variant (the work a step must do, whatever
  // the launches): fp16 params and grads, fp32 state, no master copy.
  //   Adam:         read p, g, m, v (2+2+4+4 = 12 B), write p, m, v (2+4+4 = 10 B)  = 22 B/param
  //   SGD momentum: read p, g, buf  (2+2+4   =  8 B), write p, buf   (2+4   =  6 B)  = 14 B/param
  // An fp32 master adds 6 B/param net (read + write of 4 B; p is then written, not read): 28 / 20.
  // The variants' extra traffic (master, Fairseq's fp32 gradient copy, the statistics pass's extra
  // gradient read) is overhead, so GB/s compares the same work across variants. fused_bf16_sr moves
  // exactly these bytes (bf16 is 2 B too; the rounding draws its bits from Philox, not memory).
  const double bytes =
      static_cast<double>(trainer::minimal_update_bytes(n, kDType, config, PrecisionMode::no_master));
  const std::string optimizer{trainer::optimizer_kind_name(kind)};

  ExperimentSpec e;
  e.name = optimizer + "/" + model.name;
  e.params = {
      {"model", model.name},
      {"source", model.source},
      {"optimizer", optimizer},
      // Params and grads of every variant but fused_bf16_sr, whose are stochastic_rounding_dtype's.
      {"dtype", std::string(dtype_name(kDType))},
      {"stochastic_rounding_dtype", std::string(dtype_name(kRoundingDType))},
      {"state_dtype", "f32"},
      {"parameters", n},
      {"tensors", layout->tensor_count()},
      {"workspace_elements", layout->total_elements()},
      {"lr", kLearningRate},
      {"loss_scale", kLossScale},
      {"max_grad_norm", 0.0},
      {"bytes_per_param", trainer::minimal_update_bytes(1, kDType, config, PrecisionMode::no_master)},
      {"bytes_per_param_master",
       trainer::minimal_update_bytes(1, kDType, config, PrecisionMode::master_fp32)},
      // Device bytes of params + grads + optimizer state (+ fp32 master) for each precision mode;
      // Fairseq's FP16Optimizer also keeps an fp32 copy of the gradients.
      {"footprint_bytes",
       {{"no_master", footprint(PrecisionMode::no_master)},
        {"master_fp32", footprint(PrecisionMode::master_fp32)},
        {"per_tensor_fairseq", footprint(PrecisionMode::master_fp32) + n * sizeof(float)},
        {"stochastic_rounding_bf16",
         trainer::memory_footprint(n, kRoundingDType, config, PrecisionMode::stochastic_rounding).total()}}},
  };
  // Every hyperparameter of the update, so that an outside runner steps the same rule.
  e.params["weight_decay"] = config.weight_decay;
  if (kind == OptimizerKind::adam) {
    e.params["betas"] = {config.beta1, config.beta2};
    e.params["eps"] = config.eps;
  } else {
    e.params["momentum"] = config.momentum;
    e.params["nesterov"] = config.nesterov;
  }
  // The parameter list itself, for suites/pytorch/ to build the same tensors (one per parameter).
  nlohmann::json elements = nlohmann::json::array();
  for (const TensorSpec& t : model.tensors) elements.push_back(t.count);
  e.inputs = {{"tensor_elements", std::move(elements)}};
  e.baseline = "per_tensor";
  e.variants = {{"per_tensor", bytes, 0},
                {"multi_tensor", bytes, 0},
                {"fused", bytes, 0},
                {"fused_master", bytes, 0},
                {"fused_bf16_sr", bytes, 0},
                // A component of `fused`, not a step: its update launch alone, on fused's state (the
                // control its last step left, found_inf 0, step fixed). It carries the same minimal
                // bytes, so its % of copy is the update kernel's own, and fused minus it is the time of
                // the statistics pass and the one-block decision: the split that says where a miss of
                // the 85 % target lies (no Nsight Systems on the device: time a stage left out).
                {"fused_update_only", bytes, 0, "fused"}};
  e.prepare = [layout, config, name = e.name] {
    auto state = std::make_shared<TrainerState>();
    state->loss_scale = DeviceBuffer<float>(std::vector<float>{kLossScale});
    // In the order of e.variants.
    state->variants.push_back(make_variant(*layout, config, PrecisionMode::master_fp32, true));
    state->variants.push_back(make_variant(*layout, config, PrecisionMode::no_master, false));
    state->variants.push_back(make_variant(*layout, config, PrecisionMode::no_master, false));
    state->variants.push_back(make_variant(*layout, config, PrecisionMode::master_fp32, false));
    state->variants.push_back(
        make_variant(*layout, config, PrecisionMode::stochastic_rounding, false, kRoundingDType));
    const trainer::StepOptions options{kLearningRate, 0.0};
    const float* scale = state->loss_scale.data();
    TrainerState* s = state.get();

    PreparedExperiment p;
    p.variants.push_back([s, layout, config, options, scale](cudaStream_t stream) {
      VariantState& v = *s->variants[0];
      Workspace& ws = *v.workspace;
      const trainer::PerTensorBuffers buffers{kDType,
                                              ws.params(),
                                              ws.grads(),
                                              ws.master(),
                                              v.grads_fp32.data(),
                                              v.optimizer->state0(),
                                              v.optimizer->state1()};
      trainer::launch_per_tensor_step(*layout, buffers, config, options, scale, v.optimizer->scratch(),
                                      stream);
    });
    p.variants.push_back([s, layout, config, options, scale](cudaStream_t stream) {
      VariantState& v = *s->variants[1];
      trainer::launch_multi_tensor_step(*layout, v.optimizer->buffers(*v.workspace), config,
                                        PrecisionMode::no_master, options, 0, scale, v.optimizer->scratch(),
                                        stream);
    });
    p.variants.push_back([s, options, scale](cudaStream_t stream) {
      VariantState& v = *s->variants[2];
      v.optimizer->step(*v.workspace, options, scale, stream);
    });
    for (const std::size_t i : {std::size_t{3}, std::size_t{4}}) {
      p.variants.push_back([s, options, scale, i](cudaStream_t stream) {
        VariantState& v = *s->variants[i];
        v.optimizer->step(*v.workspace, options, scale, stream);
      });
    }
    p.variants.push_back([s, config](cudaStream_t stream) {
      VariantState& v = *s->variants[2];
      trainer::launch_fused_update(v.optimizer->buffers(*v.workspace), config, PrecisionMode::no_master, 0,
                                   v.optimizer->control(), false, stream);
    });
    // One step of each before timing: every step must be a real update (no overflow skip). The
    // last variant, fused_update_only, then runs once on the control fused's step left, which it
    // reads and never writes.
    for (std::size_t i = 0; i < state->variants.size(); ++i) {
      p.variants[i](nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      const trainer::StepControl c = state->variants[i]->optimizer->read_control();
      SEQBENCH_REQUIRE(c.found_inf == 0 && c.step == 1 && std::isfinite(c.grad_norm) && c.grad_norm > 0.0f,
                       name << " variant " << i << ": the first step was not a real update (found_inf "
                            << c.found_inf << ", step " << c.step << ", grad norm " << c.grad_norm << ")");
    }
    p.variants.back()(nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    p.state = state;
    return p;
  };
  return e;
}

}  // namespace

SuiteSpec trainer_suite(const SuiteOptions& options) {
  SuiteSpec suite;
  suite.name = "trainer";
  suite.description =
      "LightSeq2 Fig. 18: one mixed-precision Adam/SGD step (fp16 params and grads, fp32 state) over "
      "real model parameter lists: Fairseq-style per-tensor, apex-style multi-tensor, fused (no "
      "master), fused with an fp32 master, fused with bf16 parameters and stochastic rounding, and fused's "
      "update launch alone (its "
      "statistics pass's share by difference); CPU checks: "
      "each precision mode's drift from fp64 training "
      "(trainer/NOTES.md); GPU checks: the same training on the device's fused kernels ends bitwise "
      "where the CPU's emulation of them does";
  suite.needs_gpu = true;
  const std::vector<Model> all = models(options);
  for (const OptimizerKind kind : {OptimizerKind::adam, OptimizerKind::sgd})
    for (const Model& model : all) suite.experiments.push_back(trainer_experiment(model, kind));
  // The accuracy side of the precision modes (trainer/drift_study.h), on the CPU with the update
  // kernels' own code: so that the report which times the modes also says what each costs in
  // drift from fp64 training. The study's seed is its own (its bounds were measured at it).
  suite.cpu_checks = [](std::uint64_t) {
    const trainer::DriftStudyOptions study;
    return trainer::drift_study_checks(trainer::run_drift_study(study), study);
  };
  // The study again with the steps on the device: its final parameters must equal the host
  // emulation's bit for bit, which makes the CPU checks' drift the device's (about 6000 small
  // steps, each synchronized: well under a second of device time).
  suite.gpu_checks = [](std::uint64_t) {
    const trainer::DriftStudyOptions study;
    return trainer::drift_device_checks(trainer::run_drift_study(study),
                                        trainer::run_drift_study(study, trainer::DriftBackend::device));
  };
  return suite;
}

}  // namespace seqbench
