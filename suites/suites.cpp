#include <algorithm>
#include <cctype>
#include <set>
#include <string>

#include "core/error.h"
#include "suites/experiment.h"
#include "suites/operators/operators.h"
#include "suites/suite_device.h"
#include "suites/suite_layers.h"
#include "suites/suite_memory.h"
#include "suites/suite_reference.h"
#include "suites/suite_trainer.h"

namespace seqbench {

void require_unique_names(const SuiteSpec& suite) {
  std::set<std::string> names;
  for (const ExperimentSpec& e : suite.experiments) {
    SEQBENCH_REQUIRE(!e.name.empty(), "suite '" << suite.name << "': an experiment has an empty name");
    SEQBENCH_REQUIRE(names.insert(e.name).second, "suite '" << suite.name << "': experiment name '" << e.name
                                                            << "' appears twice (names must be unique)");
    std::set<std::string> variants;
    for (const VariantSpec& v : e.variants) {
      const bool identifier = !v.name.empty() && std::all_of(v.name.begin(), v.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
      SEQBENCH_REQUIRE(identifier, "suite '" << suite.name << "', experiment '" << e.name
                                             << "': variant name '" << v.name
                                             << "' is not letters, digits and '_'");
      SEQBENCH_REQUIRE(variants.insert(v.name).second, "suite '" << suite.name << "', experiment '" << e.name
                                                                 << "': variant name '" << v.name
                                                                 << "' appears twice");
    }
  }
}

std::vector<SuiteSpec> all_suites(const SuiteOptions& options) {
  std::vector<SuiteSpec> suites;
  suites.push_back(reference_suite(options));
  suites.push_back(device_suite(options));
  suites.push_back(operators_suite(options));
  suites.push_back(trainer_suite(options));
  suites.push_back(layers_suite(options));
  suites.push_back(memory_suite(options));
  for (const SuiteSpec& suite : suites) require_unique_names(suite);
  return suites;
}

const SuiteSpec& find_suite(const std::vector<SuiteSpec>& suites, const std::string& name) {
  std::string known;
  for (const SuiteSpec& suite : suites) {
    if (suite.name == name) return suite;
    known += (known.empty() ? "" : ", ") + suite.name;
  }
  SEQBENCH_FAIL("unknown suite '" << name << "': known suites are " << known);
}

std::vector<const SuiteSpec*> select_suites(const std::vector<SuiteSpec>& all,
                                            const std::vector<std::string>& names) {
  std::vector<const SuiteSpec*> selected;
  if (names.empty()) {
    for (const SuiteSpec& s : all) selected.push_back(&s);
    return selected;
  }
  for (const std::string& name : names) {
    const SuiteSpec* suite = &find_suite(all, name);
    if (std::find(selected.begin(), selected.end(), suite) == selected.end()) selected.push_back(suite);
  }
  return selected;
}

}  // namespace seqbench
