// trainer/: the public header of the folder. The mixed-precision trainer of LightSeq2 (Sec. IV-C):
// one workspace for all parameters and one for all gradients (workspace.h, tensor_view.h), the
// fused whole-workspace optimizer update with on-the-fly conversion, unscaling, inf/NaN skipping
// and clipping (update_rule.h, fused_optimizer.h, optimizer.h), three precision modes, the
// device-side dynamic loss scaler (loss_scaler.h), checkpoints of the optimizer state
// (optimizer_state.h), the Fairseq-style per-tensor and apex-style multi-tensor baselines
// (per_tensor_baseline.h, multi_tensor_apply.h), the host emulation of the update
// (host_emulation.h) and the precision drift study (drift_study.h). See trainer/NOTES.md.
#pragma once

#include "trainer/convert.h"
#include "trainer/drift_study.h"
#include "trainer/fused_optimizer.h"
#include "trainer/host_emulation.h"
#include "trainer/loss_scaler.h"
#include "trainer/multi_tensor_apply.h"
#include "trainer/optimizer.h"
#include "trainer/optimizer_state.h"
#include "trainer/per_tensor_baseline.h"
#include "trainer/tensor_view.h"
#include "trainer/update_rule.h"
#include "trainer/workspace.h"
