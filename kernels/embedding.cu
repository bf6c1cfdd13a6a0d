// Scaffold: the embedding kernel family (issue #3) is being written on its own branch.
#include "kernels/embedding.h"
