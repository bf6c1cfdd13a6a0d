// Scaffold: the qkv_reshape kernel family (issue #3) is being written on its own branch.
#include "kernels/qkv_reshape.h"
