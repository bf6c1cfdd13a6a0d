#include "suites/targets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "suites/layers/layer_experiments.h"
#include "suites/report.h"
#include "suites/suite_layers.h"
#include "suites/text_format.h"

namespace seqbench {
namespace {

using nlohmann::json;

std::string percent(double x) {
  return fixed_decimals(x, 1) + " %";
}
std::string times(double x) {
  return fixed_decimals(x, 2) + "×";
}
// A case's value beside its limit: as many decimals as it takes to tell them apart.
std::string percent_against(double x, double limit) {
  return fixed_decimals_apart(x, limit, 1) + " %";
}
std::string times_against(double x, double limit) {
  return fixed_decimals_apart(x, limit, 2) + "×";
}

// The cases of one target as they are counted. `margin` says how far a case is from its limit on
// the passing side (value / limit for "at least", limit / value for "at most"; below 1 is a miss),
// so that the worst case is the one with the smallest margin: the furthest past the limit when one failed,
// else the nearest to it.
class Tally {
 public:
  Tally(int issue, std::string id, std::string statement) {
    result_.issue = issue;
    result_.id = std::move(id);
    result_.statement = std::move(statement);
  }

  void add(bool passed, std::optional<double> margin, const std::string& text) {
    ++result_.total;
    if (passed) {
      ++result_.passed;
    } else {
      result_.misses.push_back(text);
    }
    if (margin && *margin < worst_margin_) {
      worst_margin_ = *margin;
      result_.worst = text;
    }
  }

  void gap(const std::string& text) {
    if (std::find(result_.gaps.begin(), result_.gaps.end(), text) == result_.gaps.end())
      result_.gaps.push_back(text);
  }

  TargetResult finish() {
    if (!result_.misses.empty()) {
      result_.verdict = TargetVerdict::missed;
    } else if (result_.total == 0) {
      if (result_.gaps.empty()) gap("no case to count");
      result_.verdict = TargetVerdict::not_measured;
    } else {
      result_.verdict = result_.gaps.empty() ? TargetVerdict::met : TargetVerdict::not_measured;
    }
    return std::move(result_);
  }

