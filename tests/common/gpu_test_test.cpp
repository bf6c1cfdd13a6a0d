// SEQBENCH_REQUIRE_GPU(): a skip without a device, but a failure where SEQBENCH_EXPECT_GPU says
// a device must be there (tools/gpu.sh on the GPU machine).
#include "tests/common/gpu_test.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace seqbench::testing {
namespace {

// Sets SEQBENCH_EXPECT_GPU for one scope and restores what was there.
class ExpectGpuEnv {
 public:
  explicit ExpectGpuEnv(const char* value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    if (value) {
      setenv(kName, value, 1);
    } else {
      unsetenv(kName);
    }
  }
  ~ExpectGpuEnv() {
    if (old_) {
      setenv(kName, old_->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }
  ExpectGpuEnv(const ExpectGpuEnv&) = delete;
  ExpectGpuEnv& operator=(const ExpectGpuEnv&) = delete;

 private:
  static constexpr const char* kName = "SEQBENCH_EXPECT_GPU";
  std::optional<std::string> old_;
};

TEST(GpuTestHelper, ExpectedOnlyForANonEmptyNonZeroValue) {
  {
    ExpectGpuEnv env(nullptr);
    EXPECT_FALSE(gpu_expected());
  }
  {
    ExpectGpuEnv env("");
    EXPECT_FALSE(gpu_expected());
  }
  {
    ExpectGpuEnv env("0");
    EXPECT_FALSE(gpu_expected());
  }
  {
    ExpectGpuEnv env("1");
    EXPECT_TRUE(gpu_expected());
  }
}

void require_gpu_body() {
  SEQBENCH_REQUIRE_GPU();
}

TEST(GpuTestHelper, AbsentButExpectedGpuFailsInsteadOfSkipping) {
  if (gpu_absence_reason().empty()) GTEST_SKIP() << "a GPU is present: nothing to fail";
  ExpectGpuEnv env("1");
  EXPECT_FATAL_FAILURE(require_gpu_body(), "SEQBENCH_EXPECT_GPU is set but there is no usable GPU");
}

}  // namespace
}  // namespace seqbench::testing
