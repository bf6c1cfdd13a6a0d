// kernels/: the public header of the folder. One header per kernel family; each launcher
// validates its arguments and documents its thread mapping and tensor shapes.
#pragma once

#include "kernels/bias_act_dropout.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/copy.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/qkv_reshape.h"
#include "kernels/softmax.h"
