#include "core/error.h"

#include <gtest/gtest.h>

namespace seqbench {
namespace {

TEST(Error, MessageIsOneLineWithShortFileAndLine) {
  const int line = __LINE__ + 2;
  try {
    SEQBENCH_REQUIRE(1 + 1 == 3, "rows " << 600 << " > limit " << 512);
    FAIL() << "SEQBENCH_REQUIRE did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "core/error_test.cpp:" + std::to_string(line) + ": rows 600 > limit 512");
    EXPECT_EQ(e.message(), "rows 600 > limit 512");
    EXPECT_EQ(e.file(), "core/error_test.cpp");
    EXPECT_EQ(e.line(), line);
  }
}

TEST(Error, RequireDoesNotThrowWhenTrue) {
  EXPECT_NO_THROW(SEQBENCH_REQUIRE(true, "never"));
}

TEST(Error, ShortSourcePath) {
  EXPECT_EQ(short_source_path("/a/b/kernels/layernorm.cu"), "kernels/layernorm.cu");
  EXPECT_EQ(short_source_path("layernorm.cu"), "layernorm.cu");
  EXPECT_EQ(short_source_path("/x.cu"), "/x.cu");
}

}  // namespace
}  // namespace seqbench
