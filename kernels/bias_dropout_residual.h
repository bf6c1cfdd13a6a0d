// bias_dropout_residual kernels (to be filled in).
#pragma once
