#include "tests/common/gpu_test.h"

#include <cstdlib>
#include <string_view>

namespace seqbench::testing {

const std::string& gpu_absence_reason() {
  static const std::string reason = [] {
    const DeviceProbe probe = probe_device(0);
    return probe.info ? std::string() : probe.reason;
  }();
  return reason;
}

bool gpu_expected() {
  const char* value = std::getenv("SEQBENCH_EXPECT_GPU");
  return value != nullptr && std::string_view(value) != "" && std::string_view(value) != "0";
}

}  // namespace seqbench::testing
