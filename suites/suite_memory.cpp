#include "suites/suite_memory.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "core/error.h"
#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/layer_temporaries.h"
#include "layers/memory_planner.h"

namespace seqbench {
namespace {

using layers::AttentionBackwardFormula;
using layers::BatchShape;
using layers::MemoryPlan;
using layers::ModelPreset;
using layers::TensorLifetime;

// The (batch tokens, sequence length) points of every preset: the preset's maximum length and the
// usual shorter ones, at the preset's max_batch_tokens and at half of it. Quick runs keep the
// maximum point only. The batch holds floor(tokens / length) whole sentences.
std::vector<BatchShape> points_for(const ModelPreset& preset, bool quick) {
  const std::size_t max_len = static_cast<std::size_t>(preset.layer.max_seq_len);
  const std::size_t max_tokens = static_cast<std::size_t>(preset.layer.max_batch_tokens);
  std::vector<std::size_t> lengths{max_len};
  std::vector<std::size_t> tokens{max_tokens};
  if (!quick) {
    for (std::size_t l : {128, 256, 512})
      if (l < max_len) lengths.push_back(l);
    tokens.push_back(max_tokens / 2);
  }
  std::sort(lengths.begin(), lengths.end());
  std::vector<BatchShape> points;
  for (std::size_t t : tokens)
    for (std::size_t l : lengths)
      if (t / l >= 1) points.push_back({t / l, l});
  return points;
}

struct PlanCase {
  std::string name;  // attention_backward, encoder_layer, decoder_layer, model
  const ModelPreset* preset = nullptr;
  BatchShape shape;
  std::size_t tensors = 0;
  int steps = 0;
  MemoryPlan plan;
  std::size_t naive = 0;
  std::size_t lower_padded = 0;  // the bound for a planner that places aligned slots
  std::size_t lower_raw = 0;     // the bound for any placement
  std::vector<std::string> violations;
  std::optional<AttentionBackwardFormula> paper;    // alignment 1: the paper's closed forms
  std::optional<AttentionBackwardFormula> aligned;  // each tensor's slot: what the planner must hit
};

PlanCase make_case(std::string name, const ModelPreset& preset, BatchShape shape,
                   const std::vector<TensorLifetime>& tensors) {
  PlanCase c;
  c.name = std::move(name);
  c.preset = &preset;
  c.shape = shape;
  c.tensors = tensors.size();
  for (const TensorLifetime& t : tensors) c.steps = std::max(c.steps, t.last_step + 1);
  c.plan = layers::plan_memory(tensors);
  c.naive = layers::naive_bytes(tensors);
  c.lower_padded = layers::max_live_bytes(tensors, true);
  c.lower_raw = layers::max_live_bytes(tensors, false);
  c.violations = layers::find_plan_violations(tensors, c.plan);
  return c;
}

std::vector<PlanCase> compute_cases(const SuiteOptions& options) {
  std::vector<PlanCase> cases;
  for (const std::string& name : layers::preset_names()) {
    const ModelPreset& preset = layers::preset(name);
    for (const BatchShape shape : points_for(preset, options.quick)) {
      PlanCase attn = make_case("attention_backward", preset, shape,
                                layers::attention_backward_temporaries(preset.layer, shape));
      attn.paper = layers::attention_backward_formula(preset.layer, shape, 1);
      attn.aligned = layers::attention_backward_formula(preset.layer, shape, layers::kBlockAlignment);
      cases.push_back(std::move(attn));
      if (preset.encoder_layers > 0)
        cases.push_back(make_case("encoder_layer", preset, shape,
                                  layers::encoder_layer_temporaries(preset.layer, shape)));
      if (preset.decoder_layers > 0)
        cases.push_back(make_case("decoder_layer", preset, shape,
                                  layers::decoder_layer_temporaries(preset.layer, shape, shape.seq_len)));
      cases.push_back(make_case("model", preset, shape, layers::model_temporaries(preset, shape)));
    }
  }
  return cases;
}

std::string point_name(const PlanCase& c) {
  std::ostringstream os;
  os << c.name << " tokens=" << c.shape.tokens() << " (" << c.shape.batch_size << "x" << c.shape.seq_len
     << ")";
  return os.str();
}

nlohmann::json case_params(const PlanCase& c) {
  const layers::LayerConfig& l = c.preset->layer;
  const bool whole_model = c.name == "model";
  return {{"preset", c.preset->name},
          {"batch_tokens", c.shape.tokens()},
          {"batch_size", c.shape.batch_size},
          {"seq_len", c.shape.seq_len},
          {"hidden", l.hidden},
          {"ffn", l.ffn},
          {"heads", l.heads},
          {"dtype", std::string(dtype_name(l.dtype))},
          {"pre_layer_norm", l.pre_layer_norm},
          {"encoder_layers", whole_model ? c.preset->encoder_layers : (c.name == "decoder_layer" ? 0 : 1)},
          {"decoder_layers", whole_model ? c.preset->decoder_layers : (c.name == "decoder_layer" ? 1 : 0)},
          {"tensors", c.tensors},
          {"steps", c.steps}};
}

// ---------------------------------------------------------------------------------------------
// Per-preset checks.

CheckResult formula_check(const std::string& preset, const std::vector<const PlanCase*>& cases) {
  CheckResult r;
  r.name = "memory/" + preset + "/attention_backward_formula";
  r.tolerance = 0;
  const PlanCase* worst = nullptr;
  double worst_abs = -1;
  for (const PlanCase* c : cases) {
    const double d_managed =
        std::fabs(static_cast<double>(c->plan.block_bytes) - static_cast<double>(c->aligned->managed_bytes));
    const double d_naive =
        std::fabs(static_cast<double>(c->naive) - static_cast<double>(c->aligned->naive_bytes));
    const double d = std::max(d_managed, d_naive);
    r.max_rel_err = std::max(r.max_rel_err, d_managed / static_cast<double>(c->aligned->managed_bytes));
    r.max_rel_err = std::max(r.max_rel_err, d_naive / static_cast<double>(c->aligned->naive_bytes));
    if (d > worst_abs) {
      worst_abs = d;
      worst = c;
    }
  }
  r.max_abs_err = std::max(worst_abs, 0.0);
  r.passed = !cases.empty() && r.max_abs_err == 0;
  std::ostringstream os;
  os << "planner block vs 3BLH + max(3BLH, BL^2N) and allocation sum vs 9BLH + BL^2N (LightSeq2 Fig. 8), "
        "each tensor counted as its 256-byte-aligned slot, at "
     << cases.size() << " point(s)";
  if (worst) {
    os << "; largest difference at " << point_name(*worst) << ": block " << worst->plan.block_bytes
       << " vs formula " << worst->aligned->managed_bytes << ", sum " << worst->naive << " vs formula "
       << worst->aligned->naive_bytes << " bytes (the paper's unaligned forms: managed "
       << worst->paper->managed_bytes << ", naive " << worst->paper->naive_bytes << ")";
  }
  r.detail = os.str();
  return r;
}

CheckResult overlap_check(const std::string& preset, const std::vector<const PlanCase*>& cases) {
  CheckResult r;
  r.name = "memory/" + preset + "/planner_no_overlap";
  r.tolerance = 0;
  std::size_t plans = 0;
  std::size_t tensors = 0;
  std::string first_problem;
  double violations = 0;
  for (const PlanCase* c : cases) {
    ++plans;
    tensors += c->tensors;
    violations += static_cast<double>(c->violations.size());
    if (first_problem.empty() && !c->violations.empty())
      first_problem = point_name(*c) + ": " + c->violations.front();
  }
  r.max_abs_err = violations;  // the number of problems the verifier found
  r.max_rel_err = 0;
  r.passed = plans > 0 && violations == 0;
  std::ostringstream os;
  os << "independent O(n^2) verifier over " << plans << " plan(s), " << tensors
     << " tensors in all: no two tensors live at the same step share a byte, every offset is aligned, "
        "every tensor ends inside the block; max_abs_err counts the problems found";
  if (!first_problem.empty()) os << "; first: " << first_problem;
  r.detail = os.str();
  return r;
}

CheckResult bounds_check(const std::string& preset, const std::vector<const PlanCase*>& cases) {
  CheckResult r;
  r.name = "memory/" + preset + "/block_bounds";
  r.tolerance = 0;
  double excess = 0;  // bytes by which a bound is broken
  const PlanCase* loosest = nullptr;
  double loosest_ratio = 0;
  for (const PlanCase* c : cases) {
    const double block = static_cast<double>(c->plan.block_bytes);
    excess = std::max(excess, static_cast<double>(c->lower_padded) - block);
    excess = std::max(excess, block - static_cast<double>(c->naive));
    const double ratio = block / static_cast<double>(std::max<std::size_t>(c->lower_padded, 1)) - 1;
    if (!loosest || ratio > loosest_ratio) {
      loosest_ratio = ratio;
      loosest = c;
    }
  }
  r.max_abs_err = std::max(excess, 0.0);
  r.max_rel_err = loosest_ratio;
  r.passed = !cases.empty() && r.max_abs_err == 0;
  std::ostringstream os;
  os << "max-live lower bound <= planner block <= sum of allocations, over " << cases.size()
     << " plan(s); max_abs_err is the bytes by which a bound is broken, max_rel_err how far the block "
        "is above the lower bound (greedy by size is not optimal in general)";
  if (loosest) {
    os << "; loosest: " << point_name(*loosest) << ": block " << loosest->plan.block_bytes << ", bound "
       << loosest->lower_padded << " bytes";
  }
  r.detail = os.str();
  return r;
}

// ---------------------------------------------------------------------------------------------
// The planner's self-tests, so that a report shows the checker can fail.

// Host memory standing in for the device, aligned as cudaMalloc aligns.
class HostAllocator final : public layers::DeviceAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    return ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{layers::kBlockAlignment});
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr) ::operator delete (ptr, std::align_val_t{layers::kBlockAlignment});
  }
};

