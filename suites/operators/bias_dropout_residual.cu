// Operator-suite experiments and GPU checks for the bias + dropout + residual family
// (kernels/bias_dropout_residual.h).
//
// Experiments: the residual epilogue at Transformer shapes, rows = batch tokens {4096, 16384} x
// cols = {1024, 4096}, fp32 and bf16, forward and backward; baseline "unfused" (bias add, uint8
// mask, multiply, residual add; backward: multiply, column sum), variant "fused". Minimal bytes:
// forward x + residual + bias read, y written; backward dy read, dx + dbias written (dresidual
// is dy itself and costs nothing in either variant).
//
// Checks: fused and unfused, forward and backward (dx, dbias), against
// reference/bias_dropout_residual.h on >= 50 shapes x 3 dtypes, outputs and workspace poisoned,
// guards after every output, and bitwise repeatability of the fused kernels.

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
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "kernels/dropout_mask.h"
#include "reference/bias_dropout_residual.h"
#include "reference/dropout.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using kernels::DropoutConfig;
using namespace check_util;

constexpr float kBenchP = 0.1f;
constexpr std::uint64_t kBenchSeed = 20240919;
constexpr std::uint64_t kBenchOffset = 9;

// ---------------------------------------------------------------------------------------------
// Experiments.

template <class T>
struct BenchState {
  std::int64_t rows, cols;
  std::size_t n;
  DeviceBuffer<T> in, residual, bias, out, tmp, tmp2, dbias;
  DeviceBuffer<std::uint8_t> mask;
  DeviceBuffer<unsigned char> workspace;
  BenchState(std::int64_t r, std::int64_t c, bool backward)
      : rows(r),
        cols(c),
        n(static_cast<std::size_t>(r * c)),
        in(random_values<T>(n, kBenchSeed + 1, -1.0f, 1.0f)),  // x, or dy for backward
        residual(backward ? std::vector<T>{} : random_values<T>(n, kBenchSeed + 2, -1.0f, 1.0f)),
        bias(random_values<T>(static_cast<std::size_t>(c), kBenchSeed + 3, -1.0f, 1.0f)),
        out(n),
        tmp(backward ? 0 : n),
        tmp2(backward ? 0 : n),
        dbias(static_cast<std::size_t>(c)),
        mask(n),
        workspace(kernels::bias_dropout_residual_bwd_workspace_bytes(r, c)) {}
};

