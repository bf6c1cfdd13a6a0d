// core/: the public header of the folder. Errors, dtypes, device memory and streams, the Philox
// RNG, NVTX ranges, device and build info. Everything above core/ includes it or its parts.
#pragma once

#include "core/build_info.h"
#include "core/byte_range.h"
#include "core/check_result.h"
#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/device_info.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/philox.h"
#include "core/stream_fork.h"
