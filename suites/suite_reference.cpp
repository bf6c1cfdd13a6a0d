#include "suites/suite_reference.h"

#include "reference/checks.h"

namespace seqbench {

SuiteSpec reference_suite(const SuiteOptions&) {
  SuiteSpec suite;
  suite.name = "reference";
  suite.description = "CPU references in double: finite-difference gradient checks and closed-form tests";
  suite.needs_gpu = false;
  suite.cpu_checks = [](std::uint64_t seed) { return ref::run_reference_checks(seed); };
  return suite;
}

}  // namespace seqbench
