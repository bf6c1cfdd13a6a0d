// Operator-suite experiments and GPU checks for the bias + activation + dropout family
// (kernels/bias_act_dropout.h).
//
// Experiments: the FFN epilogue at Transformer shapes, rows = batch tokens {4096, 16384} x
// cols = {1024 (hidden), 4096 (FFN)}, fp32 and bf16, ReLU / GELU(erf) / GELU(tanh), forward and
// backward; baseline "unfused" (bias add, activation, uint8 mask, multiply; backward: multiply,
// activation backward, column sum), variant "fused", and for backward "fused_in_place" (dx == dy,
// as the layers' FFN backward runs it). Minimal bytes: forward x + bias read, y written; backward
// dy + x + bias read, dx + dbias written.
//
// Checks: fused and unfused, forward and backward (dx and dbias), against
// reference/bias_act_dropout.h on >= 50 shapes x 3 activations x 3 dtypes, outputs and workspace
// poisoned, guards after every output, bitwise repeatability of the fused kernels, and the
// in-place backward bitwise equal to the out-of-place one.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "kernels/bias_act_dropout.h"
#include "kernels/dropout.h"
#include "kernels/dropout_mask.h"
#include "reference/bias_act_dropout.h"
#include "reference/dropout.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using kernels::Activation;
using kernels::DropoutConfig;
using namespace check_util;

constexpr float kBenchP = 0.1f;
constexpr std::uint64_t kBenchSeed = 20240918;
constexpr std::uint64_t kBenchOffset = 5;
constexpr Activation kActivations[] = {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh};

ref::Activation to_ref(Activation act) {
  switch (act) {
    case Activation::relu:
      return ref::Activation::relu;
    case Activation::gelu_erf:
      return ref::Activation::gelu_erf;
    case Activation::gelu_tanh:
      break;
  }
  return ref::Activation::gelu_tanh;
}

// ---------------------------------------------------------------------------------------------
// Experiments.

template <class T>
struct BenchState {
  std::int64_t rows, cols;
  std::size_t n;
  DeviceBuffer<T> x, bias, out, z, tmp, dy, dbias;
  DeviceBuffer<T> in_place;  // backward: fused_in_place's dy, which each call turns into its dx
  DeviceBuffer<std::uint8_t> mask;
  DeviceBuffer<unsigned char> workspace;
  BenchState(std::int64_t r, std::int64_t c, bool backward)
      : rows(r),
        cols(c),
        n(static_cast<std::size_t>(r * c)),
        x(random_values<T>(n, kBenchSeed + 1, -2.0f, 2.0f)),
        bias(random_values<T>(static_cast<std::size_t>(c), kBenchSeed + 2, -1.0f, 1.0f)),
        out(n),
        z(n),
        tmp(n),
        dy(backward ? random_values<T>(n, kBenchSeed + 3, -1.0f, 1.0f) : std::vector<T>{}),
        dbias(static_cast<std::size_t>(c)),
        in_place(backward ? n : 0),
        mask(n),
        workspace(kernels::bias_act_dropout_bwd_workspace_bytes(r, c)) {
    if (backward && n > 0)
      SEQBENCH_CUDA_CHECK(cudaMemcpy(in_place.data(), dy.data(), n * sizeof(T), cudaMemcpyDeviceToDevice));
  }
};

