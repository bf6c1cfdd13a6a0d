#include "core/error.h"
#include "suites/experiment.h"
#include "suites/operators/operators.h"
#include "suites/suite_device.h"
#include "suites/suite_layers.h"
#include "suites/suite_memory.h"
#include "suites/suite_reference.h"
#include "suites/suite_trainer.h"

namespace seqbench {

std::vector<SuiteSpec> all_suites(const SuiteOptions& options) {
  std::vector<SuiteSpec> suites;
  suites.push_back(reference_suite(options));
  suites.push_back(device_suite(options));
  suites.push_back(operators_suite(options));
  suites.push_back(trainer_suite(options));
  suites.push_back(layers_suite(options));
  suites.push_back(memory_suite(options));
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

}  // namespace seqbench
