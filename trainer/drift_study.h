// The accuracy cost of each precision mode: training a small least-squares problem for many
// steps with the fused optimizer and measuring how far it ends from the same training in fp64
// (reference/optimizers.h). The steps run either in the host emulation (update_rule.h: the
// kernels' own code, on the CPU) or in the fused kernels on the current device (FusedOptimizer
// over a one-tensor Workspace); drift_device_checks holds the two to bitwise equality, so the
// CPU's numbers are the device's.
//
// Problem: minimize L(w) = |X w - y|^2 / (2 m), X [m x n] and w* N(0, 1), y = X w*, starting from
// w0 ~ N(0, 1/4) rounded to the parameter dtype (the fp64 run starts from the same rounded w0, so
// only the training differs). Each step computes the gradient in double from the parameters as
// stored (T), multiplies it by the loss scale and rounds it to T, as a mixed-precision backward
// would hand it to the optimizer; the fp64 run uses the exact gradient of its own parameters.
// All random numbers come from Philox, so the study gives the same numbers on every machine.
#pragma once

#include <cstdint>
#include <vector>

#include "core/check_result.h"
#include "core/dtype.h"
#include "trainer/update_rule.h"

namespace seqbench::trainer {

struct DriftStudyOptions {
  int params = 2048;  // n
  int samples = 256;  // m
  int steps = 1000;
  double lr = 1e-3;
  float loss_scale = 1.0f;  // static: the gradients are representable without scaling here
  std::uint64_t seed = 20241122;
  OptimizerConfig config{};  // Adam with PyTorch's defaults
};

// Where the optimizer steps of a drift run execute.
enum class DriftBackend {
  host_emulation,  // emulate_step (host_emulation.h) on the CPU
  device,          // FusedOptimizer::step on the current device, the default stream
};

const char* drift_backend_name(DriftBackend backend);

struct DriftResult {
  DType dtype = DType::f32;
  PrecisionMode mode = PrecisionMode::no_master;
  DriftBackend backend = DriftBackend::host_emulation;
  int steps = 0;
  std::vector<float> params;  // the final parameters as stored (T), widened exactly to float
  // |w - w_ref| / |w_ref - w0|: the distance from the fp64 trajectory's end point, as a fraction
  // of how far the fp64 trajectory moved. w is the parameters as stored (T).
  double param_drift = 0.0;
  double max_abs_drift = 0.0;   // max_i |w_i - w_ref_i|
  double loss = 0.0;            // L(w) at the end
  double reference_loss = 0.0;  // L(w_ref) at the end
  double initial_loss = 0.0;    // L(w0)
};

// Throws seqbench::Error on options below 1 or out of range (naming them), stochastic rounding
// with a dtype other than bf16, a step that overflows, or (device) a CUDA error.
DriftResult run_drift_case(const DriftStudyOptions& options, DType dtype, PrecisionMode mode,
                           DriftBackend backend = DriftBackend::host_emulation);

// f32/no_master, f16/{no_master, master_fp32}, bf16/{no_master, master_fp32, stochastic_rounding}.
std::vector<DriftResult> run_drift_study(const DriftStudyOptions& options,
                                         DriftBackend backend = DriftBackend::host_emulation);

// The study's findings as checks, one per case of run_drift_study (named
// "trainer/drift/<dtype>/<mode>", max_abs_err the max abs drift, the detail every number of the
// case, and its values drift, max_abs_drift, loss, fp64_loss and start_loss): the ordering trainer/NOTES.md
// reports, with margins of 3x or more below what was measured at the default options, so that a change of an
// update rule that costs accuracy fails a check, not a reseed. max_rel_err <= tolerance is the drift bound:
// the case's own drift, or for the worse mode of a pair the ratio of the better mode's drift to its own:
//   f32 no_master            drift < 1e-5
//   f16 master_fp32          drift < 1e-3
//   f16 no_master            f16 master_fp32's drift / this drift < 1/50  (what the master saves)
//   bf16 master_fp32         drift < 0.01, loss < 1.01 x fp64's
//   bf16 stochastic_rounding bf16 master_fp32's drift / this drift < 1/10, loss < 1.1 x fp64's
//   bf16 no_master           stochastic rounding's drift / this drift < 1/5, loss > 50 x fp64's
//                            (the stall)
// Throws seqbench::Error when `results` lacks one of the six cases.
std::vector<CheckResult> drift_study_checks(const std::vector<DriftResult>& results,
                                            const DriftStudyOptions& options);

// The device trajectory against the host emulation's, one check per case of `device` (named
// "trainer/drift/<dtype>/<mode>/device"): passed when the final parameters are bitwise equal
// (the GPU tests' promise for one step, here over the whole run). max_abs_err is the largest
// |w_device - w_host|, max_rel_err the fraction of parameters that differ, tolerance 0; the detail
// and the values (drift, loss, differing_params) carry the device run's drift and loss. The study runs
// without clipping, where the device's order of summing the squared gradients (the one legitimate difference,
// host_emulation.h) decides nothing. Throws seqbench::Error when `host` lacks a case of `device`, or a case's
// backends are not host_emulation and device.
std::vector<CheckResult> drift_device_checks(const std::vector<DriftResult>& host,
                                             const std::vector<DriftResult>& device);

}  // namespace seqbench::trainer
