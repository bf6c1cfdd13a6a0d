// The fused optimizer on the GPU:
//  - random workspaces of many odd-sized tensors, every dtype x optimizer x precision mode, with
//    and without clipping and loss scaling: the device result equals the host emulation (the same
//    update_element code) BITWISE, and the fp64 reference within the derived tolerance
//    (tests/trainer/optimizer_check.h); the decision (norm, clip, coefficients) is checked too;
//  - raw buffers of any count and alignment, with guard zones that must stay untouched;
//  - a step with an inf/NaN gradient leaves everything bitwise unchanged, sets the flag, and the
//    loss scaler backs off on the device;
//  - two runs are bitwise identical (clipping and stochastic rounding included).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

#include "core/device_buffer.h"
#include "tests/common/gpu_test.h"
#include "tests/trainer/gpu_helpers.h"
#include "tests/trainer/optimizer_check.h"
#include "trainer/host_emulation.h"
#include "trainer/optimizer.h"

namespace seqbench::trainer {
namespace {

using testing::as_double;
using testing::bitwise_difference;
using testing::download;
using testing::upload;

struct GpuCase {
  const char* name;
  OptimizerConfig config;
  double max_grad_norm;  // 0: off; 0.5: active on these gradients; 1e6: on but inactive
};

std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> cases;
  OptimizerConfig adam;
  cases.push_back({"adam", adam, 0.0});
  OptimizerConfig adam_l2 = adam;
  adam_l2.weight_decay = 0.1;
  adam_l2.eps = 1e-3;
  cases.push_back({"adam_l2_eps_clip", adam_l2, 0.5});
  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::adamw;
  adamw.beta1 = 0.8;
  adamw.beta2 = 0.95;
  adamw.weight_decay = 0.1;
  cases.push_back({"adamw_clip_inactive", adamw, 1e6});
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.weight_decay = 0.01;
  cases.push_back({"sgd", sgd, 0.0});
  OptimizerConfig momentum = sgd;
  momentum.momentum = 0.9;
  momentum.dampening = 0.2;
  cases.push_back({"sgd_momentum_dampening_clip", momentum, 0.5});
  OptimizerConfig nesterov = sgd;
  nesterov.momentum = 0.9;
  nesterov.nesterov = true;
  cases.push_back({"sgd_nesterov", nesterov, 0.0});
  return cases;
}

std::vector<PrecisionMode> modes_for(DType dtype) {
  if (dtype == DType::bf16)
    return {PrecisionMode::no_master, PrecisionMode::master_fp32, PrecisionMode::stochastic_rounding};
  return {PrecisionMode::no_master, PrecisionMode::master_fp32};
}

// fp16 gradients are stored scaled, as AMP does; bf16/fp32 need no scaling but must still divide
// by whatever scale is set.
float loss_scale_for(DType dtype) {
  return dtype == DType::f16 ? 4096.0f : dtype == DType::f32 ? 256.0f : 1.0f;
}

// Relative error bound of the device's sum of squares (see launch_grad_stats): each square carries
// the unscale and square roundings (2u); then every addition on the longest path adds u: the
// per-thread run (at most all of the thread's vectors' elements, assuming only >= 1 block per SM),
// the 8 levels of the 256-thread block tree, the prepare kernel's per-thread run over the partials
// (<= 4) and its 8 tree levels.
double sum_squares_relative_error(std::size_t count, DType dtype) {
  int device = 0, sms = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t v = 16 / dtype_size(dtype);
  const std::size_t items = count / v + count % v;
  const std::size_t blocks = std::max<std::size_t>(
      1, std::min<std::size_t>({1024, static_cast<std::size_t>(sms), (items + 255) / 256}));
  const std::size_t per_thread = (items + blocks * 256 - 1) / (blocks * 256);
  const double depth = static_cast<double>(per_thread * v) + 8 + 4 + 8 + 2;
  return depth * std::ldexp(1.0, -24);
}

template <class T>
void check_random_workspace(const GpuCase& c, PrecisionMode mode, std::uint64_t seed) {
  const DType dtype = DTypeTraits<T>::dtype;
  std::ostringstream trace;
  trace << c.name << "/" << dtype_name(dtype) << "/" << precision_mode_name(mode) << " seed " << seed;
  SCOPED_TRACE(trace.str());
  std::mt19937_64 rng(seed);
  const WorkspaceLayout layout = testing::random_layout(rng, seed % 4 == 0);
  const std::size_t n = layout.total_elements();
  const bool master_mode = mode == PrecisionMode::master_fp32;
  Workspace ws(layout, dtype, master_mode);
  std::vector<T> params = testing::random_in_tensors<T>(layout, rng, 1.0f);
  upload(ws.params(), params);
  std::vector<float> master;
  if (master_mode) {
    ws.copy_params_to_master(nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    master = download<float>(ws.master(), n);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(master[i], to_float<T>(params[i])) << "master init at " << i;
  }
  FusedOptimizer opt(ws, c.config, mode, seed);
  const float loss_scale = loss_scale_for(dtype);
  DeviceBuffer<float> scale(std::vector<float>{loss_scale});
  std::vector<float> s0(uses_state0(c.config) ? n : 0, 0.0f), s1(uses_state1(c.config) ? n : 0, 0.0f);
  const double lr = 1e-2;

  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<T> grads = testing::random_in_tensors<T>(layout, rng, 0.02f * loss_scale, 0.05);
    upload(ws.grads(), grads);
    // In master mode the parameters are outputs only: poison them so an unwritten one shows.
    if (master_mode) SEQBENCH_CUDA_CHECK(cudaMemset(ws.params(), 0xFF, layout.bytes(dtype)));
    const std::vector<double> p_before = master_mode ? as_double(master) : as_double(params);
    const std::vector<double> s0_before = s0.empty() ? std::vector<double>(n, 0.0) : as_double(s0);
    const std::vector<double> s1_before = s1.empty() ? std::vector<double>(n, 0.0) : as_double(s1);

    opt.step(ws, StepOptions{lr, c.max_grad_norm}, scale.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());

    // The decision.
    const StepControl control = opt.read_control();
    ASSERT_EQ(control.found_inf, 0);
    ASSERT_EQ(control.step, step + 1);
    ASSERT_EQ(opt.read_step(), step + 1);
    const StepCoefficients want_c = make_step_coefficients(c.config, lr, step + 1);
    EXPECT_EQ(std::memcmp(&control.coefficients, &want_c, sizeof want_c), 0)
        << "coefficients differ from the host's";
    EXPECT_EQ(control.inv_scale, inverse_loss_scale(loss_scale));
    double sum = 0.0;
    for (const T g : grads) {
      const double x = static_cast<double>(to_float<T>(g)) / loss_scale;
      sum += x * x;
    }
    const double want_norm = std::sqrt(sum);
    const double norm_tol = (0.5 * sum_squares_relative_error(n, dtype) + std::ldexp(1.0, -24)) * want_norm;
    EXPECT_NEAR(control.grad_norm, want_norm, norm_tol);
    EXPECT_EQ(control.clip, clip_coefficient(control.grad_norm, c.max_grad_norm));
    EXPECT_EQ(control.grad_multiplier, control.inv_scale * control.clip);
    if (c.max_grad_norm == 0.5) {
      EXPECT_LT(control.clip, 1.0f) << "the clipping case must actually clip";
    }

    // Bitwise against the host emulation of the same step.
    HostUpdateBuffers<T> host{params.data(),
                              grads.data(),
                              master_mode ? master.data() : nullptr,
                              s0.empty() ? nullptr : s0.data(),
                              s1.empty() ? nullptr : s1.data(),
                              n,
                              0};
    emulate_update(host, c.config.kind, mode, control, seed);
    const auto got_params = download<T>(ws.params(), n);
    EXPECT_EQ(bitwise_difference("params", got_params, params), "");
    if (master_mode) {
      EXPECT_EQ(bitwise_difference("master", download<float>(ws.master(), n), master), "");
    }
    if (!s0.empty()) {
      EXPECT_EQ(bitwise_difference("state0", download<float>(opt.state0(), n), s0), "");
    }
    if (!s1.empty()) {
      EXPECT_EQ(bitwise_difference("state1", download<float>(opt.state1(), n), s1), "");
    }

    // Within rounding of the fp64 reference, from the same pre-step state.
    const testing::ReferenceStep want =
        testing::reference_step(c.config, mode, dtype, lr, step, p_before, as_double(grads),
                                control.grad_multiplier, s0_before, s1_before);
    EXPECT_EQ(testing::first_violation("params vs fp64", as_double(got_params), want.p, want.tol_p), "");
    if (master_mode) {
      const testing::ReferenceStep want_master =
          testing::reference_step(c.config, mode, dtype, lr, step, p_before, as_double(grads),
                                  control.grad_multiplier, s0_before, s1_before, false);
      EXPECT_EQ(testing::first_violation("master vs fp64", as_double(download<float>(ws.master(), n)),
                                         want_master.p, want_master.tol_p),
                "");
    }
    if (!s0.empty()) {
      EXPECT_EQ(testing::first_violation("state0 vs fp64", as_double(download<float>(opt.state0(), n)),
                                         want.s0, want.tol_s0),
                "");
    }
    if (!s1.empty()) {
      EXPECT_EQ(testing::first_violation("state1 vs fp64", as_double(download<float>(opt.state1(), n)),
                                         want.s1, want.tol_s1),
                "");
    }
    // Padding stays zero (a nonzero there would mean an index error somewhere).
    std::size_t end = 0;
    for (const TensorSlot& slot : layout.tensors()) {
      for (std::size_t i = end; i < slot.offset; ++i)
        ASSERT_EQ(to_float<T>(got_params[i]), 0.0f) << "padding " << i;
      end = slot.offset + slot.count;
    }
    for (std::size_t i = end; i < n; ++i) ASSERT_EQ(to_float<T>(got_params[i]), 0.0f) << "padding " << i;
    // Continue from the device's state (equal to the host's when the test passes).
    params = got_params;
    if (master_mode) master = download<float>(ws.master(), n);
    if (!s0.empty()) s0 = download<float>(opt.state0(), n);
    if (!s1.empty()) s1 = download<float>(opt.state1(), n);
  }
}

template <class T>
void check_all_random_workspaces(std::uint64_t seed) {
  for (const GpuCase& c : gpu_cases())
    for (const PrecisionMode mode : modes_for(DTypeTraits<T>::dtype))
      check_random_workspace<T>(c, mode, seed++);
}

TEST(FusedOptimizerGpu, RandomWorkspacesF32) {
  SEQBENCH_REQUIRE_GPU();
  check_all_random_workspaces<float>(1000);
}
TEST(FusedOptimizerGpu, RandomWorkspacesF16) {
  SEQBENCH_REQUIRE_GPU();
  check_all_random_workspaces<__half>(2000);
}
TEST(FusedOptimizerGpu, RandomWorkspacesBf16) {
  SEQBENCH_REQUIRE_GPU();
  check_all_random_workspaces<__nv_bfloat16>(3000);
}

// Raw buffers: any count, pointers 16-byte aligned or not (the scalar path), any index_base (the
// stochastic-rounding key), guard zones on both sides that must come back untouched.
template <class T>
void check_raw(std::size_t count, std::size_t offset, std::uint64_t index_base, const OptimizerConfig& config,
               PrecisionMode mode, std::uint64_t seed) {
  std::ostringstream trace;
  trace << dtype_name(DTypeTraits<T>::dtype) << "/" << optimizer_kind_name(config.kind) << "/"
        << precision_mode_name(mode) << " count " << count << " offset " << offset << " index_base "
        << index_base;
  SCOPED_TRACE(trace.str());
  constexpr std::size_t kGuard = 32;
  const std::size_t total = count + offset + 2 * kGuard;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<T> params(total), grads(total);
  std::vector<float> master(total), s0(total), s1(total);
  for (std::size_t i = 0; i < total; ++i) {
    params[i] = from_float<T>(normal(rng));
    grads[i] = from_float<T>(normal(rng) * 0.1f);
    master[i] = normal(rng);
    s0[i] = normal(rng) * 0.01f;
    s1[i] = std::abs(normal(rng)) * 1e-4f;
  }
  DeviceBuffer<T> d_params(params), d_grads(grads);
  DeviceBuffer<float> d_master(master), d_s0(s0), d_s1(s1);
  DeviceBuffer<GradStatsScratch> stats(1);
  DeviceBuffer<StepControl> control(1);
  DeviceBuffer<std::int64_t> step(std::vector<std::int64_t>{7});
  const std::size_t at = kGuard + offset;
  UpdateBuffers b{DTypeTraits<T>::dtype,
                  d_params.data() + at,
                  d_grads.data() + at,
                  d_master.data() + at,
                  d_s0.data() + at,
                  d_s1.data() + at,
                  count,
                  index_base};
  launch_fused_optimizer_step(b, config, mode, StepOptions{1e-2, 0.0}, seed, nullptr,
                              OptimizerScratch{stats.data(), control.data(), step.data()}, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const StepControl decided = control.copy_to_host()[0];
  ASSERT_EQ(decided.found_inf, 0);
  ASSERT_EQ(decided.step, 8);
  HostUpdateBuffers<T> host{params.data() + at, grads.data() + at, master.data() + at,
                            s0.data() + at,     s1.data() + at,    count,
                            index_base};
  emulate_update(host, config.kind, mode, decided, seed);
  EXPECT_EQ(bitwise_difference("params", d_params.copy_to_host(), params), "");
  EXPECT_EQ(bitwise_difference("master", d_master.copy_to_host(), master), "");
  EXPECT_EQ(bitwise_difference("state0", d_s0.copy_to_host(), s0), "");
  EXPECT_EQ(bitwise_difference("state1", d_s1.copy_to_host(), s1), "");
}

TEST(FusedOptimizerGpu, AnyCountAnyAlignmentTouchesExactlyItsElements) {
  SEQBENCH_REQUIRE_GPU();
  std::vector<std::size_t> counts = testing::odd_sizes();
  counts.push_back(65537);
  counts.push_back((1u << 20) + 3);
  std::mt19937_64 rng(42);
  for (int i = 0; i < 40; ++i) counts.push_back(1 + rng() % 300000);
  OptimizerConfig adam, adamw, momentum;
  adamw.kind = OptimizerKind::adamw;
  adamw.weight_decay = 0.05;
  momentum.kind = OptimizerKind::sgd;
  momentum.momentum = 0.9;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    const std::size_t count = counts[k];
    const std::size_t offset = k % 3 == 1 ? 1 : k % 3 == 2 ? 3 : 0;  // 0: vector path
    const std::uint64_t index_base = k % 4 == 3 ? 5 : 8 * k;
    check_raw<float>(count, offset, index_base, adam, PrecisionMode::no_master, k);
    check_raw<__half>(count, offset, index_base, momentum, PrecisionMode::master_fp32, k);
    check_raw<__nv_bfloat16>(count, offset, index_base, adamw, PrecisionMode::stochastic_rounding, k);
  }
}

// Stochastic rounding on the device: unbiased across steps (the key includes t), and different
// from round-to-nearest.
TEST(FusedOptimizerGpu, StochasticRoundingIsKeyedByStepAndIndex) {
  SEQBENCH_REQUIRE_GPU();
  const std::size_t n = 1 << 16;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  // p = 1, g = 1, lr = 2^-10: the exact result 1 - 2^-10 lies a quarter of a bf16 ulp (2^-8 below
  // 1) under 1, so stochastic rounding gives 1 - 2^-8 with probability 1/4 and 1 otherwise.
  std::vector<__nv_bfloat16> ones(n, from_float<__nv_bfloat16>(1.0f));
  DeviceBuffer<__nv_bfloat16> params(ones), grads(ones);
  DeviceBuffer<GradStatsScratch> stats(1);
  DeviceBuffer<StepControl> control(1);
  DeviceBuffer<std::int64_t> step(std::vector<std::int64_t>{0});
  UpdateBuffers b{DType::bf16, params.data(), grads.data(), nullptr, nullptr, nullptr, n, 0};
  std::vector<__nv_bfloat16> previous;
  for (int s = 0; s < 2; ++s) {
    params.copy_from_host(ones);
    launch_fused_optimizer_step(b, sgd, PrecisionMode::stochastic_rounding,
                                StepOptions{std::ldexp(1.0, -10), 0.0}, 123, nullptr,
                                OptimizerScratch{stats.data(), control.data(), step.data()}, nullptr);
    const auto got = params.copy_to_host();
    std::size_t down = 0;
    for (const auto x : got) {
      const float v = to_float(x);
      ASSERT_TRUE(v == 1.0f || v == 1.0f - std::ldexp(1.0f, -8)) << v;
      down += v != 1.0f;
    }
    // A quarter of the elements round down (E[result] = 1 - 2^-10 exactly); 5 standard errors of
    // a Bernoulli(1/4) mean. Round-to-nearest would round none down.
    EXPECT_NEAR(static_cast<double>(down) / n, 0.25, 5 * std::sqrt(0.25 * 0.75 / n));
    if (s == 1) {
      EXPECT_NE(bitwise_difference("params", got, previous), "") << "step 2 drew the same bits as step 1";
    }
    previous = got;
  }
}

// An inf or NaN gradient anywhere (first, last, middle element) skips the step bitwise, on the
// device, and the scaler backs off there; then training resumes and the scaler grows again.
template <class T>
void check_overflow(const OptimizerConfig& config, PrecisionMode mode, float poison, int where,
                    std::uint64_t seed) {
  std::ostringstream trace;
  trace << dtype_name(DTypeTraits<T>::dtype) << "/" << optimizer_kind_name(config.kind) << "/"
        << precision_mode_name(mode) << " poison " << poison << " where " << where;
  SCOPED_TRACE(trace.str());
  std::mt19937_64 rng(seed);
  const WorkspaceLayout layout = testing::random_layout(rng);
  const std::size_t n = layout.total_elements();
  const bool master_mode = mode == PrecisionMode::master_fp32;
  Workspace ws(layout, DTypeTraits<T>::dtype, master_mode);
  upload(ws.params(), testing::random_in_tensors<T>(layout, rng, 1.0f));
  if (master_mode) ws.copy_params_to_master(nullptr);
  FusedOptimizer opt(ws, config, mode, seed);
  const LossScalerConfig scaler_config{1024.0f, 2.0f, 0.5f, 3};
  LossScaler scaler(scaler_config);
  LossScalerState want_scaler = initial_loss_scaler_state(scaler_config);
  auto good_step = [&] {
    upload(ws.grads(), testing::random_in_tensors<T>(layout, rng, 0.01f, 0.0));
    opt.step(ws, StepOptions{1e-2, 1.0}, scaler, nullptr);
    want_scaler = next_loss_scaler_state(want_scaler, false, scaler_config);
  };
  good_step();
  good_step();

  std::vector<T> grads = testing::random_in_tensors<T>(layout, rng, 0.01f, 0.0);
  std::size_t first = n, last = 0;
  for (const TensorSlot& slot : layout.tensors()) {
    if (slot.count == 0) continue;
    first = std::min(first, slot.offset);
    last = std::max(last, slot.offset + slot.count - 1);
  }
  const std::size_t index = where == 0 ? first : where == 1 ? last : first + (last - first) / 2;
  grads[index] = from_float<T>(poison);
  upload(ws.grads(), grads);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto params_before = download<T>(ws.params(), n);
  const auto master_before = master_mode ? download<float>(ws.master(), n) : std::vector<float>{};
  const auto s0_before = uses_state0(config) ? download<float>(opt.state0(), n) : std::vector<float>{};
  const auto s1_before = uses_state1(config) ? download<float>(opt.state1(), n) : std::vector<float>{};
  const std::int64_t step_before = opt.read_step();

  opt.step(ws, StepOptions{1e-2, 1.0}, scaler, nullptr);
  want_scaler = next_loss_scaler_state(want_scaler, true, scaler_config);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(opt.read_control().found_inf, 1);
  EXPECT_EQ(opt.read_step(), step_before);
  EXPECT_EQ(bitwise_difference("params", download<T>(ws.params(), n), params_before), "");
  if (master_mode) {
    EXPECT_EQ(bitwise_difference("master", download<float>(ws.master(), n), master_before), "");
  }
  if (uses_state0(config)) {
    EXPECT_EQ(bitwise_difference("state0", download<float>(opt.state0(), n), s0_before), "");
  }
  if (uses_state1(config)) {
    EXPECT_EQ(bitwise_difference("state1", download<float>(opt.state1(), n), s1_before), "");
  }
  LossScalerState got = scaler.state();
  EXPECT_EQ(got.scale, 512.0f);
  EXPECT_EQ(got.growth_tracker, 0);

  // Training resumes; three good steps grow the scale back (growth interval 3).
  for (int i = 0; i < 3; ++i) good_step();
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(opt.read_step(), step_before + 3);
  EXPECT_EQ(opt.read_control().found_inf, 0);
  got = scaler.state();
  EXPECT_EQ(got.scale, want_scaler.scale);
  EXPECT_EQ(got.scale, 1024.0f);
  EXPECT_EQ(got.growth_tracker, want_scaler.growth_tracker);
}

TEST(FusedOptimizerGpu, OverflowSkipsTheStepBitwiseAndTheScalerBacksOff) {
  SEQBENCH_REQUIRE_GPU();
  std::uint64_t seed = 77;
  for (const GpuCase& c : gpu_cases()) {
    for (const float poison : {INFINITY, -INFINITY, NAN}) {
      const int where = static_cast<int>(seed % 3);
      check_overflow<float>(c.config, PrecisionMode::no_master, poison, where, seed++);
      check_overflow<__half>(c.config, PrecisionMode::master_fp32, poison, where, seed++);
      check_overflow<__nv_bfloat16>(c.config, PrecisionMode::stochastic_rounding, poison, where, seed++);
      check_overflow<__nv_bfloat16>(c.config, PrecisionMode::no_master, poison, where, seed++);
    }
  }
}

// A finite fp16 gradient that becomes inf only after unscaling (a loss scale below 1) is an overflow too.
TEST(FusedOptimizerGpu, OverflowAfterUnscalingIsDetected) {
  SEQBENCH_REQUIRE_GPU();
  const WorkspaceLayout layout({{"w", 100}});
  Workspace ws(layout, DType::f16, false);
  std::vector<__half> grads(layout.total_elements(), from_float<__half>(0.0f));
  grads[99] = from_float<__half>(60000.0f);
  upload(ws.grads(), grads);
  FusedOptimizer opt(ws, OptimizerConfig{}, PrecisionMode::no_master);
  DeviceBuffer<float> scale(std::vector<float>{1e-36f});
  opt.step(ws, StepOptions{}, scale.data(), nullptr);
  EXPECT_EQ(opt.read_control().found_inf, 1);
  EXPECT_EQ(opt.read_step(), 0);
}

TEST(FusedOptimizerGpu, LossScalerTransitionsOnTheDeviceMatchTheHostMirror) {
  SEQBENCH_REQUIRE_GPU();
  const LossScalerConfig config{65536.0f, 2.0f, 0.5f, 3};
  LossScaler scaler(config);
  LossScalerState want = initial_loss_scaler_state(config);
  DeviceBuffer<int> flag(1);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    const int overflow = rng() % 5 == 0 ? 1 : 0;
    flag.copy_from_host({overflow});
    scaler.update(flag.data(), nullptr);
    want = next_loss_scaler_state(want, overflow != 0, config);
    const LossScalerState got = scaler.state();
    ASSERT_EQ(got.scale, want.scale) << "transition " << i;
    ASSERT_EQ(got.growth_tracker, want.growth_tracker) << "transition " << i;
  }
}

