#include "kernels/softmax.h"
