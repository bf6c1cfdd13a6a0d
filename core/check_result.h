// The outcome of one correctness comparison (a gradient check, a kernel against its reference).
// `seqbench check` and the reports' "checks" list are made of these.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace seqbench {

struct CheckResult {
  std::string name;
  bool passed = false;
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;
  double tolerance = 0.0;  // the bound the error was held to, with its rule in `detail`
  std::string detail;      // shapes, seed, the tolerance's derivation, or why it failed
  // Named measurements behind the verdict that a reader wants as numbers, not prose (the drift
  // study's drift and losses): the report's optional "values" object, tabulated by `seqbench
  // table`. Names are unique; a NaN or infinite value is written as null.
  std::vector<std::pair<std::string, double>> values;
};

}  // namespace seqbench
