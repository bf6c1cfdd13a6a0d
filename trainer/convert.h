// Whole-buffer dtype conversion with optional unscaling, for the AMP bookkeeping around the
// optimizer: the fp32 master's initialization from the parameters, and the per-tensor baseline's
// gradient copy (T -> fp32, unscaled) and parameter copy-back (fp32 -> T).
//
// launch_convert(dst, dst_dtype, src, src_dtype, count, control, scaling, stream)
//   What: dst[i] = Dst(float(src[i]) * s) for i < count, rounding to nearest even, with
//     scaling none:             s = 1, control ignored (may be null)
//     scaling skip_on_overflow: s = 1, and nothing is written when control->found_inf
//     scaling unscale:          s = control->grad_multiplier (1/loss scale times the clip
//                               coefficient), and nothing is written when control->found_inf
//   `control` lives in device memory (written by the optimizer's prepare kernel), so skipping
//   needs no host synchronization.
//   Thread mapping: grid-stride loop; each thread converts one vector of 16 / max(sizeof(Src),
//   sizeof(Dst)) elements per iteration (Packed loads and stores) when both pointers are 16-byte
//   aligned, then the tail (or everything, when unaligned) one element per thread.
//   Limits: any count (0 returns at once); dst and src must not overlap (checked); both non-null
//   when count > 0; control non-null unless scaling is none.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"
#include "trainer/update_rule.h"

namespace seqbench::trainer {

enum class ConvertScaling { none, skip_on_overflow, unscale };

void launch_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count,
                    const StepControl* control, ConvertScaling scaling, cudaStream_t stream);

}  // namespace seqbench::trainer
