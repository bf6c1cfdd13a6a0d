// layers/: the public header of the folder. Transformer layers (to come) and what they are built
// on here: the layer configuration and model presets, the device-allocation interface that counts
// every allocation, the dangling-tensor memory planner and manager (LightSeq2 §IV-D), and the dry
// runs that describe each layer's temporaries to the planner.
#pragma once

#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/gemm.h"
#include "layers/layer_temporaries.h"
#include "layers/memory_planner.h"
