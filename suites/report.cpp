#include "suites/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"

namespace seqbench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

enum class Kind { string, boolean, integer, number, object, array };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::string:
      return "string";
    case Kind::boolean:
      return "boolean";
    case Kind::integer:
      return "integer";
    case Kind::number:
      return "number";
    case Kind::object:
      return "object";
    case Kind::array:
      return "array";
  }
  return "?";
}

bool has_kind(const json& value, Kind kind) {
  switch (kind) {
    case Kind::string:
      return value.is_string();
    case Kind::boolean:
      return value.is_boolean();
    case Kind::integer:
      return value.is_number_integer();
    case Kind::number:
      return value.is_number();
    case Kind::object:
      return value.is_object();
    case Kind::array:
      return value.is_array();
  }
  return false;
}

// nlohmann's type names, except that whole numbers say "integer": then "expected integer, got
// number" tells the reader that 2.5 (not "a number") is what is wrong.
std::string type_word(const json& value) {
  return value.is_number_integer() ? "integer" : value.type_name();
}

// A value as it appears in a message: compact JSON, escaped (so always one line) and cut short so
// that a long string cannot flood the error.
std::string shown(const json& value) {
  constexpr std::size_t kMax = 60;
  std::string text = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (value.is_number_float() && !std::isfinite(value.get<double>()))
    text = std::to_string(value.get<double>());  // dump() would print "null" for NaN and inf
  if (text.size() > kMax) text = text.substr(0, kMax - 3) + "...";
  return text;
}

std::string shown_number(double x) {
  return shown(json(x));
}

