#include "suites/table.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "suites/report.h"
#include "suites/text_format.h"

namespace seqbench {
namespace {

using nlohmann::json;

// Three significant figures without exponents: 0.0123, 1.23, 12.3, 123; larger values keep all
// their integer digits (1235, not 1.24e+03).
std::string significant3(double x) {
  if (x == 0.0) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(x))));
  const int decimals = std::clamp(2 - magnitude, 0, 12);
  // Rounding can carry into the next decade (9.9996 → "10.00", four figures): then one fewer.
  const double rounded = std::fabs(std::round(x * std::pow(10.0, decimals))) * std::pow(10.0, -decimals);
  const bool carried = rounded >= std::pow(10.0, magnitude + 1) && decimals > 0;
  return fixed_decimals(x, carried ? decimals - 1 : decimals);
}

// Errors and tolerances span many decades: "3.10e-02".
std::string scientific(double x) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::scientific, 2);
  if (result.ec != std::errc()) return std::to_string(x);
  return std::string(buffer, result.ptr);
}

// A nullable report number, formatted; nullopt for null.
using Text = std::optional<std::string>;
template <typename Format>
Text number(const json& value, Format format) {
  if (value.is_null()) return std::nullopt;
  return format(value.get<double>());
}

// ---------------------------------------------------------------------------------------------
// The PyTorch join
// ---------------------------------------------------------------------------------------------

// "vs torch eager", "vs torch.compile"; any other torch variant "vs torch fused" and the like.
std::string torch_label(const std::string& variant) {
  if (variant == "torch_eager") return "vs torch eager";
  if (variant == "torch_compile") return "vs torch.compile";
  std::string label = "vs ";
  label += variant;
  std::replace(label.begin(), label.end(), '_', ' ');
  return label;
}

// The PyTorch reports, indexed by (suite, device, experiment name): an experiment is compared only
// with PyTorch measured on the same device. Numbers of --quick shapes are never paired with full
// ones (where both sides say which they are); of the rest, a column takes the first report's, in
// the order given. (Keeping only the first report of a name dropped every pairing when a quick
// PyTorch report came before the full one.)
class TorchIndex {
 public:
  explicit TorchIndex(const std::vector<json>& reports) {
    for (const json& report : reports) {
      if (!is_pytorch_report(report)) continue;
      any_ = true;
      const std::string suite = report.at("suite").get<std::string>();
      const std::string device = report_device_name(report.at("meta"));
      for (const json& experiment : report.at("experiments")) {
        experiments_[key(suite, device, experiment.at("name").get<std::string>())].emplace_back(
            &experiment, &report.at("meta"));
        for (const json& variant : experiment.at("variants")) {
          add_column(suite, variant.at("name").get<std::string>());
          if (const auto n = variant.find("note"); n != variant.end() && n->is_string() && !n->empty()) {
            auto& list = notes_[suite + '\n' + device];
            if (std::find(list.begin(), list.end(), n->get<std::string>()) == list.end())
              list.push_back(n->get<std::string>());
          }
        }
      }
    }
  }

  bool any() const { return any_; }

  // The torch variants to show for a suite: torch_eager and torch_compile always (when any
  // PyTorch report was given), then the others measured for that suite, in order of appearance.
  std::vector<std::string> columns(const std::string& suite) const {
    std::vector<std::string> out;
    if (!any_) return out;
    out = {"torch_eager", "torch_compile"};
    if (const auto it = extra_.find(suite); it != extra_.end())
      out.insert(out.end(), it->second.begin(), it->second.end());
    return out;
  }

  // The distinct notes of the PyTorch variants measured for a suite on a device, in order of
  // appearance: what the "vs torch" numbers compare against (the runner's recipe, such as the
  // trainer's fp32 parameters, and how a variant was timed).
  std::vector<std::string> notes(const std::string& suite, const std::string& device) const {
    const auto it = notes_.find(suite + '\n' + device);
    return it == notes_.end() ? std::vector<std::string>{} : it->second;
  }

  // Every column of every suite, for CSV's single header.
  std::vector<std::string> all_columns() const {
    std::vector<std::string> out = columns("");
    for (const std::string& name : extra_order_)
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    return out;
  }

