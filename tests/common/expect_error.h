// Helpers for tests that expect a seqbench::Error: the CPU validation tests of kernels/,
// reference/ and trainer/ check the message, so that an error from elsewhere (e.g. CUDA itself
// on a machine without a GPU) cannot pass for the one the test expects.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace seqbench::testing {

// Runs `fn`, expects a seqbench::Error whose message contains `needle`.
template <class Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected seqbench::Error containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Runs `fn`, expects a seqbench::Error whose message contains every one of `needles`.
template <class Fn>
void expect_error_all(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected seqbench::Error containing \"" << needles.front() << "\"";
  } catch (const Error& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "missing \"" << needle << "\" in " << e.what();
  }
}

// The what() of the seqbench::Error that `fn` throws, or `if_none` when it throws none.
template <class Fn>
std::string error_of(Fn&& fn, const std::string& if_none = "") {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return if_none;
}

}  // namespace seqbench::testing