std::string join(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string at(const std::string& path, std::size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// Whether a member may be absent, and whether it may be null. Both default to "no".
struct Need {
  bool optional = false;
  bool nullable = false;
};
constexpr Need kNullable{false, true};
constexpr Need kOptional{true, false};
constexpr Need kOptionalNullable{true, true};

// A nullable number after checking: a valid value, a (permitted) null, or something already
// reported as a problem. Consistency rules ("gbps is null exactly when bytes is 0") read it.
struct NullableNumber {
  enum State { invalid, null, value } state = invalid;
  double number = 0.0;
};

// A member must be positive, or only non-negative.
enum class Bound { positive, non_negative };

class Validator {
 public:
  std::vector<std::string> problems;

  void add(const std::string& path, const std::string& problem) { problems.push_back(path + ": " + problem); }

  // The member `key` of the object `obj` when it is present, of `kind`, and (for numbers) finite;
  // nullptr otherwise, with the reason recorded unless `need` allows it (absent, or null).
  const json* get(const json& obj, const std::string& parent, std::string_view key, Kind kind,
                  Need need = {}) {
    const std::string path = join(parent, key);
    const auto it = obj.find(key);
    if (it == obj.end()) {
      if (!need.optional) add(path, "missing");
      return nullptr;
    }
    const json& value = *it;
    if (value.is_null() && need.nullable) return nullptr;
    if (!has_kind(value, kind)) {
      add(path, std::string("expected ") + kind_name(kind) + (need.nullable ? " or null" : "") + ", got " +
                    type_word(value));
      return nullptr;
    }
    // Parsed JSON cannot hold NaN or infinity, but a document built in memory can; dump() would
    // silently write it as null.
    if (value.is_number_float() && !std::isfinite(value.get<double>())) {
      add(path, "must be finite, got " + shown(value));
      return nullptr;
    }
    return &value;
  }

  const std::string* string(const json& obj, const std::string& parent, std::string_view key,
                            bool non_empty = true, Need need = {}) {
    const json* value = get(obj, parent, key, Kind::string, need);
    if (!value) return nullptr;
    const auto* text = value->get_ptr<const std::string*>();
    if (non_empty && text->empty()) {
      add(join(parent, key), "must not be empty");
      return nullptr;
    }
    return text;
  }

  std::optional<double> number(const json& obj, const std::string& parent, std::string_view key, Bound bound,
                               Need need = {}) {
    const json* value = get(obj, parent, key, Kind::number, need);
    if (!value) return std::nullopt;
    const double x = value->get<double>();
    if (!within(x, bound)) {
      add(join(parent, key), out_of_bound(bound, *value));
      return std::nullopt;
    }
    return x;
  }

  // A member that must be present and may be null; see NullableNumber.
  NullableNumber nullable_number(const json& obj, const std::string& parent, std::string_view key,
                                 Bound bound) {
    const auto it = obj.find(key);
    if (it != obj.end() && it->is_null()) return {NullableNumber::null, 0.0};
    const auto x = number(obj, parent, key, bound, kNullable);
    return x ? NullableNumber{NullableNumber::value, *x} : NullableNumber{};
  }

  // Integers are compared in their own type: a seed may be any uint64 and must not be rounded.
  // nlohmann stores parsed non-negative integers as unsigned, negative ones as signed.
  void integer(const json& obj, const std::string& parent, std::string_view key, Bound bound,
               Need need = {}) {
    const json* value = get(obj, parent, key, Kind::integer, need);
    if (!value) return;
    const bool ok = value->is_number_unsigned()
                        ? bound == Bound::non_negative || value->get<std::uint64_t>() > 0
                        : within(static_cast<double>(value->get<std::int64_t>()), bound);
    if (!ok) add(join(parent, key), out_of_bound(bound, *value));
  }

  // The array member `key`, whose items each pass `item(object, path)` once known to be objects.
  template <typename ItemCheck>
  void objects(const json& obj, const std::string& parent, std::string_view key, Need need, ItemCheck item) {
    const json* list = get(obj, parent, key, Kind::array, need);
    if (!list) return;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string path = at(join(parent, key), i);
      if (!(*list)[i].is_object())
        add(path, "expected object, got " + type_word((*list)[i]));
      else
        item((*list)[i], path);
    }
  }

 private:
  static bool within(double x, Bound bound) { return bound == Bound::positive ? x > 0.0 : x >= 0.0; }
  static std::string out_of_bound(Bound bound, const json& value) {
    return std::string(bound == Bound::positive ? "must be > 0" : "must be >= 0") + ", got " + shown(value);
  }
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_git_sha(const std::string& text) {
  if (text == "unknown") return true;
  if (text.size() != 40) return false;
  for (char c : text)
    if (!is_digit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F')) return false;
  return true;
}

// "9.0", "12.1": what DeviceInfo::compute_capability() writes.
bool is_compute_capability(const std::string& text) {
  const auto dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == text.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i)
    if (i != dot && !is_digit(text[i])) return false;
  return true;
}

int days_in_month(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

// "YYYY-MM-DDTHH:MM:SS[.fraction]" then "Z" or "+HH:MM" / "-HH:MM", with calendar ranges checked.
// The zone is required: a local time without one cannot be compared across machines.
bool is_iso8601_timestamp(std::string_view s) {
  std::size_t pos = 0;
  auto digits = [&](int count, int& out) {
    if (pos + count > s.size()) return false;
    out = 0;
    for (int k = 0; k < count; ++k) {
      if (!is_digit(s[pos + k])) return false;
      out = out * 10 + (s[pos + k] - '0');
    }
    pos += count;
    return true;
  };
  auto literal = [&](char c) {
    if (pos >= s.size() || s[pos] != c) return false;
    ++pos;
    return true;
  };
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!(digits(4, year) && literal('-') && digits(2, month) && literal('-') && digits(2, day) &&
        literal('T') && digits(2, hour) && literal(':') && digits(2, minute) && literal(':') &&
        digits(2, second)))
    return false;
  if (literal('.')) {
    const std::size_t start = pos;
    while (pos < s.size() && is_digit(s[pos])) ++pos;
    if (pos == start) return false;
  }
  if (!literal('Z')) {
    int offset_hours = 0, offset_minutes = 0;
    if (!(literal('+') || literal('-'))) return false;
    if (!(digits(2, offset_hours) && literal(':') && digits(2, offset_minutes))) return false;
    if (offset_hours > 23 || offset_minutes > 59) return false;
  }
  if (pos != s.size()) return false;
  // Second 60 is a leap second.
  return month >= 1 && month <= 12 && day >= 1 && day <= days_in_month(year, month) && hour <= 23 &&
         minute <= 59 && second <= 60;
}

// Whether pct_copy_bw may be filled: the device's copy bandwidth is known (true), known to be
// unknown (false: no device, or copy_gbps null), or undecidable because meta is itself invalid.
using CopyKnown = std::optional<bool>;

CopyKnown validate_device(Validator& v, const json& device) {
  const std::string p = "meta.device";
  v.string(device, p, "name");
  if (const auto* cc = v.string(device, p, "compute_capability"); cc && !is_compute_capability(*cc))
    v.add(join(p, "compute_capability"), "expected \"major.minor\" like \"9.0\", got " + shown(*cc));
  v.integer(device, p, "sm_count", Bound::positive);
  v.integer(device, p, "l2_bytes", Bound::positive);
  v.integer(device, p, "memory_bytes", Bound::positive);
  if (const json* clocks = v.get(device, p, "clocks", Kind::object)) {
    const std::string pc = join(p, "clocks");
    // Clocks are only >= 0: a virtualized device may report 0, and refusing the report for it
    // would throw away a whole run over a field that is informative, not essential.
    v.integer(*clocks, pc, "sm_max_mhz", Bound::non_negative);
    v.integer(*clocks, pc, "memory_max_mhz", Bound::non_negative);
    // Current clocks and clock-event reasons come from nvidia-smi or NVML, which may be absent or
    // refuse: then they are left out (or null), never invented.
    v.integer(*clocks, pc, "sm_mhz", Bound::non_negative, kOptionalNullable);
    v.integer(*clocks, pc, "memory_mhz", Bound::non_negative, kOptionalNullable);
    v.string(*clocks, pc, "clock_event_reasons", false, kOptionalNullable);
  }
  for (const char* key : {"driver", "runtime", "cublas"}) v.string(device, p, key);
  const auto copy = v.nullable_number(device, p, "copy_gbps", Bound::positive);
  if (copy.state == NullableNumber::invalid) return std::nullopt;
  return copy.state == NullableNumber::value;
}

CopyKnown validate_meta(Validator& v, const json& meta) {
  const std::string p = "meta";
  v.string(meta, p, "seqbench_version");
  if (const auto* sha = v.string(meta, p, "git_sha"); sha && !is_git_sha(*sha))
    v.add(join(p, "git_sha"), "expected 40 hex digits or \"unknown\", got " + shown(*sha));
  v.get(meta, p, "git_dirty", Kind::boolean);
  if (const auto* ts = v.string(meta, p, "timestamp"); ts && !is_iso8601_timestamp(*ts))
    v.add(join(p, "timestamp"),
          "expected ISO 8601 like \"2026-11-22T10:00:00Z\" or \"...+01:00\", got " + shown(*ts));
  v.string(meta, p, "host");
  v.integer(meta, p, "seed", Bound::non_negative);
  // Descriptive strings may be empty (no flags, a build type left unset): only identifiers must
  // not be, since tables and comparisons key on them.
  if (const json* build = v.get(meta, p, "build", Kind::object))
    for (const char* key : {"type", "flags", "cuda_architectures"})
      v.string(*build, "meta.build", key, false);
  // Who measured: absent for seqbench itself, "pytorch" for suites/pytorch/ (tables join on it),
  // and the versions of the frameworks that runner used.
  v.string(meta, p, "runner", true, kOptional);
  // How `seqbench run` ran (suites/runner.h): absent in older reports and other runners' (a
  // PyTorch report keeps them per part), so a reader may not assume them.
  v.get(meta, p, "quick", Kind::boolean, kOptional);
  // tools/source_hash.sh of the build's tree (absent in older reports; null when unknown).
  v.string(meta, p, "source_hash", true, kOptionalNullable);
  v.string(meta, p, "filter", true, kOptionalNullable);
  // false: a `seqbench run --keep-checks` part that kept the checks of the parts before it.
  v.get(meta, p, "checks_run", Kind::boolean, kOptional);
  v.integer(meta, p, "repetitions", Bound::positive, kOptional);
  v.get(meta, p, "timer_policy", Kind::object, kOptional);
  // Readers of a merged report (merge_reports, checks_not_keepable, the table's quick flag) take
  // these members by type, so a part must have them of that type when it has them.
  v.objects(meta, p, "parts", kOptional, [&](const json& part, const std::string& path) {
    v.string(part, path, "timestamp", false, kOptional);
    v.string(part, path, "host", false, kOptional);
    v.get(part, path, "git_dirty", Kind::boolean, kOptional);
    v.string(part, path, "source_hash", true, kOptionalNullable);
    v.string(part, path, "filter", true, kOptionalNullable);
    v.get(part, path, "quick", Kind::boolean, kOptionalNullable);
    v.get(part, path, "checks_run", Kind::boolean, kOptional);
    v.number(part, path, "copy_gbps", Bound::positive, kOptionalNullable);
  });
  if (const json* frameworks = v.get(meta, p, "frameworks", Kind::object, kOptional))
    for (const auto& [key, value] : frameworks->items())
      if (!value.is_string() && !value.is_null())
        v.add(join(join(p, "frameworks"), key), "expected string or null, got " + type_word(value));
  const auto it = meta.find("device");
  if (it != meta.end() && it->is_null()) return false;  // no GPU: no copy bandwidth either
  const json* device = v.get(meta, p, "device", Kind::object, kNullable);
  return device ? validate_device(v, *device) : std::nullopt;
}

// gbps from bytes, tflops from flops: a rate exists exactly when its amount is positive.
NullableNumber validate_rate(Validator& v, const json& variant, const std::string& p, const char* rate,
                             const char* amount_key, std::optional<double> amount) {
  const auto value = v.nullable_number(variant, p, rate, Bound::non_negative);
  if (!amount || value.state == NullableNumber::invalid) return value;
  if (*amount > 0.0 && value.state == NullableNumber::null)
    v.add(join(p, rate), std::string("expected number because ") + amount_key + " > 0, got null");
  if (*amount == 0.0 && value.state == NullableNumber::value)
    v.add(join(p, rate),
          std::string("must be null because ") + amount_key + " is 0, got " + shown_number(value.number));
  return value;
}

void validate_variant(Validator& v, const json& variant, const std::string& p, CopyKnown copy_known,
                      bool is_baseline) {
  v.integer(variant, p, "samples", Bound::positive);
  const auto median = v.number(variant, p, "median_ms", Bound::positive);
  const auto p20 = v.number(variant, p, "p20_ms", Bound::positive);
  const auto p80 = v.number(variant, p, "p80_ms", Bound::positive);
  if (median && p20 && *p20 > *median)
    v.add(join(p, "p20_ms"),
          "must be <= median_ms (" + shown_number(*median) + "), got " + shown_number(*p20));
  if (median && p80 && *p80 < *median)
    v.add(join(p, "p80_ms"),
          "must be >= median_ms (" + shown_number(*median) + "), got " + shown_number(*p80));
  v.number(variant, p, "cv", Bound::non_negative);

  const auto bytes = v.number(variant, p, "bytes", Bound::non_negative);
  const auto flops = v.number(variant, p, "flops", Bound::non_negative);
  const auto gbps = validate_rate(v, variant, p, "gbps", "bytes", bytes);
  validate_rate(v, variant, p, "tflops", "flops", flops);

  const auto pct = v.nullable_number(variant, p, "pct_copy_bw", Bound::non_negative);
  if (copy_known && gbps.state != NullableNumber::invalid && pct.state != NullableNumber::invalid) {
    const bool expected = *copy_known && gbps.state == NullableNumber::value;
    if (expected && pct.state == NullableNumber::null)
      v.add(join(p, "pct_copy_bw"),
            "expected number because gbps and meta.device.copy_gbps are known, got null");
    if (!expected && pct.state == NullableNumber::value)
      v.add(join(p, "pct_copy_bw"),
            "must be null because gbps or meta.device.copy_gbps is null, got " + shown_number(pct.number));
  }

  // How it was timed (absent in reports that predate them): replays of a CUDA graph or direct
  // launches, how many calls (each on its own copy of the buffers) a sample's events bracketed, and
  // why a requested graph was not used.
  v.get(variant, p, "cuda_graph", Kind::boolean, kOptional);
  v.integer(variant, p, "calls_per_sample", Bound::positive, kOptional);
  v.get(variant, p, "note", Kind::string, kOptional);
  v.string(variant, p, "component_of", true, kOptional);

  const auto speedup = v.number(variant, p, "speedup", Bound::positive);
  if (is_baseline && speedup && *speedup != 1.0)
    v.add(join(p, "speedup"), "the baseline's own speedup must be 1, got " + shown_number(*speedup));
}

void validate_experiment(Validator& v, const json& experiment, const std::string& p, CopyKnown copy_known) {
  v.string(experiment, p, "name");
  v.get(experiment, p, "params", Kind::object);
  v.get(experiment, p, "notes", Kind::object, kOptional);
  const std::string* baseline = v.string(experiment, p, "baseline");
  const json* variants = v.get(experiment, p, "variants", Kind::array);
  if (!variants) return;
  if (variants->empty()) {
    v.add(join(p, "variants"), "must not be empty");
    return;
  }
  std::map<std::string, std::size_t> first_index;  // variant name → where it first appeared
  for (std::size_t j = 0; j < variants->size(); ++j) {
    const std::string vp = at(join(p, "variants"), j);
    const json& variant = (*variants)[j];
    if (!variant.is_object()) {
      v.add(vp, "expected object, got " + type_word(variant));
      continue;
    }
    const std::string* name = v.string(variant, vp, "name");
    if (name) {
      const auto [it, inserted] = first_index.emplace(*name, j);
      if (!inserted)
        v.add(join(vp, "name"),
              "duplicate " + shown(*name) + " (also variants[" + std::to_string(it->second) + "])");
    }
    validate_variant(v, variant, vp, copy_known, name && baseline && *name == *baseline);
  }
  if (baseline && !first_index.contains(*baseline))
    v.add(join(p, "baseline"), shown(*baseline) + " is not the name of any variant");
  // A component names a whole variant of the same experiment: neither itself, nor the baseline,
  // nor another component.
  for (std::size_t j = 0; j < variants->size(); ++j) {
    const json& variant = (*variants)[j];
    if (!variant.is_object()) continue;
    const auto of = variant.find("component_of");
    if (of == variant.end() || !of->is_string() || of->get_ref<const std::string&>().empty())
      continue;  // absent, or already reported by validate_variant
    const std::string whole = of->get<std::string>();
    const std::string where = join(at(join(p, "variants"), j), "component_of");
    const auto it = first_index.find(whole);
    if (it == first_index.end()) {
      v.add(where, shown(whole) + " is not the name of any variant");
    } else if (it->second == j) {
      v.add(where, "a variant cannot be a component of itself");
    } else if (baseline && whole == *baseline) {
      v.add(where, shown(whole) + " is the baseline; a component is of a measured whole");
    } else if ((*variants)[it->second].contains("component_of")) {
      v.add(where, shown(whole) + " is itself a component");
    } else if (baseline && variant.contains("name") && variant["name"] == *baseline) {
      v.add(where, "the baseline cannot be a component");
    }
  }
}

void validate_check(Validator& v, const json& check, const std::string& p) {
  v.string(check, p, "name");
  const json* passed = v.get(check, p, "passed", Kind::boolean);
  const auto abs_err = v.nullable_number(check, p, "max_abs_err", Bound::non_negative);
  v.nullable_number(check, p, "max_rel_err", Bound::non_negative);
  const auto tolerance = v.nullable_number(check, p, "tolerance", Bound::non_negative);
  v.string(check, p, "detail", false, kOptional);
  // Optional named measurements: numbers of any sign, null for NaN or infinity.
  if (const json* values = v.get(check, p, "values", Kind::object, kOptional)) {
    for (const auto& [key, value] : values->items()) {
      if (key.empty()) {
        v.add(join(p, "values"), "a value's name must not be empty");
        continue;
      }
      const std::string vp = join(join(p, "values"), key);
      if (!value.is_null() && !value.is_number())
        v.add(vp, "expected number or null, got " + type_word(value));
      if (value.is_number_float() && !std::isfinite(value.get<double>()))
        v.add(vp, "must be finite, got " + shown(value));
    }
  }
  // null stands for NaN or infinity. No finite bound holds a NaN or infinite absolute error, and
  // an infinite tolerance bounds nothing, so such a check cannot have passed. A null max_rel_err
  // alone is fine: it is infinite wherever the reference is exactly 0.
  if (passed && passed->get<bool>()) {
    if (abs_err.state == NullableNumber::null)
      v.add(join(p, "passed"), "true, but max_abs_err is null (NaN or infinite)");
    if (tolerance.state == NullableNumber::null)
      v.add(join(p, "passed"), "true, but tolerance is null (NaN or infinite)");
  }
}

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

json finite_or_null(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

// A name from a document for a message: 'text' when it is a string, else the JSON value.
std::string quoted(const json& name) {
  if (!name.is_string()) return shown(name);
  // Appending, not "'" + text: GCC 12 at -O3 warns falsely (-Wrestrict) on literal + temporary.
  std::string text(1, '\'');
  text += name.get_ref<const std::string&>();
  return text += '\'';
}

double median_ms_of(const json& variant, const std::string& experiment) {
  const auto it = variant.find("median_ms");
  const bool ok =
      it != variant.end() && it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() > 0;
  SEQBENCH_REQUIRE(ok, "experiment " << experiment << ": variant " << quoted(variant.value("name", json()))
                                     << " has no positive median_ms");
  return it->get<double>();
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

fs::path directory_of(const fs::path& file) {
  return file.parent_path().empty() ? fs::path(".") : file.parent_path();
}

[[noreturn]] void fail_write(const fs::path& path, const std::string& step, int err) {
  SEQBENCH_FAIL("cannot write '" << path.string() << "': " << step << ": "
                                 << std::system_category().message(err));
}

// The temporary beside the target file. Until commit() (after the rename), destroying it closes and
// removes the file, so every failure path, thrown or not, leaves no stray temporary.
class TempFile {
 public:
  explicit TempFile(const fs::path& target) {
    const fs::path dir = directory_of(target);
    // pid + a process-wide counter is unique among live writers; O_EXCL makes a leftover from a
    // dead process with the same pid a retry, never a file shared with someone else.
    static std::atomic<unsigned long> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      // ".<name>.tmp.<pid>.<n>"; built in steps because GCC 12 -O3 warns falsely on the one-expression form.
      std::string name(1, '.');
      name += target.filename().string();
      name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      path_ = dir / name;
      // 0666 before the umask: the report gets the permissions any newly written file would.
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) return;
      if (errno != EEXIST) break;
    }
    const int err = errno;
    path_.clear();  // nothing of ours to remove
    fail_write(target, "cannot create a temporary file in '" + dir.string() + "'", err);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  int fd() const { return fd_; }
  const fs::path& path() const { return path_; }
  // close() reports deferred write errors (NFS, quotas), so it is checked, not left to the destructor.
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void commit() { path_.clear(); }

 private:
  fs::path path_;
  int fd_ = -1;
};

void write_all(int fd, std::string_view text, const fs::path& target) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_write(target, "write failed", errno);
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// The last part of nlohmann's exception::what(), without its "[json.exception.parse_error.101] "
// prefix: "parse error at line 1, column 5: syntax error while parsing value - ...".
std::string exception_reason(const json::exception& e) {
  std::string text = e.what();
  const auto bracket = text.find("] ");
  if (text.starts_with("[json.exception.") && bracket != std::string::npos) text.erase(0, bracket + 2);
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

// The deepest nesting of arrays and objects in `doc` (a scalar is 0), walked without recursion.
// nlohmann parses any depth without recursing, but dump() (tables' params, merged reports) and
// comparisons recurse: a 200 KB file nested 100000 deep crashed `seqbench table` in dump().
std::size_t nesting_depth(const json& doc) {
  std::size_t deepest = 0;
  std::vector<std::pair<const json*, std::size_t>> pending{{&doc, 0}};
  while (!pending.empty()) {
    const auto [value, depth] = pending.back();
    pending.pop_back();
    if (!value->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const json& child : *value) pending.emplace_back(&child, depth + 1);
  }
  return deepest;
}

}  // namespace

std::vector<std::string> validate_report(const json& report) {
  Validator v;
  if (!report.is_object()) {
    v.add("(root)", "expected object, got " + type_word(report));
    return v.problems;
  }
  if (const std::size_t depth = nesting_depth(report); depth > kMaxReportDepth)
    return {"(root): nested " + std::to_string(depth) + " arrays/objects deep, more than the limit of " +
            std::to_string(kMaxReportDepth)};
  if (const auto it = report.find("schema"); it != report.end() && it->is_string() && *it != kReportSchema)
    return {std::string("schema: expected \"") + kReportSchema + "\", got " + shown(*it)};
  v.get(report, "", "schema", Kind::string);
  v.string(report, "", "suite");

  CopyKnown copy_known;
  if (const json* meta = v.get(report, "", "meta", Kind::object)) copy_known = validate_meta(v, *meta);
  std::map<std::string, std::string> experiment_paths;  // name → where it first appeared
  v.objects(report, "", "experiments", {}, [&](const json& experiment, const std::string& path) {
    validate_experiment(v, experiment, path, copy_known);
    const auto name = experiment.find("name");
    if (name == experiment.end() || !name->is_string()) return;
    const auto [first, inserted] = experiment_paths.emplace(name->get<std::string>(), path);
    if (!inserted) v.add(join(path, "name"), shown(*name) + " is also " + first->second + "'s name");
  });
  v.objects(report, "", "checks", {},
            [&](const json& check, const std::string& path) { validate_check(v, check, path); });
  v.objects(report, "", "skipped", kOptional, [&](const json& skipped, const std::string& path) {
    v.string(skipped, path, "suite");
    v.string(skipped, path, "reason");
  });
  // Experiments selected but not measured, and why ("not started: time budget", "not run: device
  // lost after ...", "not run: stopped by SIGTERM"): listed so that an absence is never silent.
  v.objects(report, "", "not_run", kOptional, [&](const json& entry, const std::string& path) {
    v.string(entry, path, "experiment");
    v.string(entry, path, "reason");
  });
  // Byte counts that are not timings (the memory suite's Fig. 8 accounting).
  v.objects(report, "", "accounting", kOptional, [&](const json& entry, const std::string& path) {
    v.string(entry, path, "name");
    v.get(entry, path, "params", Kind::object);
    v.integer(entry, path, "naive_bytes", Bound::non_negative);
    v.integer(entry, path, "managed_bytes", Bound::non_negative);
    v.number(entry, path, "ratio", Bound::non_negative);
  });
  return v.problems;
}

void require_valid_report(const json& report, const std::string& what) {
  const auto problems = validate_report(report);
  if (problems.empty()) return;
  constexpr std::size_t kShown = 3;
  std::ostringstream message;
  message << what << " does not match " << kReportSchema << ": ";
  for (std::size_t i = 0; i < problems.size() && i < kShown; ++i) message << (i ? "; " : "") << problems[i];
  if (problems.size() > kShown) message << " (and " << problems.size() - kShown << " more)";
  SEQBENCH_FAIL(message.str());
}

json make_variant(const std::string& name, const SampleStats& stats, double bytes, double flops,
                  std::optional<double> copy_gbps) {
  SEQBENCH_REQUIRE(!name.empty(), "a variant needs a name");
  SEQBENCH_REQUIRE(stats.samples >= 1, "variant '" << name << "' has no samples");
  // p20 <= median <= p80 for any summary, so a positive finite p20 and p80 bound all three.
  SEQBENCH_REQUIRE(std::isfinite(stats.p80) && stats.p20 > 0.0,
                   "variant '" << name << "': times " << stats.p20 << " / " << stats.median << " / "
                               << stats.p80 << " ms (p20/median/p80) are not all positive and finite");
  SEQBENCH_REQUIRE(std::isfinite(stats.cv), "variant '" << name << "': cv " << stats.cv << " is not finite");
  SEQBENCH_REQUIRE(std::isfinite(bytes) && bytes >= 0.0,
                   "variant '" << name << "': bytes " << bytes << " is not >= 0");
  SEQBENCH_REQUIRE(std::isfinite(flops) && flops >= 0.0,
                   "variant '" << name << "': flops " << flops << " is not >= 0");
  SEQBENCH_REQUIRE(!copy_gbps || (std::isfinite(*copy_gbps) && *copy_gbps > 0.0),
                   "variant '" << name << "': copy bandwidth " << *copy_gbps << " GB/s is not > 0");

  const double seconds = stats.median * 1e-3;
  const json gbps = bytes > 0.0 ? json(bytes / seconds / 1e9) : json(nullptr);
  const json tflops = flops > 0.0 ? json(flops / seconds / 1e12) : json(nullptr);
  const json pct =
      gbps.is_number() && copy_gbps ? json(100.0 * gbps.get<double>() / *copy_gbps) : json(nullptr);
  return json{{"name", name},        {"samples", stats.samples}, {"median_ms", stats.median},
              {"p20_ms", stats.p20}, {"p80_ms", stats.p80},      {"cv", stats.cv},
              {"bytes", bytes},      {"flops", flops},           {"gbps", gbps},
              {"tflops", tflops},    {"pct_copy_bw", pct},       {"speedup", nullptr}};
}

void finalize_speedups(json& experiment) {
  SEQBENCH_REQUIRE(experiment.is_object(),
                   "an experiment must be a JSON object, got " << type_word(experiment));
  const std::string name = quoted(experiment.value("name", json()));
  const auto baseline = experiment.find("baseline");
  SEQBENCH_REQUIRE(baseline != experiment.end() && baseline->is_string(),
                   "experiment " << name << " names no baseline variant");
  const auto variants = experiment.find("variants");
  SEQBENCH_REQUIRE(variants != experiment.end() && variants->is_array(),
                   "experiment " << name << " has no variants");

  const json* base = nullptr;
  for (const json& variant : *variants)
    if (variant.is_object() && variant.value("name", json()) == *baseline) base = &variant;
  SEQBENCH_REQUIRE(
      base, "experiment " << name << ": baseline " << quoted(*baseline) << " is not among its variants");

  const double base_ms = median_ms_of(*base, name);
  for (json& variant : *variants) {
    SEQBENCH_REQUIRE(variant.is_object(), "experiment " << name << ": a variant is not an object");
    // Exactly 1 for the baseline itself, whatever the rounding of x / x.
    variant["speedup"] = &variant == base ? 1.0 : base_ms / median_ms_of(variant, name);
  }
}

json check_to_json(const CheckResult& check) {
  json out{{"name", check.name},
           {"passed", check.passed},
           {"max_abs_err", finite_or_null(check.max_abs_err)},
           {"max_rel_err", finite_or_null(check.max_rel_err)},
           {"tolerance", finite_or_null(check.tolerance)}};
  if (!check.detail.empty()) out["detail"] = check.detail;
  if (!check.values.empty()) {
    json values = json::object();
    for (const auto& [name, value] : check.values) {
      SEQBENCH_REQUIRE(!name.empty() && !values.contains(name),
                       "check '" << check.name << "': value name '" << name << "' is empty or repeated");
      values[name] = finite_or_null(value);
    }
    out["values"] = std::move(values);
  }
  return out;
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  SEQBENCH_REQUIRE(path.has_filename(), "cannot write '" << path.string() << "': the path names no file");
  TempFile temp(path);
  write_all(temp.fd(), text, path);
  if (::fsync(temp.fd()) != 0) fail_write(path, "fsync failed", errno);
  if (temp.close() != 0) fail_write(path, "close failed", errno);
  if (::rename(temp.path().c_str(), path.c_str()) != 0) fail_write(path, "rename failed", errno);
  temp.commit();

  // Make the rename itself durable. Best effort: the file is already complete in place, and some
  // file systems refuse fsync on a directory.
  const int dir_fd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_json_atomic(const fs::path& path, const json& doc) {
  write_file_atomic(path, doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

json read_report(const fs::path& path) {
  const std::string what = "report '" + path.string() + "'";
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  SEQBENCH_REQUIRE(status.type() != fs::file_type::not_found, what << " not found");
  SEQBENCH_REQUIRE(!ec, "cannot read " << what << ": " << ec.message());
  SEQBENCH_REQUIRE(!fs::is_directory(status), "cannot read " << what << ": it is a directory");

  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) SEQBENCH_FAIL("cannot read " << what << ": " << std::system_category().message(errno));
  std::string text;
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get()))
    SEQBENCH_FAIL("cannot read " << what << ": " << std::system_category().message(errno));

  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    SEQBENCH_FAIL(what << " is not valid JSON at byte " << e.byte << ": " << exception_reason(e));
  } catch (const json::exception& e) {
    // Not a syntax error but as fatal: a number beyond double (1e400) is out_of_range.406.
    SEQBENCH_FAIL(what << " is not valid JSON: " << exception_reason(e));
  }
  require_valid_report(doc, what);
  return doc;
}

bool is_pytorch_report(const json& report) {
  return report.at("meta").value("runner", std::string()) == kPytorchRunner;
}

std::string report_device_name(const json& meta) {
  const json& device = meta.at("device");
  return device.is_null() ? "no GPU" : device.at("name").get<std::string>();
}

std::string report_component_of(const json& variant) {
  const auto it = variant.find("component_of");
  return it != variant.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string report_short_sha(const json& meta) {
  const std::string sha = meta.at("git_sha").get<std::string>();
  return (sha == "unknown" ? sha : sha.substr(0, 7)) + (meta.at("git_dirty").get<bool>() ? "-dirty" : "");
}

std::optional<bool> report_quick(const json& meta) {
  if (const auto q = meta.find("quick"); q != meta.end() && q->is_boolean()) return q->get<bool>();
  const auto parts = meta.find("parts");
  if (parts == meta.end() || !parts->is_array() || parts->empty()) return std::nullopt;
  std::optional<bool> all;
  for (const json& part : *parts) {
    const auto q = part.find("quick");
    if (q == part.end() || !q->is_boolean() || (all && *all != q->get<bool>())) return std::nullopt;
    all = q->get<bool>();
  }
  return all;
}

std::optional<bool> variant_quick(const json& meta, const json& variant) {
  const auto parts = meta.find("parts");
  if (variant.contains("part") && parts != meta.end() && parts->is_array())
    for (const json& part : *parts)
      if (part.is_object() && part.value("id", json()) == variant.at("part")) {
        const auto q = part.find("quick");
        if (q != part.end() && q->is_boolean()) return q->get<bool>();
      }
  return report_quick(meta);
}

}  // namespace seqbench
