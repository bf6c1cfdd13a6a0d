#include "tests/common/gpu_test.h"

namespace seqbench::testing {

const std::string& gpu_absence_reason() {
  static const std::string reason = [] {
    const DeviceProbe probe = probe_device(0);
    return probe.info ? std::string() : probe.reason;
  }();
  return reason;
}

}  // namespace seqbench::testing