template <class T>
ExperimentSpec bias_dropout_residual_experiment(std::int64_t rows, std::int64_t cols, bool backward) {
  const std::string dtype = DTypeTraits<T>::name;
  ExperimentSpec e;
  e.name = std::string(backward ? "bias_dropout_residual_bwd/" : "bias_dropout_residual_fwd/") + dtype +
           "/rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols);
  e.params = {{"rows", rows},
              {"cols", cols},
              {"elements", rows * cols},
              {"dtype", dtype},
              {"p", std::round(kBenchP * 1e6) / 1e6},
              {"direction", backward ? "bwd" : "fwd"}};
  e.baseline = "unfused";
  const double s = sizeof(T), n = static_cast<double>(rows) * static_cast<double>(cols),
               c = static_cast<double>(cols);
  const double bytes = backward ? s * (2 * n + c) : s * (3 * n + c);
  e.variants = {{"unfused", bytes, 0}, {"fused", bytes, 0}};
  e.dump_variant = "fused";
  e.prepare = [rows, cols, backward] {
    auto st = std::make_shared<BenchState<T>>(rows, cols, backward);
    const DropoutConfig config{kBenchP, kBenchSeed, kBenchOffset};
    PreparedExperiment p;
    if (!backward) {
      p.variants.push_back([st, config](cudaStream_t s) {
        kernels::launch_bias_add(st->tmp.data(), st->in.data(), st->bias.data(), st->rows, st->cols, s);
        kernels::launch_dropout_mask_u8(st->mask.data(), st->n, config, s);
        kernels::launch_dropout_apply_u8(st->tmp2.data(), st->tmp.data(), st->mask.data(), st->n, config.p,
                                         s);
        kernels::launch_residual_add(st->out.data(), st->tmp2.data(), st->residual.data(), st->rows, st->cols,
                                     s);
      });
      p.variants.push_back([st, config](cudaStream_t s) {
        kernels::launch_bias_dropout_residual_fwd(st->out.data(), st->in.data(), st->bias.data(),
                                                  st->residual.data(), st->rows, st->cols, config, s);
      });
    } else {
      // The uint8 mask the unfused forward saved.
      kernels::launch_dropout_mask_u8(st->mask.data(), st->n, config, nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      p.variants.push_back([st, config](cudaStream_t s) {
        kernels::launch_dropout_apply_u8(st->out.data(), st->in.data(), st->mask.data(), st->n, config.p, s);
        kernels::launch_column_sum(st->dbias.data(), st->out.data(), st->rows, st->cols, st->workspace.data(),
                                   st->workspace.size(), s);
      });
      p.variants.push_back([st, config](cudaStream_t s) {
        kernels::launch_bias_dropout_residual_bwd(st->out.data(), st->dbias.data(), st->in.data(), st->rows,
                                                  st->cols, config, st->workspace.data(),
                                                  st->workspace.size(), s);
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
      if (!backward) {
        a.push_back(dump_array("x", "input", st->in, matrix));
        a.push_back(dump_array("bias", "input", st->bias, columns));
        a.push_back(dump_array("residual", "input", st->residual, matrix));
        a.push_back(dump_array("keep", "input", st->mask, matrix));
        a.push_back(dump_array("y", "output", st->out, matrix));
      } else {
        a.push_back(dump_array("dy", "input", st->in, matrix));
        a.push_back(dump_array("keep", "input", st->mask, matrix));
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
// Tolerances. Inputs are T values, exact in double; u = unit_roundoff(T), v = unit_roundoff(f32),
// η = underflow_error(T) (the absolute part of a rounding to T), s = 1/(1-p) (2 v in the host's
// float), z = x + b. Every element bound is multiplied by keep: a dropped element gives exactly
// the residual (y = r + 0) and exactly 0 (dx).
//   fused y      : |Δ| <= keep·[(u + v)|y| + 5 v s|z| + η]   (fl(x + b), the float scale, the
//                  multiply: 4 v s|z|, 1 v of slack; the residual add v|y|; the store u|y| + η)
//   unfused y    : |Δ| <= keep·[(u + v)|y| + (u + 3v)|d| + (u + v) s|z| + η(2 + s)]   (z stored in T,
//                  then d = z·s stored in T, then the add and its store)
//   dx (both)    : |Δ| <= keep·[(u + 4v)|dx| + η]   (as kernels/dropout: 3 v for the scale and
//                  multiply, 1 slack)
//   fused dbias  : |Δ| <= u|dbias| + η + Σ_r 4v|dx_r| + D v Σ_r|dx_r|   (float sums of unrounded dx)
//   unfused dbias: |Δ| <= u|dbias| + η + Σ_r [(u + 4v)|dx_r| + keep_r η] + D v Σ_r|dx_r|   (column sum
//                  of the T dx)
// D is the summation depth of kernels/dropout_mask.h's fixed order (bias_grad_sum_depth).
const char* kRule =
    "per element bounds derived in suites/operators/bias_dropout_residual.cu: u_T + eta_T (half T's smallest "
    "subnormal) per rounding to T, u_f32 per float op, D u_f32 sum|dx| for the bias-gradient summation; "
    "dropped elements exact";

struct Tallies {
  Tally fwd, bwd_dx, bwd_dbias, repeat, unfused_fwd, unfused_dx, unfused_dbias;
  Tallies(const std::string& prefix, const std::string& suffix)
      : fwd(prefix + "fwd" + suffix, kRule),
        bwd_dx(prefix + "bwd_dx" + suffix, kRule),
        bwd_dbias(prefix + "bwd_dbias" + suffix, kRule),
        repeat(prefix + "determinism" + suffix,
               "bitwise: a second fused forward and backward on the same inputs (workspace re-poisoned) "
               "reproduce y, dx and dbias exactly"),
        unfused_fwd(prefix + "unfused_fwd" + suffix, kRule),
        unfused_dx(prefix + "unfused_bwd_dx" + suffix, kRule),
        unfused_dbias(prefix + "unfused_bwd_dbias" + suffix, kRule) {}
  std::vector<CheckResult> results() const {
    return {fwd.result(),         bwd_dx.result(),     bwd_dbias.result(),    repeat.result(),
            unfused_fwd.result(), unfused_dx.result(), unfused_dbias.result()};
  }
};

template <class T>
void check_case(const MatrixCase& c, Tallies& t) {
  const DType dtype = DTypeTraits<T>::dtype;
  const double u = unit_roundoff(dtype), v = unit_roundoff(DType::f32), eta = underflow_error(dtype);
  const std::string where = c.describe();
  const std::size_t n = c.elements();
  const auto rows = static_cast<ref::Index>(c.rows), cols = static_cast<ref::Index>(c.cols);
  const DropoutConfig config{c.p, c.seed, c.offset};
  const double scale = ref::dropout_scale(c.p);

  const std::vector<T> x = random_values<T>(n, c.seed + 1, -2.0f, 2.0f);
  const std::vector<T> residual = random_values<T>(n, c.seed + 2, -2.0f, 2.0f);
  const std::vector<T> bias = random_values<T>(static_cast<std::size_t>(c.cols), c.seed + 3, -1.0f, 1.0f);
  const std::vector<T> dy = random_values<T>(n, c.seed + 4, -1.0f, 1.0f);
  const ref::Matrix xm = to_matrix(x, rows, cols), rm = to_matrix(residual, rows, cols);
  const ref::Matrix dym = to_matrix(dy, rows, cols);
  const ref::Vector bv = to_vector(bias);
  const ref::KeepMask keep = ref::make_dropout_mask(rows, cols, c.p, c.seed, c.offset);
  const ref::Matrix want_y = ref::bias_dropout_residual_forward(xm, bv, rm, keep, c.p);
  const ref::BiasDropoutResidualGrads want = ref::bias_dropout_residual_backward(dym, keep, c.p);

  Guarded<T> x_d(n, c.off_in0), r_d(n, c.off_in1), dy_d(n, c.off_in1);
  Guarded<T> bias_d(static_cast<std::size_t>(c.cols), c.off_bias);
  x_d.upload(x);
  r_d.upload(residual);
  dy_d.upload(dy);
  bias_d.upload(bias);
  const std::size_t ws_bytes = kernels::bias_dropout_residual_bwd_workspace_bytes(c.rows, c.cols);

  const FusedOutputs<T> fused =
      run_fused_twice<T>(c, ws_bytes, t, where, [&](T* y, T* dx, T* dbias, unsigned char* workspace) {
        kernels::launch_bias_dropout_residual_fwd<T>(y, x_d.data(), bias_d.data(), r_d.data(), c.rows, c.cols,
                                                     config, nullptr);
        kernels::launch_bias_dropout_residual_bwd<T>(dx, dbias, dy_d.data(), c.rows, c.cols, config,
                                                     workspace, ws_bytes, nullptr);
      });
  const std::vector<T>&y_first = fused.y, &dx_first = fused.dx, &dbias_first = fused.dbias;

  // The unfused baseline as the experiments run it.
  Guarded<T> z(n, c.off_out), d(n, c.off_out2), y_u(n, c.off_out), dx_u(n, c.off_out2);
  Guarded<T> dbias_u(static_cast<std::size_t>(c.cols), c.off_bias);
  Guarded<std::uint8_t> mask(n, c.off_in0);
  DeviceBuffer<unsigned char> workspace(ws_bytes);
  workspace.fill_bytes(0xFF);
  kernels::launch_bias_add<T>(z.data(), x_d.data(), bias_d.data(), c.rows, c.cols, nullptr);
  kernels::launch_dropout_mask_u8(mask.data(), n, config, nullptr);
  kernels::launch_dropout_apply_u8<T>(d.data(), z.data(), mask.data(), n, c.p, nullptr);
  kernels::launch_residual_add<T>(y_u.data(), d.data(), r_d.data(), c.rows, c.cols, nullptr);
  kernels::launch_dropout_apply_u8<T>(dx_u.data(), dy_d.data(), mask.data(), n, c.p, nullptr);
  kernels::launch_column_sum<T>(dbias_u.data(), dx_u.data(), c.rows, c.cols, workspace.data(), ws_bytes,
                                nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> got_yu = y_u.download(t.unfused_fwd, where);
  const std::vector<T> got_dxu = dx_u.download(t.unfused_dx, where);
  const std::vector<T> got_dbu = dbias_u.download(t.unfused_dbias, where);

  const double depth = bias_grad_sum_depth(c.rows, c.cols);
  std::vector<double> abs_sum(static_cast<std::size_t>(c.cols), 0.0), kept_count(abs_sum);
  for (ref::Index r = 0; r < rows; ++r) {
    for (ref::Index col = 0; col < cols; ++col) {
      const auto i = static_cast<std::size_t>(r * cols + col);
      const double zz = xm(r, col) + bv(col);
      const double k = keep(r, col) != 0 ? 1.0 : 0.0;
      const double y = want_y(r, col), dxv = want.dx(r, col);
      const double kept_part = k * scale * zz;  // d = dropout(x + b)
      // Every element bound is multiplied by keep: a dropped element must give exactly the
      // residual (y) and exactly 0 (dx).
      t.fwd.add(as_double(y_first[i]), y, k * ((u + v) * std::fabs(y) + 5 * v * scale * std::fabs(zz) + eta),
                where, i);
      t.unfused_fwd.add(as_double(got_yu[i]), y,
                        k * ((u + v) * std::fabs(y) + (u + 3 * v) * std::fabs(kept_part) +
                             (u + v) * scale * std::fabs(zz) + eta * (2 + scale)),
                        where, i);
      t.bwd_dx.add(as_double(dx_first[i]), dxv, k * ((u + 4 * v) * std::fabs(dxv) + eta), where, i);
      t.unfused_dx.add(as_double(got_dxu[i]), dxv, k * ((u + 4 * v) * std::fabs(dxv) + eta), where, i);
      kept_count[static_cast<std::size_t>(col)] += k;
      abs_sum[static_cast<std::size_t>(col)] += std::fabs(dxv);
    }
  }
  for (ref::Index col = 0; col < cols; ++col) {
    const auto cc = static_cast<std::size_t>(col);
    const double want_db = want.dbias(col);
    const double sum_err = depth * v * abs_sum[cc];
    t.bwd_dbias.add(as_double(dbias_first[cc]), want_db,
                    u * std::fabs(want_db) + eta + 4 * v * abs_sum[cc] + sum_err, where, cc);
    t.unfused_dbias.add(
        as_double(got_dbu[cc]), want_db,
        u * std::fabs(want_db) + eta + (u + 4 * v) * abs_sum[cc] + eta * kept_count[cc] + sum_err, where, cc);
  }
}

template <class T>
std::vector<CheckResult> checks_for(std::uint64_t seed) {
  Tallies t("operators/bias_dropout_residual/", std::string("/") + DTypeTraits<T>::name);
  for (const MatrixCase& c : matrix_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 7))) {
    check_case<T>(c, t);
  }
  return t.results();
}

}  // namespace

void add_bias_dropout_residual_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const std::vector<std::int64_t> rows = shapes<std::int64_t>(options, {64}, {4096}, {4096, 16384});
  const std::vector<std::int64_t> cols = shapes<std::int64_t>(options, {1024}, {1024}, {1024, 4096});
  for (const bool backward : {false, true}) {
    for (const std::int64_t r : rows) {
      for (const std::int64_t c : cols) {
        suite.experiments.push_back(bias_dropout_residual_experiment<float>(r, c, backward));
        suite.experiments.push_back(bias_dropout_residual_experiment<__nv_bfloat16>(r, c, backward));
      }
    }
  }
}

std::vector<CheckResult> bias_dropout_residual_gpu_checks(std::uint64_t seed) {
  return checks_for_all_dtypes([&](auto tag) { return checks_for<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