// "t<i>". Built by appending: GCC 12's -Wrestrict misfires on "t" + std::to_string(i).
std::string tensor_name(int i) {
  std::string name = "t";
  name += std::to_string(i);
  return name;
}

std::vector<TensorLifetime> random_lifetimes(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> count(100, 400);
  std::uniform_int_distribution<int> start(0, 199);
  std::geometric_distribution<int> length(0.08);
  std::uniform_int_distribution<std::size_t> size(1, std::size_t{1} << 20);
  std::uniform_int_distribution<int> coin(0, 3);
  std::vector<TensorLifetime> tensors(static_cast<std::size_t>(count(rng)));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TensorLifetime& t = tensors[i];
    t.name = tensor_name(static_cast<int>(i));
    t.first_step = start(rng);
    t.last_step = t.first_step + length(rng);
    t.bytes = size(rng);  // odd sizes included
    t.alignment = coin(rng) == 0 ? layers::kVectorAlignment : layers::kBlockAlignment;
  }
  return tensors;
}

CheckResult random_lifetimes_check(const SuiteOptions& options, std::uint64_t seed) {
  CheckResult r;
  r.name = "memory/planner/random_lifetimes";
  std::mt19937_64 rng(seed);
  const int rounds = options.quick ? 5 : 40;
  // A regression bound, from measurement: over 300 seeds of 40 such sets, the worst block was
  // 29% above the max-live bound (median 16%). The bound is not always reachable (optimal
  // placement is NP-hard), so 0 is not the target; a planner that stacked tensors instead of
  // reusing them would land near the sum of the allocations, several times above.
  r.tolerance = 0.5;
  double worst = 0;
  std::size_t violations = 0;
  bool below_bound = false;
  std::string first_problem;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<TensorLifetime> tensors = random_lifetimes(rng);
    const MemoryPlan plan = layers::plan_memory(tensors);
    const std::vector<std::string> problems = layers::find_plan_violations(tensors, plan);
    violations += problems.size();
    if (first_problem.empty() && !problems.empty()) first_problem = problems.front();
    const std::size_t bound = layers::max_live_bytes(tensors, true);
    below_bound =
        below_bound || plan.block_bytes < bound || plan.block_bytes < layers::max_live_bytes(tensors, false);
    worst = std::max(worst, static_cast<double>(plan.block_bytes) / static_cast<double>(bound) - 1);
  }
  r.max_abs_err = static_cast<double>(violations);
  r.max_rel_err = worst;
  r.passed = violations == 0 && !below_bound && worst <= r.tolerance;
  std::ostringstream os;
  os << rounds
     << " random sets of 100-400 tensors (sizes 1 B-1 MiB, odd included; 16- and 256-byte "
        "alignment; seed "
     << seed
     << "): max_abs_err counts verifier problems, max_rel_err is the worst block / max-live bound - 1";
  if (below_bound) os << "; a block came out below the max-live bound, which is impossible for a sound plan";
  if (!first_problem.empty()) os << "; first problem: " << first_problem;
  r.detail = os.str();
  return r;
}