// Same inputs, same bits: twice the same training (clipping and stochastic rounding included).
TEST(FusedOptimizerGpu, TwoRunsAreBitwiseIdentical) {
  SEQBENCH_REQUIRE_GPU();
  auto run = [](std::vector<__nv_bfloat16>& params_out, StepControl& control_out) {
    std::mt19937_64 rng(9);
    const WorkspaceLayout layout = testing::random_layout(rng, true);
    Workspace ws(layout, DType::bf16, false);
    upload(ws.params(), testing::random_in_tensors<__nv_bfloat16>(layout, rng, 1.0f));
    OptimizerConfig config;
    config.kind = OptimizerKind::adamw;
    config.weight_decay = 0.01;
    FusedOptimizer opt(ws, config, PrecisionMode::stochastic_rounding, 31);
    for (int s = 0; s < 3; ++s) {
      upload(ws.grads(), testing::random_in_tensors<__nv_bfloat16>(layout, rng, 0.05f, 0.1));
      opt.step(ws, StepOptions{1e-3, 0.3}, nullptr, nullptr);
    }
    params_out = download<__nv_bfloat16>(ws.params(), ws.count());
    control_out = opt.read_control();
  };
  std::vector<__nv_bfloat16> a, b;
  StepControl ca, cb;
  run(a, ca);
  run(b, cb);
  EXPECT_EQ(bitwise_difference("params", a, b), "");
  EXPECT_EQ(std::memcmp(&ca, &cb, sizeof ca), 0) << "norms " << ca.grad_norm << " vs " << cb.grad_norm;
}

