// Scaffold: the qkv_reshape CPU validation tests (issue #3) are being written on their own branch.
#include <gtest/gtest.h>
