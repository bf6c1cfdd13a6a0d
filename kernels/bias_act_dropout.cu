#include "kernels/bias_act_dropout.h"