TEST(FusedOptimizerGpu, EmptyWorkspaceStillCountsSteps) {
  SEQBENCH_REQUIRE_GPU();
  Workspace ws(WorkspaceLayout({{"nothing", 0}}), DType::bf16, true);
  EXPECT_EQ(ws.count(), 0u);
  FusedOptimizer opt(ws, OptimizerConfig{}, PrecisionMode::master_fp32);
  opt.step(ws, StepOptions{}, nullptr, nullptr);
  EXPECT_EQ(opt.read_step(), 1);
  EXPECT_EQ(opt.read_control().found_inf, 0);
  EXPECT_EQ(opt.read_control().grad_norm, 0.0f);
}

TEST(FusedOptimizerGpu, ConfigurationMismatchesAreRejected) {
  SEQBENCH_REQUIRE_GPU();
  Workspace ws(WorkspaceLayout({{"w", 10}}), DType::f16, false);
  EXPECT_THROW(FusedOptimizer(ws, OptimizerConfig{}, PrecisionMode::stochastic_rounding), Error);
  EXPECT_THROW(FusedOptimizer(ws, OptimizerConfig{}, PrecisionMode::master_fp32), Error);
  Workspace other(WorkspaceLayout({{"w", 20}}), DType::f16, false);
  FusedOptimizer opt(ws, OptimizerConfig{}, PrecisionMode::no_master);
  EXPECT_THROW(opt.step(other, StepOptions{}, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace seqbench::trainer
