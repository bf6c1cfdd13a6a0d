// bias_dropout_residual kernels against the reference (to be filled in).
#include <gtest/gtest.h>