  // torch median / this variant's median for each column; nullopt where PyTorch has no match.
  // `mixed_timing`: both variants say how they were timed ("cuda_graph", "calls_per_sample"), and
  // differently.
  struct Ratio {
    double value = 0.0;
    bool mixed_timing = false;
  };
  std::vector<std::optional<Ratio>> speedups(const json& report, const json& experiment, const json& variant,
                                             const std::vector<std::string>& columns) const {
    std::vector<std::optional<Ratio>> out(columns.size());
    if (is_pytorch_report(report) || !report_component_of(variant).empty())
      return out;  // a part is not set against torch
    const auto it =
        experiments_.find(key(report.at("suite").get<std::string>(), report_device_name(report.at("meta")),
                              experiment.at("name").get<std::string>()));
    if (it == experiments_.end()) return out;
    const double mine = variant.at("median_ms").get<double>();
    const std::optional<bool> my_quick = report_quick(report.at("meta"));
    // Timed differently: one side replayed a graph and the other did not (a side that does not say
    // decides nothing), or their samples bracketed different numbers of calls (a report older than
    // calls_per_sample timed one call a sample).
    const auto graph_differs = [](const json& a, const json& b) {
      return a.contains("cuda_graph") && b.contains("cuda_graph") && a.at("cuda_graph") != b.at("cuda_graph");
    };
    const auto calls = [](const json& v) { return v.value("calls_per_sample", 1); };
    for (std::size_t c = 0; c < columns.size(); ++c)
      for (const auto& [torch_experiment, torch_meta] : it->second) {
        if (out[c]) break;  // an earlier report's
        for (const json& torch : torch_experiment->at("variants")) {
          const std::optional<bool> their_quick = variant_quick(*torch_meta, torch);
          if (my_quick && their_quick && *my_quick != *their_quick) continue;  // quick against full
          if (torch.at("name") == columns[c])
            out[c] = Ratio{torch.at("median_ms").get<double>() / mine,
                           graph_differs(torch, variant) || calls(torch) != calls(variant)};
        }
      }
    return out;
  }

 private:
  static std::string key(const std::string& suite, const std::string& device, const std::string& name) {
    return suite + '\n' + device + '\n' + name;
  }
  void add_column(const std::string& suite, const std::string& variant) {
    if (variant == "torch_eager" || variant == "torch_compile") return;
    auto& list = extra_[suite];
    if (std::find(list.begin(), list.end(), variant) == list.end()) list.push_back(variant);
    if (std::find(extra_order_.begin(), extra_order_.end(), variant) == extra_order_.end())
      extra_order_.push_back(variant);
  }

  bool any_ = false;
  // (experiment, its meta) for each report that measured the name, in the order given.
  std::map<std::string, std::vector<std::pair<const json*, const json*>>> experiments_;
  std::map<std::string, std::vector<std::string>> notes_;  // by suite and device
  std::map<std::string, std::vector<std::string>> extra_;
  std::vector<std::string> extra_order_;
};

