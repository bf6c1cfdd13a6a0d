// The `device` suite: the two ceilings every other number is a percentage of, measured on the
// device at hand: device-to-device copy bandwidth (bytes read + written) and the bf16 GEMM rate.
#pragma once

#include "suites/experiment.h"
#include "suites/gpu_timer.h"

namespace seqbench {

SuiteSpec device_suite(const SuiteOptions& options);

// The copy bandwidth that reports carry as meta.device.copy_gbps: the median of a
// cudaMemcpyAsync of `bytes` (1 GiB by default), counting bytes read plus bytes written.
double measure_copy_gbps(GpuTimer& timer, std::size_t bytes = std::size_t{1} << 30);

}  // namespace seqbench
