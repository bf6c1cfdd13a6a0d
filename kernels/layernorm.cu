#include "kernels/layernorm.h"