// "cols=1024, dtype=bf16, rows=4096": keys in the report's (sorted) order, strings bare, other
// values as compact JSON.
std::string compact_params(const json& params) {
  std::string out;
  for (const auto& [key, value] : params.items()) {
    if (!out.empty()) out += ", ";
    out += key + "=" +
           (value.is_string() ? value.get<std::string>()
                              : value.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return out;
}

// One variant of one experiment, formatted once for both outputs.
struct Row {
  std::string experiment, params, variant;
  std::string median, p20, p80;
  Text gbps, pct_copy_bw, tflops;
  std::string speedup;
  std::vector<Text> vs_torch;        // one per TorchIndex column
  std::vector<bool> vs_torch_mixed;  // the two sides timed differently (graph replays against launches)
};

Row make_row(const json& experiment, const json& variant) {
  return Row{experiment.at("name").get<std::string>(),
             compact_params(experiment.at("params")),
             variant.at("name").get<std::string>(),
             significant3(variant.at("median_ms").get<double>()),
             significant3(variant.at("p20_ms").get<double>()),
             significant3(variant.at("p80_ms").get<double>()),
             number(variant.at("gbps"), [](double x) { return fixed_decimals(x, 0); }),
             number(variant.at("pct_copy_bw"), [](double x) { return fixed_decimals(x, 1); }),
             number(variant.at("tflops"), significant3),
             fixed_decimals(variant.at("speedup").get<double>(), 2),
             {},
             {}};
}

Row make_row(const TorchIndex& torch, const std::vector<std::string>& columns, const json& report,
             const json& experiment, const json& variant) {
  Row row = make_row(experiment, variant);
  for (const auto& x : torch.speedups(report, experiment, variant, columns)) {
    row.vs_torch.push_back(x ? Text(fixed_decimals(x->value, 2)) : std::nullopt);
    row.vs_torch_mixed.push_back(x && x->mixed_timing);
  }
  return row;
}

// ---------------------------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------------------------

constexpr const char* kDash = "—";
// After a "vs torch" speedup whose two sides were timed differently; explained under the report.
constexpr const char* kMixedTiming = "†";

// The Markdown cells of a row's "vs torch" columns.
std::vector<std::string> md_vs_torch(const Row& row) {
  std::vector<std::string> cells;
  for (std::size_t c = 0; c < row.vs_torch.size(); ++c)
    cells.push_back(row.vs_torch[c] ? *row.vs_torch[c] + "×" + (row.vs_torch_mixed[c] ? kMixedTiming : "")
                                    : kDash);
  return cells;
}

std::string md(const std::string& text) {
  return markdown_cell(text);
}

std::string md(const Text& text) {
  return text ? md(*text) : kDash;
}

void md_row(std::string& out, const std::vector<std::string>& cells) {
  out += "|";
  for (const auto& cell : cells) out += " " + cell + " |";
  out += "\n";
}

// "PyTorch 2.11.0" from meta.frameworks.torch, for a PyTorch report's heading.
std::string runner_note(const json& meta) {
  if (!meta.contains("runner")) return "";
  std::string note = meta.at("runner").get<std::string>() == kPytorchRunner
                         ? "PyTorch"
                         : meta.at("runner").get<std::string>();
  if (const auto f = meta.find("frameworks");
      f != meta.end() && f->contains("torch") && f->at("torch").is_string())
    (note += ' ') += f->at("torch").get_ref<const std::string&>();
  // Appending, not " (" + note: GCC 12 at -O3 warns falsely (-Wrestrict) on literal + temporary.
  std::string text = " (";
  text += note;
  return text += ')';
}

// A table's header row and rule: the fixed columns with their rule, then right-aligned (numeric)
// columns appended.
void md_header(std::string& out, std::vector<std::string> header, std::string rule,
               const std::vector<std::string>& numeric) {
  for (const std::string& n : numeric) {
    header.push_back(n);
    rule += "---:|";
  }
  md_row(out, header);
  out += rule + "\n";
}

// ---------------------------------------------------------------------------------------------
// Markdown summaries: one table per experiment family, one row per experiment
// ---------------------------------------------------------------------------------------------

// Families grouped by their first two name components: gemm_epilogue/<op>/<dtype>/<shape> gives
// one table per epilogue op, since the ops' shapes and variants differ.
constexpr std::array<std::string_view, 1> kTwoLevelFamilies = {"gemm_epilogue"};

// An experiment name split into its family and the rest: "layernorm_fwd/bf16/rows=4096" into
// "layernorm_fwd" and "bf16/rows=4096"; a name without a '/' is a family of its own, rest "".
std::pair<std::string, std::string> split_family(const std::string& name) {
  std::size_t end = name.find('/');
  if (end != std::string::npos && std::find(kTwoLevelFamilies.begin(), kTwoLevelFamilies.end(),
                                            std::string_view(name).substr(0, end)) != kTwoLevelFamilies.end())
    end = name.find('/', end + 1);
  if (end == std::string::npos) return {name, ""};
  return {name.substr(0, end), name.substr(end + 1)};
}

const std::string& name_of(const json& j) {
  return j.at("name").get_ref<const std::string&>();
}

const std::string& baseline_of(const json& experiment) {
  return experiment.at("baseline").get_ref<const std::string&>();
}

// The variant of that name unless it is the experiment's baseline; nullptr where there is none.
const json* non_baseline_variant(const json& experiment, const std::string& name) {
  if (name == baseline_of(experiment)) return nullptr;
  for (const json& v : experiment.at("variants"))
    if (name_of(v) == name) return &v;
  return nullptr;
}

// The fastest non-baseline variant that is a whole operation, not a component (the first of equal
// medians); nullptr where there is none.
const json* best_variant(const json& experiment) {
  const json* best = nullptr;
  for (const json& v : experiment.at("variants"))
    if (name_of(v) != baseline_of(experiment) && report_component_of(v).empty() &&
        (!best || v.at("median_ms").get<double>() < best->at("median_ms").get<double>()))
      best = &v;
  return best;
}

struct Family {
  std::string name;
  std::vector<const json*> experiments;  // in report order
  std::vector<std::string> variants;     // the non-baseline variant names, in order of appearance
};

std::vector<Family> families_of(const json& report) {
  std::vector<Family> families;
  for (const json& experiment : report.at("experiments")) {
    const std::string family = split_family(name_of(experiment)).first;
    auto it =
        std::find_if(families.begin(), families.end(), [&](const Family& f) { return f.name == family; });
    if (it == families.end()) it = families.insert(families.end(), Family{family, {}, {}});
    it->experiments.push_back(&experiment);
    for (const json& v : experiment.at("variants"))
      if (name_of(v) != baseline_of(experiment) &&
          std::find(it->variants.begin(), it->variants.end(), name_of(v)) == it->variants.end())
        it->variants.push_back(name_of(v));
  }
  return families;
}

void md_summary(std::string& out, const json& report, const TorchIndex& torch,
                const std::vector<std::string>& columns, const Family& family) {
  // A rate column per variant only where some row has that rate.
  struct Rates {
    bool gbps = false, pct_copy_bw = false, tflops = false;
  };
  std::vector<Rates> rates(family.variants.size());
  bool one_baseline = true;
  for (const json* experiment : family.experiments) {
    one_baseline = one_baseline && baseline_of(*experiment) == baseline_of(*family.experiments.front());
    for (std::size_t i = 0; i < family.variants.size(); ++i)
      if (const json* v = non_baseline_variant(*experiment, family.variants[i])) {
        rates[i].gbps = rates[i].gbps || !v->at("gbps").is_null();
        rates[i].pct_copy_bw = rates[i].pct_copy_bw || !v->at("pct_copy_bw").is_null();
        rates[i].tflops = rates[i].tflops || !v->at("tflops").is_null();
      }
  }
  // With several non-baseline variants, the torch columns need to say whose they are.
  const bool show_best = !columns.empty() && family.variants.size() > 1;

  std::vector<std::string> header = {
      md(family.name), md(one_baseline ? baseline_of(*family.experiments.front()) : "baseline") + " ms"};
  for (std::size_t i = 0; i < family.variants.size(); ++i) {
    const std::string v = md(family.variants[i]);
    header.insert(header.end(), {v + " ms", v + " speedup"});
    if (rates[i].gbps) header.push_back(v + " GB/s");
    if (rates[i].pct_copy_bw) header.push_back(v + " % copy BW");
    if (rates[i].tflops) header.push_back(v + " TFLOP/s");
  }
  if (show_best) header.push_back("best");
  for (const std::string& c : columns) header.push_back(torch_label(c));
  md_row(out, header);
  // Text columns left-aligned, numbers right-aligned.
  const std::size_t best_column = show_best ? header.size() - columns.size() - 1 : 0;
  out += "|";
  for (std::size_t c = 0; c < header.size(); ++c) out += c == 0 || c == best_column ? "---|" : "---:|";
  out += "\n";

  for (const json* experiment : family.experiments) {
    const std::string rest = split_family(name_of(*experiment)).second;
    const std::string label = rest.empty() ? compact_params(experiment->at("params")) : rest;
    std::vector<std::string> cells = {label.empty() ? kDash : md(label)};
    for (const json& v : experiment->at("variants"))
      if (name_of(v) == baseline_of(*experiment)) cells.push_back(make_row(*experiment, v).median);
    for (std::size_t i = 0; i < family.variants.size(); ++i) {
      const json* v = non_baseline_variant(*experiment, family.variants[i]);
      const std::optional<Row> r = v ? std::optional<Row>(make_row(*experiment, *v)) : std::nullopt;
      cells.push_back(r ? r->median : kDash);
      cells.push_back(r ? r->speedup + "×" : kDash);
      if (rates[i].gbps) cells.push_back(r ? md(r->gbps) : kDash);
      if (rates[i].pct_copy_bw) cells.push_back(r ? md(r->pct_copy_bw) : kDash);
      if (rates[i].tflops) cells.push_back(r ? md(r->tflops) : kDash);
    }
    const json* best = best_variant(*experiment);
    if (show_best) cells.push_back(best ? md(name_of(*best)) : kDash);
    if (!columns.empty()) {
      // The join is the details' own: the best variant's row, with its "vs torch" cells.
      const std::vector<std::string> vs_torch =
          best ? md_vs_torch(make_row(torch, columns, report, *experiment, *best))
               : std::vector<std::string>(columns.size(), kDash);
      cells.insert(cells.end(), vs_torch.begin(), vs_torch.end());
    }
    md_row(out, cells);
  }
  out += "\n";
  // What a component's numbers are (each pair once, in order of appearance).
  std::vector<std::pair<std::string, std::string>> components;
  for (const json* experiment : family.experiments)
    for (const json& v : experiment->at("variants"))
      if (const std::string whole = report_component_of(v); !whole.empty()) {
        const std::pair<std::string, std::string> pair{name_of(v), whole};
        if (std::find(components.begin(), components.end(), pair) == components.end())
          components.push_back(pair);
      }
  for (const auto& [part, whole] : components)
    out += "`" + part + "` times a part of `" + whole +
           "`, not the whole operation: its speedup is not a result and it is never the best; `" + whole +
           "` minus it is the time of what it leaves out.\n\n";
}

// The checks that carry named values (the trainer suite's precision drift study), one row each,
// passed or not, a column per value name in the order first seen (nlohmann sorts each object's).
void md_check_values(std::string& out, const json& checks) {
  std::vector<std::string> names;
  for (const json& c : checks)
    if (const auto values = c.find("values"); values != c.end())
      for (const auto& [key, value] : values->items())
        if (std::find(names.begin(), names.end(), key) == names.end()) names.push_back(key);
  if (names.empty()) return;
  std::vector<std::string> numeric;
  for (const std::string& n : names) numeric.push_back(md(n));
  md_header(out, {"check", "passed"}, "|---|---|", numeric);
  for (const json& c : checks) {
    const auto values = c.find("values");
    if (values == c.end()) continue;
    std::vector<std::string> cells = {md(c.at("name").get<std::string>()),
                                      c.at("passed").get<bool>() ? "yes" : "**no**"};
    for (const std::string& n : names) {
      const auto it = values->find(n);
      cells.push_back(it == values->end() ? "" : md(number(*it, scientific)));
    }
    md_row(out, cells);
  }
  out += "\n";
}

constexpr std::size_t kTorchNotesShown = 8;

void md_report(std::string& out, const json& report, const TorchIndex& torch) {
  const json& meta = report.at("meta");
  out += "## " + md(report.at("suite").get<std::string>() + runner_note(meta)) + " — " +
         md(report_device_name(meta)) + " — " + md(report_short_sha(meta)) + " — " +
         md(meta.at("timestamp").get<std::string>()) + "\n\n";
  // A PyTorch report's own tables carry no torch columns: its speedup column is already relative to torch
  // eager.
  const std::vector<std::string> columns = is_pytorch_report(report)
                                               ? std::vector<std::string>{}
                                               : torch.columns(report.at("suite").get<std::string>());

  if (const auto skipped = report.find("skipped"); skipped != report.end() && !skipped->empty()) {
    out += "Skipped:\n";
    for (const json& s : *skipped)
      out +=
          "- " + md(s.at("suite").get<std::string>()) + ": " + md(s.at("reason").get<std::string>()) + "\n";
    out += "\n";
  }
  // Selected but not measured (the time budget, a lost device, a signal): never a silent absence.
  if (const auto not_run = report.find("not_run"); not_run != report.end() && !not_run->empty()) {
    out += "Not run:\n";
    for (const json& n : *not_run)
      out += "- " + md(n.at("experiment").get<std::string>()) + ": " + md(n.at("reason").get<std::string>()) +
             "\n";
    out += "\n";
  }
  // A report that records a --quick or filtered run says so (its shapes are not the paper's).
  if (meta.value("quick", false) || (meta.contains("filter") && meta.at("filter").is_string()))
    out += std::string("Run: ") + (meta.value("quick", false) ? "--quick shapes" : "full shapes") +
           (meta.contains("filter") && meta.at("filter").is_string()
                ? "; last part filtered by `" + meta.at("filter").get<std::string>() + "`"
                : "") +
           ".\n\n";

  const json& experiments = report.at("experiments");
  if (experiments.empty()) {
    out += "No timed experiments.\n\n";
  } else {
    out += "### Summary\n\n";
    for (const Family& family : families_of(report)) md_summary(out, report, torch, columns, family);
    // Under the numbers, what they are against: the PyTorch variants' own notes (at most 8).
    if (!columns.empty()) {
      const std::vector<std::string> notes =
          torch.notes(report.at("suite").get<std::string>(), report_device_name(meta));
      if (!notes.empty()) {
        out += "The PyTorch variants' notes:";
        for (std::size_t i = 0; i < notes.size() && i < kTorchNotesShown; ++i)
          out += (i == 0 ? " " : "; ") + md(notes[i]);
        if (notes.size() > kTorchNotesShown)
          out += " (and " + std::to_string(notes.size() - kTorchNotesShown) + " more in the PyTorch report)";
        out += ".\n\n";
      }
    }
    out += "### Details\n\n";
  }
  bool mixed_timing = false;  // some "vs torch" cell compares two sides timed differently
  for (const json& experiment : experiments) {
    std::vector<std::string> torch_columns;
    for (const std::string& c : columns) torch_columns.push_back(torch_label(c));
    md_header(out,
              {"experiment", "params", "variant", "median ms", "p20–p80 ms", "GB/s", "% copy BW", "TFLOP/s",
               "speedup"},
              "|---|---|---|---:|---:|---:|---:|---:|---:|", torch_columns);
    for (const json& variant : experiment.at("variants")) {
      const Row r = make_row(torch, columns, report, experiment, variant);
      std::vector<std::string> cells = {md(r.experiment),  md(r.params),        md(r.variant),
                                        r.median,          r.p20 + "–" + r.p80, md(r.gbps),
                                        md(r.pct_copy_bw), md(r.tflops),        r.speedup + "×"};
      const std::vector<std::string> vs_torch = md_vs_torch(r);
      cells.insert(cells.end(), vs_torch.begin(), vs_torch.end());
      mixed_timing = mixed_timing || std::find(r.vs_torch_mixed.begin(), r.vs_torch_mixed.end(), true) !=
                                         r.vs_torch_mixed.end();
      md_row(out, cells);
    }
    out += "\n";
  }
  if (mixed_timing)
    out += std::string(kMixedTiming) +
           " The two sides of this speedup were timed differently: one replayed a CUDA graph and the other "
           "launched its kernels directly, host-side launch costs included (each variant's `cuda_graph`), or "
           "their samples held different numbers of calls (`calls_per_sample`).\n\n";

  // The memory suite's byte accounting (LightSeq2 Fig. 8): naive sum against the planner's block.
  if (const auto accounting = report.find("accounting"); accounting != report.end() && !accounting->empty()) {
    md_row(out, {"accounting", "params", "naive MiB", "managed MiB", "managed / naive"});
    out += "|---|---|---:|---:|---:|\n";
    const auto mib = [](const json& bytes) { return fixed_decimals(bytes.get<double>() / (1 << 20), 1); };
    for (const json& entry : *accounting)
      md_row(out, {md(entry.at("name").get<std::string>()), md(compact_params(entry.at("params"))),
                   mib(entry.at("naive_bytes")), mib(entry.at("managed_bytes")),
                   fixed_decimals(entry.at("ratio").get<double>(), 2)});
    out += "\n";
  }

  const json& checks = report.at("checks");
  const auto failed =
      std::count_if(checks.begin(), checks.end(), [](const json& c) { return !c.at("passed").get<bool>(); });
  if (checks.empty()) {
    out += "Checks: none.\n\n";
    return;
  }
  out += "Checks: " + std::to_string(checks.size() - failed) + " passed, " + std::to_string(failed) +
         " failed.\n\n";
  if (failed > 0) {
    md_row(out, {"failed check", "max abs err", "max rel err", "tolerance", "detail"});
    out += "|---|---:|---:|---:|---|\n";
    for (const json& c : checks) {
      if (c.at("passed").get<bool>()) continue;
      md_row(out, {md(c.at("name").get<std::string>()), md(number(c.at("max_abs_err"), scientific)),
                   md(number(c.at("max_rel_err"), scientific)), md(number(c.at("tolerance"), scientific)),
                   md(c.value("detail", std::string()))});
    }
    out += "\n";
  }
  md_check_values(out, checks);
}

// ---------------------------------------------------------------------------------------------
// CSV (RFC 4180)
// ---------------------------------------------------------------------------------------------

std::string csv(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';  // a quote inside a quoted field is doubled
    out += c;
  }
  return out + "\"";
}

std::string csv(const Text& field) {
  return field ? csv(*field) : std::string();
}

void csv_row(std::string& out, const std::vector<std::string>& fields) {
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + fields[i];
  out += "\r\n";
}

void csv_report(std::string& out, const json& report, const TorchIndex& torch,
                const std::vector<std::string>& columns) {
  const std::string suite = csv(report.at("suite").get<std::string>());
  const std::string device = csv(report_device_name(report.at("meta")));
  // With PyTorch reports in the input, every row says which runner measured it.
  const std::string runner = csv(report.at("meta").value("runner", std::string("seqbench")));
  for (const json& experiment : report.at("experiments")) {
    for (const json& variant : experiment.at("variants")) {
      const Row r = make_row(torch, columns, report, experiment, variant);
      std::vector<std::string> fields = {suite,
                                         device,
                                         csv(r.experiment),
                                         csv(r.params),
                                         csv(r.variant),
                                         r.median,
                                         r.p20,
                                         r.p80,
                                         csv(r.gbps),
                                         csv(r.pct_copy_bw),
                                         csv(r.tflops),
                                         r.speedup,
                                         csv(report_component_of(variant))};
      if (torch.any()) {
        fields.insert(fields.begin() + 2, runner);
        for (const Text& x : r.vs_torch) fields.push_back(csv(x));
      }
      csv_row(out, fields);
    }
  }
}

}  // namespace

