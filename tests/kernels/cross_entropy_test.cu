// Scaffold: the cross_entropy GPU tests (issue #3) are being written on their own branch.
#include <gtest/gtest.h>