CheckResult planted_overlap_check() {
  CheckResult r;
  r.name = "memory/planner/planted_overlap_detected";
  r.tolerance = 0;
  std::vector<TensorLifetime> tensors(3);
  tensors[0] = {"a", 1000, 0, 2, 256, false};
  tensors[1] = {"b", 1000, 1, 3, 256, false};  // live with a at steps 1 and 2
  tensors[2] = {"c", 1000, 4, 5, 256, false};  // never live with a or b
  MemoryPlan plan = layers::plan_memory(tensors);
  const bool sound_before = layers::find_plan_violations(tensors, plan).empty();
  // Plant: b moved onto a's last 24 bytes; c placed on a exactly (legal: never live together).
  plan.offsets[1] = plan.offsets[0] + 1000 - 24;
  plan.offsets[1] -= plan.offsets[1] % 256;
  plan.offsets[2] = plan.offsets[0];
  plan.block_bytes = std::max({plan.block_bytes, plan.offsets[1] + 1024, plan.offsets[2] + 1024});
  const std::vector<std::string> problems = layers::find_plan_violations(tensors, plan);
  const bool caught = problems.size() == 1 && problems[0].find("'a'") != std::string::npos &&
                      problems[0].find("'b'") != std::string::npos;
  r.max_abs_err = caught && sound_before ? 0 : 1;
  r.max_rel_err = 0;
  r.passed = caught && sound_before;
  r.detail =
      "a plan with one planted overlap (b on a while both live) and one legal reuse (c on a, never live "
      "together): the verifier must report exactly the first";
  if (!r.passed) {
    r.detail += "; got " + std::to_string(problems.size()) + " problem(s)" +
                (problems.empty() ? std::string() : ": " + problems.front()) +
                (sound_before ? "" : "; the unplanted plan was already reported unsound");
  }
  return r;
}

