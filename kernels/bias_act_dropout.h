// bias_act_dropout kernels (to be filled in).
#pragma once