template <class T>
ExperimentSpec bias_act_dropout_experiment(std::int64_t rows, std::int64_t cols, Activation act,
                                           bool backward) {
  const std::string dtype = DTypeTraits<T>::name;
  ExperimentSpec e;
  e.name = std::string(backward ? "bias_act_dropout_bwd/" : "bias_act_dropout_fwd/") + dtype + "/" +
           kernels::activation_name(act) + "/rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols);
  e.params = {{"rows", rows},
              {"cols", cols},
              {"elements", rows * cols},
              {"dtype", dtype},
              {"activation", kernels::activation_name(act)},
              {"p", std::round(kBenchP * 1e6) / 1e6},
              {"direction", backward ? "bwd" : "fwd"}};
  e.baseline = "unfused";
  const double s = sizeof(T), n = static_cast<double>(rows) * static_cast<double>(cols),
               c = static_cast<double>(cols);
  const double bytes = backward ? s * (3 * n + 2 * c) : s * (2 * n + c);
  // Backward also times fused_in_place (dx == dy), what the layers' FFN backward runs: the same
  // bytes; the in-place instance declares no pointer __restrict__. Its buffer starts as dy and
  // holds each call's dx afterwards (values drift across calls; the kernel's time does not depend
  // on them).
  e.variants = {{"unfused", bytes, 0}, {"fused", bytes, 0}};
  if (backward) e.variants.push_back({"fused_in_place", bytes, 0});
  e.dump_variant = "fused";
  e.prepare = [rows, cols, act, backward] {
    auto st = std::make_shared<BenchState<T>>(rows, cols, backward);
    const DropoutConfig config{kBenchP, kBenchSeed, kBenchOffset};
    PreparedExperiment p;
    if (!backward) {
      p.variants.push_back([st, act, config](cudaStream_t s) {
        kernels::launch_bias_add(st->z.data(), st->x.data(), st->bias.data(), st->rows, st->cols, s);
        kernels::launch_activation_fwd(st->tmp.data(), st->z.data(), st->rows, st->cols, act, s);
        kernels::launch_dropout_mask_u8(st->mask.data(), st->n, config, s);
        kernels::launch_dropout_apply_u8(st->out.data(), st->tmp.data(), st->mask.data(), st->n, config.p, s);
      });
      p.variants.push_back([st, act, config](cudaStream_t s) {
        kernels::launch_bias_act_dropout_fwd(st->out.data(), st->x.data(), st->bias.data(), st->rows,
                                             st->cols, act, config, s);
      });
    } else {
      // What the unfused forward saved: z = x + bias and the uint8 mask.
      kernels::launch_bias_add(st->z.data(), st->x.data(), st->bias.data(), rows, cols, nullptr);
      kernels::launch_dropout_mask_u8(st->mask.data(), st->n, config, nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      p.variants.push_back([st, act, config](cudaStream_t s) {
        kernels::launch_dropout_apply_u8(st->tmp.data(), st->dy.data(), st->mask.data(), st->n, config.p, s);
        kernels::launch_activation_bwd(st->out.data(), st->tmp.data(), st->z.data(), st->rows, st->cols, act,
                                       s);
        kernels::launch_column_sum(st->dbias.data(), st->out.data(), st->rows, st->cols, st->workspace.data(),
                                   st->workspace.size(), s);
      });
      p.variants.push_back([st, act, config](cudaStream_t s) {
        kernels::launch_bias_act_dropout_bwd(st->out.data(), st->dbias.data(), st->dy.data(), st->x.data(),
                                             st->bias.data(), st->rows, st->cols, act, config,
                                             st->workspace.data(), st->workspace.size(), s);
      });
      p.variants.push_back([st, act, config](cudaStream_t s) {
        kernels::launch_bias_act_dropout_bwd(st->in_place.data(), st->dbias.data(), st->in_place.data(),
                                             st->x.data(), st->bias.data(), st->rows, st->cols, act, config,
                                             st->workspace.data(), st->workspace.size(), s);
      });
    }
    // For `seqbench dump`: the inputs, the keep mask and what the fused variant wrote (suites/pytorch's
    // parity). The fused kernels save no mask: launch_dropout_mask_u8 redraws the same Philox stream
    // (config) into st->mask, bit for bit the fused kernels' mask (the GPU checks hold both to
    // make_dropout_mask); the backward's prepare() already did, for the unfused variant.
    p.dump = [st, backward, config] {
      if (!backward) {
        kernels::launch_dropout_mask_u8(st->mask.data(), st->n, config, nullptr);
        SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      }
      const std::vector<std::int64_t> matrix = {st->rows, st->cols}, columns = {st->cols};
      std::vector<DumpArray> a;
      if (backward) a.push_back(dump_array("dy", "input", st->dy, matrix));
      a.push_back(dump_array("x", "input", st->x, matrix));
      a.push_back(dump_array("bias", "input", st->bias, columns));
      a.push_back(dump_array("keep", "input", st->mask, matrix));
      if (!backward) {
        a.push_back(dump_array("y", "output", st->out, matrix));
      } else {
        a.push_back(dump_array("dx", "output", st->out, matrix));
        a.push_back(dump_array("dbias", "output", st->dbias, columns));
      }
      return a;
    };
    p.state = st;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Tolerances. Inputs are T values, exact in double; u = unit_roundoff(T), v = u_f32. The kernels
// compute in float and round once to T per output (fused), or once per stored intermediate
// (unfused: z, a, da, dz are T tensors).
//
// act(z) evaluated in float at the float z = fl(x + b) (one rounding, |Δz| <= v|z|):
//   ReLU: |Δ| <= v|z| (1-Lipschitz, exact otherwise).
//   GELU: |Δ| <= 16 v (1 + |z|). The float GELUs of kernels/gelu.h measure within 2.5 v (1 + |z|)
//     at an exact float z, with rcp.approx/ex2.approx anywhere within their documented errors
//     (tests/kernels/gelu_test.cpp holds them to 4 v (1 + |z|)); Δz adds at most 1.13 v|z|
//     through |act'| <= 1.13. About 4 v (1 + |z|) in all: the factor 16 is 4x slack, kept from
//     the library-function forms (erff/tanhf, tallied at about 7 v (1 + |z|)) they replaced.
// act'(z) likewise: ReLU exact (the sign of fl(x + b) is the sign of x + b); GELU
//   |Δ| <= 32 v (1 + |z|)²: the terms z σ(1 - σ) v'(z) and z φ(z) grow like z² in the argument
//   error; kernels/gelu.h measures within 7.5 v (1 + |z|)² (held to 10), Δz through |act''| <= 0.8
//   adds 0.8 v|z|: about 8.5 v (1 + |z|)², nearly 4x slack.
// The dropout factor 1/(1-p) carries 2 v (host float), each multiply v.
// Each rounding to T also carries an absolute η = underflow_error(T) (results among fp16's
// subnormals); all element bounds are multiplied by keep (dropped elements are exactly 0).
//   fused y      : |Δ| <= keep·[(u + 4v)|y| + s·E_act(z) + η]
//   fused dx     : |Δ| <= keep·[(u + 4v)|dx| + |g|·E_grad(z) + η],  g = dy·keep·s
//   fused dbias  : |Δ| <= u|dbias| + η + Σ_r keep·[4v|dx_r| + |g_r| E_grad(z_r)] + D v Σ_r |dx_r|
//                  (float sums of the unrounded float dx; D from bias_grad_sum_depth)
//   unfused z    : |Δ| <= (u + v)|z| + η
//   unfused y    : |Δ| <= keep·[(u + 4v)|y| + s·(L (u + v)|z| + E_act(z) + u|act(z)|) + η(1 + s(1 + L))]
//                  (z stored in T: |Δz| <= (u + v)|z| + η, through act's Lipschitz constant L =
//                  1 ReLU, 1.13 GELU; a stored in T: u|a| + η; y: u|y| + η)
//   unfused dx   : |Δ| <= keep·[(2u + 4v)|dx| + |g|·(C (u + v)|z| + E_grad(z)) + η(1 + L + C)]
//                  (da and dz stored in T; C = max|act''| = 0 ReLU, 0.8 GELU)
//   unfused dbias: |Δ| <= u|dbias| + η + Σ_r bound(dx_r) + D v Σ_r |dx_r|   (column sum of the T dz)
// A host emulation of these float/T roundings over 2.4M random (x, b, dy) per dtype and activation
// (p in {0, 0.1, 0.5, 0.999}) stayed within 0.43 (fp32), 0.999 (fp16), 0.996 (bf16) of its bound
// with the library-function GELUs: the u_T terms are tight, as they must be, and only the fp32
// GELU terms carry slack (~7-20x then; about 4x with kernels/gelu.h, by the figures above).

double act_eval_error(Activation act, double z) {
  const double v = unit_roundoff(DType::f32);
  return act == Activation::relu ? v * std::fabs(z) : 16.0 * v * (1.0 + std::fabs(z));
}

double act_grad_eval_error(Activation act, double z) {
  const double v = unit_roundoff(DType::f32);
  return act == Activation::relu ? 0.0 : 32.0 * v * (1.0 + std::fabs(z)) * (1.0 + std::fabs(z));
}

double act_lipschitz(Activation act) {
  return act == Activation::relu ? 1.0 : 1.13;
}

double act_curvature(Activation act) {
  return act == Activation::relu ? 0.0 : 0.8;
}

const char* kRule =
    "per element bounds derived in suites/operators/bias_act_dropout.cu: u_T per rounding to T, u_f32 per "
    "float op, eta_T (half T's smallest subnormal) per rounding to T, 16 u_f32 (1+|z|) for float GELU, "
    "32 u_f32 (1+|z|)^2 for its derivative, D u_f32 sum|dx| for the bias-gradient summation; dropped "
    "elements exactly 0";

// ---------------------------------------------------------------------------------------------
// Checks.

struct Tallies {
  Tally fwd, bwd_dx, bwd_dbias, repeat, in_place, unfused_z, unfused_fwd, unfused_dx, unfused_dbias;
  Tallies(const std::string& prefix, const std::string& suffix)
      : fwd(prefix + "fwd" + suffix, kRule),
        bwd_dx(prefix + "bwd_dx" + suffix, kRule),
        bwd_dbias(prefix + "bwd_dbias" + suffix, kRule),
        repeat(prefix + "determinism" + suffix,
               "bitwise: a second fused forward and backward on the same inputs (workspace re-poisoned) "
               "reproduce y, dx and dbias exactly"),
        in_place(prefix + "bwd_in_place" + suffix,
                 "bitwise: the fused backward with dx == dy (in place, as the layers run it) reproduces the "
                 "out-of-place dx and dbias exactly, writing nothing outside them"),
        unfused_z(prefix + "unfused_bias_add" + suffix, "per element |got-want| <= (u_T + u_f32)|x + b|"),
        unfused_fwd(prefix + "unfused_fwd" + suffix, kRule),
        unfused_dx(prefix + "unfused_bwd_dx" + suffix, kRule),
        unfused_dbias(prefix + "unfused_bwd_dbias" + suffix, kRule) {}
  std::vector<CheckResult> results() const {
    return {fwd.result(),         bwd_dx.result(),     bwd_dbias.result(),
            repeat.result(),      in_place.result(),   unfused_z.result(),
            unfused_fwd.result(), unfused_dx.result(), unfused_dbias.result()};
  }
};

template <class T>
void check_case(const MatrixCase& c, Activation act, Tallies& t) {
  const DType dtype = DTypeTraits<T>::dtype;
  const double u = unit_roundoff(dtype), v = unit_roundoff(DType::f32), eta = underflow_error(dtype);
  const std::string where = c.describe() + " act=" + kernels::activation_name(act);
  const std::size_t n = c.elements();
  const auto rows = static_cast<ref::Index>(c.rows), cols = static_cast<ref::Index>(c.cols);
  const DropoutConfig config{c.p, c.seed, c.offset};
  const double scale = ref::dropout_scale(c.p);

  const std::vector<T> x = random_values<T>(n, c.seed + 1, -3.0f, 3.0f);
  const std::vector<T> bias = random_values<T>(static_cast<std::size_t>(c.cols), c.seed + 2, -1.0f, 1.0f);
  const std::vector<T> dy = random_values<T>(n, c.seed + 3, -1.0f, 1.0f);
  const ref::Matrix xm = to_matrix(x, rows, cols), dym = to_matrix(dy, rows, cols);
  const ref::Vector bv = to_vector(bias);
  const ref::KeepMask keep = ref::make_dropout_mask(rows, cols, c.p, c.seed, c.offset);
  const ref::Matrix want_y = ref::bias_act_dropout_forward(xm, bv, keep, c.p, to_ref(act));
  const ref::BiasActDropoutGrads want = ref::bias_act_dropout_backward(dym, xm, bv, keep, c.p, to_ref(act));

  Guarded<T> x_d(n, c.off_in0), dy_d(n, c.off_in1), bias_d(static_cast<std::size_t>(c.cols), c.off_bias);
  x_d.upload(x);
  dy_d.upload(dy);
  bias_d.upload(bias);
  const std::size_t ws_bytes = kernels::bias_act_dropout_bwd_workspace_bytes(c.rows, c.cols);

  // Fused forward and backward, twice (the second on re-poisoned outputs and workspace).
  const FusedOutputs<T> fused =
      run_fused_twice<T>(c, ws_bytes, t, where, [&](T* y, T* dx, T* dbias, unsigned char* workspace) {
        kernels::launch_bias_act_dropout_fwd<T>(y, x_d.data(), bias_d.data(), c.rows, c.cols, act, config,
                                                nullptr);
        kernels::launch_bias_act_dropout_bwd<T>(dx, dbias, dy_d.data(), x_d.data(), bias_d.data(), c.rows,
                                                c.cols, act, config, workspace, ws_bytes, nullptr);
      });
  const std::vector<T>&y_first = fused.y, &dx_first = fused.dx, &dbias_first = fused.dbias;

  // In place: dy's own buffer (at dy's offset) becomes dx; dbias and the workspace are poisoned.
  {
    Guarded<T> d_in_place(n, c.off_in1), dbias_ip(static_cast<std::size_t>(c.cols), c.off_bias);
    d_in_place.upload(dy);
    DeviceBuffer<unsigned char> ws(ws_bytes);
    ws.fill_bytes(0xFF);
    kernels::launch_bias_act_dropout_bwd<T>(d_in_place.data(), dbias_ip.data(), d_in_place.data(), x_d.data(),
                                            bias_d.data(), c.rows, c.cols, act, config, ws.data(), ws_bytes,
                                            nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    t.in_place.add_exact(same_bits(d_in_place.download(t.in_place, where), dx_first), where,
                         "in-place dx differs bitwise from the out-of-place dx");
    t.in_place.add_exact(same_bits(dbias_ip.download(t.in_place, where), dbias_first), where,
                         "in-place dbias differs bitwise from the out-of-place dbias");
  }

  // The unfused baseline, forward then backward, as the experiments run it.
  Guarded<T> z(n, c.off_out), a(n, c.off_out2), y_u(n, c.off_out), da(n, c.off_out2), dz(n, c.off_out);
  Guarded<T> dbias_u(static_cast<std::size_t>(c.cols), c.off_bias);
  Guarded<std::uint8_t> mask(n, c.off_in1);
  DeviceBuffer<unsigned char> workspace(ws_bytes);
  workspace.fill_bytes(0xFF);
  kernels::launch_bias_add<T>(z.data(), x_d.data(), bias_d.data(), c.rows, c.cols, nullptr);
  kernels::launch_activation_fwd<T>(a.data(), z.data(), c.rows, c.cols, act, nullptr);
  kernels::launch_dropout_mask_u8(mask.data(), n, config, nullptr);
  kernels::launch_dropout_apply_u8<T>(y_u.data(), a.data(), mask.data(), n, c.p, nullptr);
  kernels::launch_dropout_apply_u8<T>(da.data(), dy_d.data(), mask.data(), n, c.p, nullptr);
  kernels::launch_activation_bwd<T>(dz.data(), da.data(), z.data(), c.rows, c.cols, act, nullptr);
  kernels::launch_column_sum<T>(dbias_u.data(), dz.data(), c.rows, c.cols, workspace.data(), ws_bytes,
                                nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> got_z = z.download(t.unfused_z, where);
  const std::vector<T> got_yu = y_u.download(t.unfused_fwd, where);
  const std::vector<T> got_dz = dz.download(t.unfused_dx, where);
  const std::vector<T> got_dbu = dbias_u.download(t.unfused_dbias, where);

  const double depth = bias_grad_sum_depth(c.rows, c.cols);
  const double lip = act_lipschitz(act), curv = act_curvature(act);
  std::vector<double> fused_err(static_cast<std::size_t>(c.cols), 0.0), unfused_err(fused_err),
      abs_sum(fused_err);
  for (ref::Index r = 0; r < rows; ++r) {
    for (ref::Index col = 0; col < cols; ++col) {
      const auto i = static_cast<std::size_t>(r * cols + col);
      const auto cc = static_cast<std::size_t>(col);
      const double zz = xm(r, col) + bv(col);
      const double k = keep(r, col) != 0 ? 1.0 : 0.0;
      const double g = dym(r, col) * k * scale;
      const double y = want_y(r, col), dxv = want.dx(r, col);
      const double e_act = act_eval_error(act, zz), e_grad = act_grad_eval_error(act, zz);

      // Every bound is multiplied by keep: a dropped element must be exactly 0.
      t.fwd.add(as_double(y_first[i]), y, k * ((u + 4 * v) * std::fabs(y) + scale * e_act + eta), where, i);
      const double fused_dx_err = k * (4 * v * std::fabs(dxv) + std::fabs(g) * e_grad);
      t.bwd_dx.add(as_double(dx_first[i]), dxv, k * (u * std::fabs(dxv) + eta) + fused_dx_err, where, i);

      t.unfused_z.add(as_double(got_z[i]), zz, (u + v) * std::fabs(zz) + eta, where, i);
      const double a_exact = ref::activate(zz, to_ref(act));
      t.unfused_fwd.add(as_double(got_yu[i]), y,
                        k * ((u + 4 * v) * std::fabs(y) +
                             scale * (lip * (u + v) * std::fabs(zz) + e_act + u * std::fabs(a_exact)) +
                             eta * (1 + scale * (1 + lip))),
                        where, i);
      const double unfused_dx_bound =
          k * ((2 * u + 4 * v) * std::fabs(dxv) + std::fabs(g) * (curv * (u + v) * std::fabs(zz) + e_grad) +
               eta * (1 + lip + curv));
      t.unfused_dx.add(as_double(got_dz[i]), dxv, unfused_dx_bound, where, i);

      fused_err[cc] += fused_dx_err;
      unfused_err[cc] += unfused_dx_bound;
      abs_sum[cc] += std::fabs(dxv);
    }
  }
  for (ref::Index col = 0; col < cols; ++col) {
    const auto cc = static_cast<std::size_t>(col);
    const double want_db = want.dbias(col);
    const double sum_err = depth * v * abs_sum[cc];
    t.bwd_dbias.add(as_double(dbias_first[cc]), want_db,
                    u * std::fabs(want_db) + eta + fused_err[cc] + sum_err, where, cc);
    t.unfused_dbias.add(as_double(got_dbu[cc]), want_db,
                        u * std::fabs(want_db) + eta + unfused_err[cc] + sum_err, where, cc);
  }
}

template <class T>
std::vector<CheckResult> checks_for(std::uint64_t seed) {
  std::vector<CheckResult> all;
  const std::vector<MatrixCase> cases =
      matrix_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 1));
  for (const Activation act : kActivations) {
    Tallies t(std::string("operators/bias_act_dropout/") + kernels::activation_name(act) + "/",
              std::string("/") + DTypeTraits<T>::name);
    for (const MatrixCase& c : cases) check_case<T>(c, act, t);
    const auto results = t.results();
    all.insert(all.end(), results.begin(), results.end());
  }
  return all;
}

}  // namespace

void add_bias_act_dropout_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const std::vector<std::int64_t> rows = shapes<std::int64_t>(options, {64}, {4096}, {4096, 16384});
  const std::vector<std::int64_t> cols = shapes<std::int64_t>(options, {1024}, {1024}, {1024, 4096});
  const std::vector<Activation> acts =
      shapes<Activation>(options, {Activation::gelu_erf}, {Activation::gelu_erf},
                         {std::begin(kActivations), std::end(kActivations)});
  for (const bool backward : {false, true}) {
    for (const Activation act : acts) {
      for (const std::int64_t r : rows) {
        for (const std::int64_t c : cols) {
          suite.experiments.push_back(bias_act_dropout_experiment<float>(r, c, act, backward));
          suite.experiments.push_back(bias_act_dropout_experiment<__nv_bfloat16>(r, c, act, backward));
        }
      }
    }
  }
}

std::vector<CheckResult> bias_act_dropout_gpu_checks(std::uint64_t seed) {
  return checks_for_all_dtypes([&](auto tag) { return checks_for<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