 private:
  TargetResult result_;
  double worst_margin_ = std::numeric_limits<double>::infinity();
};

// The reports of one device, by suite.
struct DeviceReports {
  std::map<std::string, std::pair<const json*, std::string>> seqbench;  // suite -> (report, its name)
  std::map<std::string, std::pair<const json*, std::string>> pytorch;
};

// What keeps a seqbench report from holding every experiment of its suite: experiments not run,
// experiments that failed to run, only filtered runs. Empty when it is complete.
std::vector<std::string> incompleteness(const json& report) {
  std::vector<std::string> out;
  const std::string suite = report.at("suite").get<std::string>();
  if (const auto it = report.find("not_run"); it != report.end() && it->is_array() && !it->empty()) {
    const json& first = it->front();
    out.push_back(std::to_string(it->size()) + " " + suite +
                  " experiment(s) not run (first: " + first.value("experiment", std::string("?")) + ": " +
                  first.value("reason", std::string("?")) + ")");
  }
  std::int64_t failed = 0;
  std::string first_failed;
  const std::string run_prefix = "run/" + suite + "/";
  for (const json& check : report.at("checks")) {
    const std::string name = check.at("name").get<std::string>();
    if (name.rfind(run_prefix, 0) == 0 && !check.at("passed").get<bool>()) {
      if (failed++ == 0) first_failed = name;
    }
  }
  if (failed > 0)
    out.push_back(std::to_string(failed) + " " + suite + " variant(s) failed to run (first: " + first_failed +
                  ")");
  const json& meta = report.at("meta");
  bool unfiltered = true;
  std::string filter;
  if (const auto parts = meta.find("parts"); parts != meta.end() && parts->is_array() && !parts->empty()) {
    unfiltered = false;
    for (const json& part : *parts) {
      const auto f = part.find("filter");
      if (f == part.end() || !f->is_string()) unfiltered = true;
      if (f != part.end() && f->is_string() && filter.empty()) filter = f->get<std::string>();
    }
  } else if (const auto f = meta.find("filter"); f != meta.end() && f->is_string()) {
    unfiltered = false;
    filter = f->get<std::string>();
  }
  if (!unfiltered)
    out.push_back(suite + " holds filtered runs only (first filter `" + filter +
                  "`): experiments outside the filter are unknown");
  return out;
}

const json* variant_named(const json& experiment, const std::string& name) {
  for (const json& v : experiment.at("variants"))
    if (v.at("name").get<std::string>() == name) return &v;
  return nullptr;
}

std::string case_name(const json& experiment, const std::string& variant) {
  return experiment.at("name").get<std::string>() + " `" + variant + "`";
}

// The failed checks of a report other than its run/<suite>/... failures (incompleteness() counts
// those) and the layers suite's memory checks (targets of their own): its correctness checks, and a
// check family that threw (checks/<suite>/...). A speed measured on code whose checks fail is no
// evidence that the target is met.
std::string failed_checks(const json& report) {
  const std::string run_prefix = "run/" + report.at("suite").get<std::string>() + "/";
  const std::vector<std::string> memory = layer_experiments::memory_check_names();
  std::int64_t failed = 0;
  std::string first;
  for (const json& check : report.at("checks")) {
    const std::string name = check.at("name").get<std::string>();
    if (check.at("passed").get<bool>() || name.rfind(run_prefix, 0) == 0 ||
        std::find(memory.begin(), memory.end(), name) != memory.end())
      continue;
    if (failed++ == 0) first = name;
  }
  if (failed == 0) return "";
  return std::to_string(failed) + " failed check(s) in " + report.at("suite").get<std::string>() +
         " (first: " + first + "): its timings do not count while its checks fail";
}

// Starts a target on one suite's report: a gap when it is absent, its incompleteness, and (with
// `correctness`) its failed checks.
const json* begin(Tally& tally, const DeviceReports& reports, const std::string& suite,
                  bool correctness = true) {
  const auto it = reports.seqbench.find(suite);
  if (it == reports.seqbench.end()) {
    tally.gap("no " + suite + " report");
    return nullptr;
  }
  for (const std::string& gap : incompleteness(*it->second.first)) tally.gap(gap);
  if (correctness) {
    if (const std::string failed = failed_checks(*it->second.first); !failed.empty()) tally.gap(failed);
  }
  return it->second.first;
}

// "At least `limit` percent of the copy bandwidth" for the given variants of the given experiments.
template <class Select>
void add_copy_cases(Tally& tally, const json& report, double limit, Select select) {
  for (const json& experiment : report.at("experiments")) {
    const std::string baseline = experiment.at("baseline").get<std::string>();
    for (const json& variant : experiment.at("variants")) {
      const std::string name = variant.at("name").get<std::string>();
      if (!report_component_of(variant).empty() || !select(experiment, name, baseline))
        continue;  // a part is no result
      const json& pct = variant.at("pct_copy_bw");
      if (pct.is_null()) {
        tally.gap(case_name(experiment, name) + " has no % of copy bandwidth (the copy was not measured)");
        continue;
      }
      const double value = pct.get<double>();
      tally.add(value >= limit, value / limit,
                case_name(experiment, name) + ": " + percent_against(value, limit) + " of copy (limit " +
                    percent(limit) + ")");
    }
  }
}

TargetResult operators_copy_bw(const DeviceReports& reports) {
  Tally tally(3, "operators.copy_bw",
              "every fused operator kernel reaches " + percent(kTargetOperatorCopyPct) +
                  " of the measured copy bandwidth at 16M elements and above");
  if (const json* report = begin(tally, reports, "operators")) {
    std::int64_t without = 0;
    for (const json& experiment : report->at("experiments")) {
      const auto it = experiment.at("params").find("elements");
      if (it == experiment.at("params").end() || !it->is_number()) ++without;
    }
    if (without > 0)
      tally.gap(
          std::to_string(without) +
          " operators experiment(s) without params.elements (a report older than the key): not counted");
    add_copy_cases(tally, *report, kTargetOperatorCopyPct,
                   [](const json& experiment, const std::string& variant, const std::string& baseline) {
                     const auto it = experiment.at("params").find("elements");
                     return variant != baseline && it != experiment.at("params").end() && it->is_number() &&
                            it->get<double>() >= kTargetLargeElements;
                   });
  }
  return tally.finish();
}

// Every non-baseline variant of the selected experiments faster than the baseline (speedup > 1).
template <class Select>
void add_faster_cases(Tally& tally, const json& report, Select select) {
  for (const json& experiment : report.at("experiments")) {
    if (!select(experiment)) continue;
    const std::string baseline = experiment.at("baseline").get<std::string>();
    for (const json& variant : experiment.at("variants")) {
      const std::string name = variant.at("name").get<std::string>();
      if (name == baseline || !report_component_of(variant).empty()) continue;  // a part is no result
      const double speedup = variant.at("speedup").get<double>();
      tally.add(speedup > 1.0, speedup,
                case_name(experiment, name) + ": " + times_against(speedup, 1.0) + " over `" + baseline +
                    "` (needs > 1×)");
    }
  }
}

TargetResult operators_faster(const DeviceReports& reports) {
  Tally tally(3, "operators.faster",
              "every fused operator kernel is faster than its unfused baseline at every size");
  if (const json* report = begin(tally, reports, "operators"))
    add_faster_cases(tally, *report, [](const json&) { return true; });
  return tally.finish();
}

bool is_adam(const json& experiment) {
  const auto it = experiment.at("params").find("optimizer");
  return it != experiment.at("params").end() && it->is_string() && it->get<std::string>() == "adam";
}

TargetResult trainer_adam_copy_bw(const DeviceReports& reports) {
  Tally tally(4, "trainer.adam_copy_bw",
              "the fused Adam reaches " + percent(kTargetAdamCopyPct) +
                  " of the measured copy bandwidth at 100M parameters and above");
  if (const json* report = begin(tally, reports, "trainer")) {
    for (const json& experiment : report->at("experiments"))
      if (is_adam(experiment) && !variant_named(experiment, "fused"))
        tally.gap(experiment.at("name").get<std::string>() + " has no `fused` variant");
    add_copy_cases(tally, *report, kTargetAdamCopyPct,
                   [](const json& experiment, const std::string& variant, const std::string&) {
                     const auto it = experiment.at("params").find("parameters");
                     return variant == "fused" && is_adam(experiment) &&
                            it != experiment.at("params").end() && it->is_number() &&
                            it->get<double>() >= kTargetLargeParameters;
                   });
  }
  return tally.finish();
}

TargetResult trainer_adam_vs_per_tensor(const DeviceReports& reports) {
  Tally tally(
      4, "trainer.adam_vs_per_tensor",
      "the fused Adam runs at least " + times(kTargetAdamSpeedup) + " faster than the per-tensor baseline");
  if (const json* report = begin(tally, reports, "trainer")) {
    for (const json& experiment : report->at("experiments")) {
      if (!is_adam(experiment)) continue;
      const std::string baseline = experiment.at("baseline").get<std::string>();
      const json* fused = variant_named(experiment, "fused");
      if (baseline != "per_tensor" || fused == nullptr) {
        tally.gap(experiment.at("name").get<std::string>() +
                  " has no `fused` against a `per_tensor` baseline");
        continue;
      }
      const double speedup = fused->at("speedup").get<double>();
      tally.add(speedup >= kTargetAdamSpeedup, speedup / kTargetAdamSpeedup,
                case_name(experiment, "fused") + ": " + times_against(speedup, kTargetAdamSpeedup) +
                    " over `per_tensor` (limit " + times(kTargetAdamSpeedup) + ")");
    }
  }
  return tally.finish();
}

TargetResult layers_faster(const DeviceReports& reports) {
  Tally tally(5, "layers.faster",
              "every layer is faster than its baseline in forward and in backward, at every length");
  if (const json* report = begin(tally, reports, "layers"))
    add_faster_cases(tally, *report,
                     [](const json& experiment) { return experiment.at("params").contains("layer"); });
  return tally.finish();
}

// The layers suite's memory checks ending in `suffix`: each expected one present and passed.
// `describe` gives whether a check's value is within the issue's limit (the check's own verdict
// must agree: a report written with a looser tolerance does not pass), its margin (none where it
// has no meaningful one) and its words.
template <class Describe>
TargetResult layers_memory(const DeviceReports& reports, int issue, const std::string& id,
                           const std::string& statement, const std::string& suffix, Describe describe) {
  Tally tally(issue, id, statement);
  if (const json* report = begin(tally, reports, "layers")) {
    std::map<std::string, const json*> checks;
    for (const json& check : report->at("checks"))
      checks.emplace(check.at("name").get<std::string>(), &check);
    std::int64_t absent = 0;
    std::string first_absent;
    for (const std::string& name : layer_experiments::memory_check_names()) {
      if (name.size() < suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const auto it = checks.find(name);
      if (it == checks.end()) {
        if (absent++ == 0) first_absent = name;
        continue;
      }
      const auto [within, margin, words] = describe(*it->second);
      tally.add(it->second->at("passed").get<bool>() && within, margin, name + ": " + words);
    }
    if (absent > 0)
      tally.gap(std::to_string(absent) + " expected check(s) absent (first: " + first_absent + ")");
  }
  return tally.finish();
}

TargetResult layers_memory_ratio(const DeviceReports& reports) {
  return layers_memory(
      reports, 5, "layers.memory_ratio", "the managed peak memory is at most 0.7× the baseline's",
      "peak_ratio", [](const json& check) -> std::tuple<bool, std::optional<double>, std::string> {
        const json& ratio = check.at("max_rel_err");  // managed / baseline peak
        const std::string limit = " (limit " + fixed_decimals(kMemoryRatioTarget, 2) + ")";
        if (ratio.is_null()) return {false, 0.0, "managed / baseline peak not finite" + limit};
        const double r = ratio.get<double>();
        return {r <= kMemoryRatioTarget, r > 0 ? std::optional<double>(kMemoryRatioTarget / r) : std::nullopt,
                "managed / baseline peak " + fixed_decimals(r, 3) + limit};
      });
}

TargetResult layers_steady_allocations(const DeviceReports& reports) {
  return layers_memory(reports, 5, "layers.steady_allocations",
                       "no device allocations happen in steady-state steps", "steady_state_allocations",
                       [](const json& check) -> std::tuple<bool, std::optional<double>, std::string> {
                         const json& count = check.at("max_abs_err");
                         // No margin for a count: the worst case shown is a failing one, if any.
                         if (count.is_null())
                           return {false, 0.0, "allocations in the loop: not finite (limit 0)"};
                         const double n = count.get<double>();
                         return {n == 0, n > 0 ? std::optional<double>(0.0) : std::nullopt,
                                 "allocations in the loop: " + fixed_decimals(n, 0) + " (limit 0)"};
                       });
}

// The experiments a suite's tables compare with PyTorch: all of the operators and trainer suites',
// the layers suite's layers (params.layer; its GEMM-epilogue experiments compare two cuBLASLt
// configurations, which PyTorch has no counterpart for).
bool compared_with_torch(const std::string& suite, const json& experiment) {
  return suite != "layers" || experiment.at("params").contains("layer");
}

// The PyTorch report's `unmapped` entries (suites/pytorch/README.md), by experiment, and by
// experiment and variant. Reasons: "skipped: ..." (no torch plan for the params) and "failed: ..."
// are misses; "not started: ..." and "not run: ..." (the budget, a stop) are absences.
struct Unmapped {
  std::map<std::string, std::string> experiments;
  std::map<std::pair<std::string, std::string>, std::string> variants;
};

Unmapped unmapped_of(const json& torch) {
  Unmapped out;
  const auto it = torch.find("unmapped");
  if (it == torch.end() || !it->is_array()) return out;
  for (const json& entry : *it) {
    if (!entry.is_object()) continue;
    const std::string experiment = entry.value("experiment", std::string());
    const std::string reason = entry.value("reason", std::string());
    if (entry.contains("variant") && entry.at("variant").is_string()) {
      out.variants.emplace(std::make_pair(experiment, entry.at("variant").get<std::string>()), reason);
    } else {
      out.experiments.emplace(experiment, reason);
    }
  }
  return out;
}

bool is_absence(const std::string& reason) {
  return reason.rfind("not started", 0) == 0 || reason.rfind("not run", 0) == 0;
}

// meta.source_hash where the report has one, else the git sha: what "one run" compares.
std::string build_of(const json& meta) {
  const auto hash = meta.find("source_hash");
  if (hash != meta.end() && hash->is_string()) return "sources " + hash->get<std::string>();
  return "git " + report_short_sha(meta);
}

TargetResult pytorch_columns(const DeviceReports& reports) {
  Tally tally(6, "pytorch.columns",
              "the operator, trainer and layer tables show speedups against torch eager and torch.compile, "
              "measured in one run");
  for (const std::string suite : {"operators", "trainer", "layers"}) {
    const json* report = begin(tally, reports, suite, /*correctness=*/false);
    if (report == nullptr) continue;
    const auto torch_it = reports.pytorch.find(suite);
    if (torch_it == reports.pytorch.end()) {
      tally.gap("no PyTorch report of " + suite + " on this device");
      continue;
    }
    const json& torch = *torch_it->second.first;
    if (build_of(torch.at("meta")) != build_of(report->at("meta")))
      tally.gap("PyTorch's " + suite + " report is of " + build_of(torch.at("meta")) + ", seqbench's of " +
                build_of(report->at("meta")) + ": not one run");
    std::map<std::string, const json*> torch_experiments;
    for (const json& experiment : torch.at("experiments"))
      torch_experiments.emplace(experiment.at("name").get<std::string>(), &experiment);
    const Unmapped unmapped = unmapped_of(torch);
    for (const json& experiment : report->at("experiments")) {
      if (!compared_with_torch(suite, experiment)) continue;
      const std::string name = experiment.at("name").get<std::string>();
      const std::string where = suite + "/" + name;
      if (const auto u = unmapped.experiments.find(name); u != unmapped.experiments.end()) {
        if (is_absence(u->second)) {
          tally.gap("PyTorch did not measure " + where + ": " + u->second);
        } else {
          tally.add(false, 0.0, where + ": PyTorch " + u->second);
        }
        continue;
      }
      const auto found = torch_experiments.find(name);
      std::string misses;
      bool absent = false;
      for (const std::string column : {"torch_eager", "torch_compile"}) {
        const json* v = found == torch_experiments.end() ? nullptr : variant_named(*found->second, column);
        if (v != nullptr && variant_quick(torch.at("meta"), *v) == std::optional<bool>(false)) continue;
        const auto u = unmapped.variants.find({name, column});
        if (v == nullptr && u != unmapped.variants.end() && !is_absence(u->second)) {
          misses += (misses.empty() ? "" : "; ") + column + " " + u->second;
          continue;
        }
        absent = true;
        std::string why = " (not run, or outside a filter)";
        if (u != unmapped.variants.end()) {
          why = ": " + u->second;
        } else if (v != nullptr) {
          why = " (its run was --quick, or does not say)";
        }
        tally.gap("PyTorch has no full-shape " + column + " of " + where + why);
      }
      if (!misses.empty()) {
        tally.add(false, 0.0, where + ": " + misses);
      } else if (!absent) {
        tally.add(true, std::nullopt, where + ": both measured");
      }
    }
  }
  return tally.finish();
}

bool h100_or_h200(const std::string& device) {
  return device.find("H100") != std::string::npos || device.find("H200") != std::string::npos;
}

std::string report_line(const json& report, const std::string& name) {
  const json& meta = report.at("meta");
  std::string line = name + ": " + (is_pytorch_report(report) ? "PyTorch " : "") +
                     report.at("suite").get<std::string>() + ", git " + report_short_sha(meta) + ", " +
                     meta.at("timestamp").get<std::string>();
  const json& device = meta.at("device");
  if (!device.is_null() && device.contains("copy_gbps") && device.at("copy_gbps").is_number())
    line += ", copy " + fixed_decimals(device.at("copy_gbps").get<double>(), 0) + " GB/s";
  return line;
}

}  // namespace

const char* target_verdict_name(TargetVerdict verdict) {
  switch (verdict) {
    case TargetVerdict::met:
      return "met";
    case TargetVerdict::missed:
      return "missed";
    case TargetVerdict::not_measured:
      return "not measured";
  }
  return "?";
}

TargetsEvaluation evaluate_targets(const std::vector<json>& reports, const std::vector<std::string>& names) {
  SEQBENCH_REQUIRE(names.size() == reports.size(),
                   "evaluate_targets: " << names.size() << " names for " << reports.size() << " reports");
  TargetsEvaluation evaluation;
  std::vector<std::pair<std::string, DeviceReports>> devices;  // in order of first appearance
  for (std::size_t i = 0; i < reports.size(); ++i) {
    require_valid_report(reports[i], "report '" + names[i] + "'");
    const json& meta = reports[i].at("meta");
    if (meta.at("device").is_null()) {
      evaluation.ignored.push_back(names[i] +
                                   ": no GPU (meta.device is null): it measures nothing the targets count");
      continue;
    }
    const bool pytorch = is_pytorch_report(reports[i]);
    // PyTorch's reports say it per part and variant (pytorch_columns reads that).
    if (!pytorch && report_quick(meta) != std::optional<bool>(false)) {
      evaluation.ignored.push_back(names[i] + (report_quick(meta)
                                                   ? ": a --quick run, whose shapes are not the issues'"
                                                   : ": does not say whether its shapes are --quick "
                                                     "(meta.quick, or parts that disagree)"));
      continue;
    }
    const std::string device = report_device_name(meta);
    auto it = std::find_if(devices.begin(), devices.end(), [&](const auto& d) { return d.first == device; });
    if (it == devices.end()) {
      devices.emplace_back(device, DeviceReports{});
      it = devices.end() - 1;
    }
    auto& by_suite = pytorch ? it->second.pytorch : it->second.seqbench;
    const std::string suite = reports[i].at("suite").get<std::string>();
    const auto [slot, inserted] = by_suite.emplace(suite, std::make_pair(&reports[i], names[i]));
    SEQBENCH_REQUIRE(inserted, "two " << (pytorch ? "PyTorch " : "") << "reports of suite '" << suite
                                      << "' on " << device << ": '" << slot->second.second << "' and '"
                                      << names[i] << "'; give one");
  }
  for (const auto& [device, reps] : devices) {
    DeviceTargets d;
    d.device = device;
    for (const auto* group : {&reps.seqbench, &reps.pytorch})
      for (const auto& [suite, entry] : *group) d.reports.push_back(report_line(*entry.first, entry.second));
    d.targets = {operators_copy_bw(reps),          operators_faster(reps), trainer_adam_copy_bw(reps),
                 trainer_adam_vs_per_tensor(reps), layers_faster(reps),    layers_memory_ratio(reps),
                 layers_steady_allocations(reps),  pytorch_columns(reps)};
    // The issues' evidence is an H100 or H200 run: elsewhere a target can be missed, never met.
    if (!h100_or_h200(device)) {
      const std::string gap = "measured on " + device + ": the issues ask for an H100 or H200";
      d.notes.push_back(gap);
      for (TargetResult& t : d.targets) {
        t.gaps.push_back(gap);
        if (t.verdict == TargetVerdict::met) t.verdict = TargetVerdict::not_measured;
      }
    }
    evaluation.devices.push_back(std::move(d));
  }
  return evaluation;
}

std::string render_targets(const TargetsEvaluation& evaluation) {
  std::ostringstream out;
  out << "# Targets\n\n"
      << "The acceptance targets of issues #3 to #6, read off the reports by `seqbench targets` "
         "(suites/targets.h). `not measured` means nothing failed but something the target needs is "
         "missing; the gaps say what.\n";
  if (evaluation.devices.empty())
    out << "\nNo report of a GPU run among the inputs: no target can be judged.\n";
  for (const DeviceTargets& d : evaluation.devices) {
    out << "\n## " << d.device << "\n\nReports:\n";
    for (const std::string& line : d.reports) out << "- " << line << "\n";
    for (const std::string& note : d.notes) out << "\nNote: " << note << "\n";
    out << "\n| issue | target | verdict | cases met | worst case |\n|---|---|---|---|---|\n";
    for (const TargetResult& t : d.targets) {
      const std::string verdict = target_verdict_name(t.verdict);
      out << "| #" << t.issue << " | " << markdown_cell(t.statement) << " (`" << t.id << "`) | "
          << (t.verdict == TargetVerdict::met ? verdict : "**" + verdict + "**") << " | " << t.passed << " / "
          << t.total << " | " << (t.worst.empty() ? "—" : markdown_cell(t.worst)) << " |\n";
    }
    for (const TargetResult& t : d.targets) {
      if (t.misses.empty() && t.gaps.empty()) continue;
      out << "\n### `" << t.id << "`\n\n";
      for (const std::string& m : t.misses) out << "- missed: " << m << "\n";
      for (const std::string& g : t.gaps) out << "- gap: " << g << "\n";
    }
  }
  if (!evaluation.ignored.empty()) {
    out << "\n## Reports left out\n\n";
    for (const std::string& line : evaluation.ignored) out << "- " << line << "\n";
  }
  return out.str();
}

int targets_exit_code(const TargetsEvaluation& evaluation) {
  if (evaluation.devices.empty()) return 3;
  bool all_met = true;
  for (const DeviceTargets& d : evaluation.devices)
    for (const TargetResult& t : d.targets) {
      if (t.verdict == TargetVerdict::missed) return 1;
      all_met = all_met && t.verdict == TargetVerdict::met;
    }
  return all_met ? 0 : 3;
}

}  // namespace seqbench
