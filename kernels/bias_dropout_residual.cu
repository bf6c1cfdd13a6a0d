#include "kernels/bias_dropout_residual.h"
