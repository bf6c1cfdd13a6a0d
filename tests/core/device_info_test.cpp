#include "core/device_info.h"

#include <gtest/gtest.h>

#include "core/build_info.h"

namespace seqbench {
namespace {

TEST(DeviceInfo, ProbeReportsADeviceOrAReasonNeverBoth) {
  const DeviceProbe probe = probe_device(0);
  EXPECT_NE(probe.info.has_value(), !probe.reason.empty()) << probe.reason;
}

TEST(DeviceInfo, OutOfRangeOrdinalIsAReasonNotACrash) {
  const DeviceProbe probe = probe_device(1 << 20);
  EXPECT_FALSE(probe.info.has_value());
  EXPECT_FALSE(probe.reason.empty());
}

TEST(DeviceInfo, VersionsWithoutAGpu) {
  EXPECT_NE(cuda_runtime_build_version().find('.'), std::string::npos);
  EXPECT_NE(cublas_version(), "unknown");
}

TEST(BuildInfo, HasShaAndArchitectures) {
  const BuildInfo info = build_info();
  EXPECT_FALSE(info.version.empty());
  EXPECT_TRUE(info.git_sha == "unknown" || info.git_sha.size() == 40) << info.git_sha;
  EXPECT_FALSE(info.cuda_architectures.empty());
}

}  // namespace
}  // namespace seqbench