CheckResult over_limit_check() {
  CheckResult r;
  r.name = "memory/planner/over_limit_request_refused";
  r.tolerance = 0;
  HostAllocator host;
  layers::CountingAllocator counter(host);
  layers::LifetimeRecorder rec;
  const layers::TensorId x = rec.external("x");
  const layers::TensorId h = rec.tensor("h", 4096);
  const layers::TensorId g = rec.tensor("g", 1000);
  rec.op("first", {x}, {h});
  rec.op("second", {h}, {g});
  rec.op("third", {g}, {x});
  bool ok = true;
  std::string why;
  {
    layers::MemoryManager manager(rec.lifetimes(), counter);
    const layers::AllocationStats before = counter.stats();
    // Steady state: many steps of requests at or below the plan allocate nothing.
    for (int step = 0; step < 100; ++step) {
      ok = ok && manager.get(h, 4096 - static_cast<std::size_t>(step)) != nullptr;
      ok = ok && manager.get(g, 1000) != nullptr;
    }
    if (counter.stats().allocations != before.allocations) {
      ok = false;
      why = "requests within the plan allocated";
    }
    try {
      manager.get(h, 4097);
      ok = false;
      why = "a request of 4097 bytes for a 4096-byte tensor was served";
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.find("4097") == std::string::npos || m.find("4096") == std::string::npos) {
        ok = false;
        why = "the error does not name both the request and the limit: " + m;
      }
    }
  }
  const layers::AllocationStats after = counter.stats();
  if (after.allocations != 1 || after.deallocations != 1 || after.live_bytes != 0) {
    ok = false;
    why = "the manager made " + std::to_string(after.allocations) + " allocation(s) and " +
          std::to_string(after.deallocations) + " free(s), expected one of each";
  }
  r.passed = ok;
  r.max_abs_err = ok ? 0 : 1;
  r.max_rel_err = 0;
  r.detail =
      ok ? "one block allocated once; 200 requests within the plan allocate nothing; a request one byte over "
           "the plan throws naming both sizes"
         : why;
  return r;
}

}  // namespace

nlohmann::json memory_accounting(const SuiteOptions& options) {
  nlohmann::json out = nlohmann::json::array();
  for (const PlanCase& c : compute_cases(options)) {
    SEQBENCH_REQUIRE(c.violations.empty(), "memory plan of " << c.preset->name << " " << point_name(c)
                                                             << " is unsound: " << c.violations.front());
    nlohmann::json entry = {
        {"name", c.name},
        {"params", case_params(c)},
        {"naive_bytes", c.naive},
        {"managed_bytes", c.plan.block_bytes},
        {"lower_bound_bytes", c.lower_padded},
        {"ratio", static_cast<double>(c.plan.block_bytes) / static_cast<double>(c.naive)}};
    if (c.paper)
      entry["formula"] = {{"naive_bytes", c.paper->naive_bytes}, {"managed_bytes", c.paper->managed_bytes}};
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<CheckResult> memory_checks(const SuiteOptions& options, std::uint64_t seed) {
  const std::vector<PlanCase> cases = compute_cases(options);
  std::vector<CheckResult> checks;
  for (const std::string& preset : layers::preset_names()) {
    std::vector<const PlanCase*> attention;
    std::vector<const PlanCase*> all;
    for (const PlanCase& c : cases) {
      if (c.preset->name != preset) continue;
      all.push_back(&c);
      if (c.name == "attention_backward") attention.push_back(&c);
    }
    checks.push_back(formula_check(preset, attention));
    checks.push_back(overlap_check(preset, all));
    checks.push_back(bounds_check(preset, all));
  }
  checks.push_back(random_lifetimes_check(options, seed));
  checks.push_back(planted_overlap_check());
  checks.push_back(over_limit_check());
  return checks;
}

SuiteSpec memory_suite(const SuiteOptions& options) {
  SuiteSpec suite;
  suite.name = "memory";
  suite.description =
      "LightSeq2 Fig. 8 from the memory planner (CPU): naive vs managed temporary memory of the attention "
      "backward, of encoder and decoder layers and of every preset's stack";
  suite.needs_gpu = false;
  suite.cpu_checks = [options](std::uint64_t seed) { return memory_checks(options, seed); };
  suite.accounting = [options] { return memory_accounting(options); };
  return suite;
}

}  // namespace seqbench
