// kernels/kernels.h is the folder's public header: it must compile in a plain C++ translation unit
// (g++, no nvcc), since host code such as layers/ and the suites include the launchers from .cpp
// files. Each family's launchers are then visible through it.
#include <gtest/gtest.h>

#include <type_traits>

#include "kernels/kernels.h"

namespace seqbench::kernels {
namespace {

TEST(KernelsPublicHeader, DeclaresEveryFamilysLaunchers) {
  EXPECT_TRUE((std::is_function_v<decltype(launch_copy)>));
  EXPECT_TRUE((std::is_function_v<decltype(launch_residual_add<float>)>));
  EXPECT_TRUE((std::is_function_v<decltype(launch_merge_heads<__nv_bfloat16>)>));
}

}  // namespace
}  // namespace seqbench::kernels
