// softmax kernels (to be filled in).
#pragma once
