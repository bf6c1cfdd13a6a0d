#include "kernels/dropout.h"