TableFormat parse_table_format(std::string_view name) {
  if (name == "md" || name == "markdown") return TableFormat::markdown;
  if (name == "csv") return TableFormat::csv;
  SEQBENCH_FAIL("unknown table format '" << name << "' (accepted: md, markdown, csv)");
}

std::string render_tables(const std::vector<json>& reports, TableFormat format) {
  // Validation first: the renderers then read members without checking each one.
  for (std::size_t i = 0; i < reports.size(); ++i)
    require_valid_report(reports[i], "report #" + std::to_string(i + 1) + " given to render_tables");

  const TorchIndex torch(reports);
  std::string out;
  if (format == TableFormat::csv) {
    std::vector<std::string> header = {"suite",     "device",  "experiment",  "params", "variant",
                                       "median_ms", "p20_ms",  "p80_ms",      "gbps",   "pct_copy_bw",
                                       "tflops",    "speedup", "component_of"};
    const std::vector<std::string> columns = torch.all_columns();
    if (torch.any()) {
      header.insert(header.begin() + 2, "runner");
      for (const std::string& c : columns) header.push_back(std::string("vs_").append(c));
    }
    csv_row(out, header);
    for (const json& report : reports) csv_report(out, report, torch, columns);
  } else {
    for (const json& report : reports) md_report(out, report, torch);
    // Each report ends with a blank line that separates it from the next; the last needs none.
    if (out.ends_with("\n\n")) out.pop_back();
  }
  return out;
}

}  // namespace seqbench
