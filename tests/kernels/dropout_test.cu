// dropout kernels against the reference (to be filled in).
#include <gtest/gtest.h>
