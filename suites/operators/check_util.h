// What the GPU checks and experiments of the operator suite (suites/operators/layernorm.cu,
// softmax.cu, dropout.cu, bias_act_dropout.cu, bias_dropout_residual.cu) share: device and host
// random data, device buffers with poisoned guard elements, and the tallies that turn
// per-element comparisons into one CheckResult. Include from those .cu files (and their GPU
// tests) only: it uses DeviceBuffer, a __global__ kernel and reference/ types.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/check_result.h"
#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "kernels/dropout_mask.h"
#include "reference/tensor.h"

namespace seqbench::operators::check_util {

// ---------------------------------------------------------------------------------------------
// Host random data: splitmix64, 24-bit uniforms mapped to [lo, hi), rounded to T. Cheap enough
// (a few ns a value) to fill the 100M-element experiment inputs.

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::vector<T> values(n);
  std::uint64_t state = seed;
  for (auto& v : values) {
    const float u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
    v = from_float<T>(lo + (hi - lo) * u);
  }
  return values;
}

// Uniform values in [lo, hi) from Philox (seed, index), filled on the device: inputs are never
// zeros, which can run faster than data.
template <class T>
__global__ void fill_uniform_kernel(T* out, std::size_t n, std::uint64_t seed, float lo, float hi) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = from_float<T>(lo + (hi - lo) * philox_uniform(seed, 0, i));
}

template <class T>
void fill(DeviceBuffer<T>& buffer, std::uint64_t seed, float lo, float hi) {
  fill_uniform_kernel<T><<<1024, 256>>>(buffer.data(), buffer.size(), seed, lo, hi);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

// The results of `checks(tag)` (a std::vector<CheckResult>) for f32, f16 and bf16, in that order.
template <class Fn>
std::vector<CheckResult> checks_for_all_dtypes(Fn&& checks) {
  std::vector<CheckResult> all;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    auto some = dispatch_dtype(dtype, checks);
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

inline constexpr double kU32 = 1.0 / 16777216.0;  // 2^-24, the unit roundoff of one fp32 operation

// The absolute part of one rounding to a T: half T's smallest subnormal (2^-150 f32, 2^-25 f16,
// 2^-134 bf16). The standard model with underflow is fl(x) = x(1 + δ) + η, |δ| <= u_T,
// |η| <= underflow_error(T); without η, an output that lands among fp16's subnormals (below
// 6.1e-5, e.g. a small dy times a small slope) fails any purely relative bound.
inline double underflow_error(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return std::ldexp(1.0, -25);
    case DType::bf16:
      return std::ldexp(1.0, -134);
    case DType::f32:
      break;
  }
  return std::ldexp(1.0, -150);
}

template <class T>
double as_double(T v) {
  return static_cast<double>(to_float(v));
}

// T values (exact in double) as the reference's row-major matrix.
template <class T>
ref::Matrix to_matrix(const std::vector<T>& v, ref::Index rows, ref::Index cols) {
  ref::Matrix m(rows, cols);
  for (ref::Index i = 0; i < rows * cols; ++i) m.data()[i] = as_double(v[static_cast<std::size_t>(i)]);
  return m;
}

template <class T>
ref::Vector to_vector(const std::vector<T>& v) {
  ref::Vector out(static_cast<ref::Index>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) out(static_cast<ref::Index>(i)) = as_double(v[i]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The worst element of one (kernel, dtype) over every case, against per-element bounds.
class Tally {
 public:
  Tally(std::string name, std::string rule) : name_(std::move(name)), rule_(std::move(rule)) {}

  // got vs want within `bound` (bound 0: exactly); a NaN got (poison left unwritten) always fails.
  void add(double got, double want, double bound, const std::string& where, std::size_t index) {
    ++checked_;
    const double err = std::fabs(got - want);
    const double inf = std::numeric_limits<double>::infinity();
    // A NaN error or a NaN bound fails (a bound formula that met 0·inf must not pass vacuously).
    const double ratio = std::isnan(err) || std::isnan(bound) ? inf
                         : err == 0.0                         ? 0.0
                         : bound > 0.0                        ? err / bound
                                                              : inf;
    if (std::isnan(err)) {
      max_abs_ = inf;
    } else {
      max_abs_ = std::max(max_abs_, err);
      if (want != 0.0) max_rel_ = std::max(max_rel_, err / std::fabs(want));
    }
    if (ratio > 1.0) ++failures_;
    if (ratio > worst_ratio_ || worst_.empty()) {
      worst_ratio_ = ratio;
      bound_at_worst_ = bound;
      std::ostringstream os;
      os << where << " at element " << index << ": got " << got << ", want " << want << ", bound " << bound;
      worst_ = os.str();
    }
  }

  // An exact condition (a mask bit pattern, a guard region, a bitwise repeat).
  void add_exact(bool ok, const std::string& where, const std::string& what) {
    ++checked_;
    if (ok) return;
    ++failures_;
    max_abs_ = std::max(max_abs_, 1.0);
    if (exact_failure_.empty()) exact_failure_ = where + ": " + what;
  }

  CheckResult result() const {
    CheckResult r;
    r.name = name_;
    r.passed = checked_ > 0 && failures_ == 0;
    r.max_abs_err = max_abs_;
    r.max_rel_err = max_rel_;
    r.tolerance = bound_at_worst_;
    std::ostringstream os;
    os << rule_ << "; " << checked_ << " values checked, " << failures_ << " failed";
    if (!worst_.empty()) os << "; worst (err/bound " << worst_ratio_ << ") " << worst_;
    if (!exact_failure_.empty()) os << "; first exact failure: " << exact_failure_;
    if (checked_ == 0) os << "; nothing was checked";
    r.detail = os.str();
    return r;
  }

 private:
  std::string name_, rule_;
  std::size_t checked_ = 0, failures_ = 0;
  double max_abs_ = 0.0, max_rel_ = 0.0, worst_ratio_ = 0.0, bound_at_worst_ = 0.0;
  std::string worst_, exact_failure_;
};

// ---------------------------------------------------------------------------------------------
// The worst case of one check over many runs, against |got - ref| <= tol · s per element (s an
// element's magnitude scale from the check's error analysis): the LayerNorm and softmax checks.
// `unit` names what `cases` counts in the detail ("random shapes", "runs").
struct ScaledTally {
  ScaledTally(std::string check_name, std::string case_unit)
      : name(std::move(check_name)), unit(std::move(case_unit)) {}
  std::string name, unit;
  bool passed = true;
  double max_abs = 0.0;
  double worst_ratio = 0.0, worst_tol = 0.0, worst_score = -1.0;
  std::string worst_case, rule, failures;
  int cases = 0;

  // One tensor of one case: got/ref/scale per element.
  void add(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& scale,
           double tol, const std::string& what) {
    double ratio = 0.0, abs_max = 0.0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      double err = std::abs(got[i] - ref[i]);
      if (!(err <= std::numeric_limits<double>::max()))
        err = std::numeric_limits<double>::infinity();  // NaN/inf
      const double r = err / scale[i];
      if (r > ratio || (std::isinf(r) && !std::isinf(ratio))) {
        ratio = r;
        at = i;
      }
      abs_max = std::max(abs_max, err);
    }
    max_abs = std::max(max_abs, abs_max);
    const double score = ratio / tol;
    if (!(ratio <= tol)) {
      if (passed || failures.size() < 400) {
        std::ostringstream os;
        os << (failures.empty() ? "" : "; ") << what << " element " << at << ": got " << got[at] << ", want "
           << ref[at] << " (|err|/s = " << ratio << " > " << tol << ")";
        failures += os.str();
      }
      passed = false;
    }
    if (score > worst_score) {
      worst_score = score;
      worst_ratio = ratio;
      worst_tol = tol;
      worst_case = what;
    }
  }
  void guard(std::size_t violations, const std::string& what) {
    if (violations == 0) return;
    passed = false;
    failures += (failures.empty() ? "" : "; ") + what + ": " + std::to_string(violations) +
                " element(s) outside the tensor were written";
  }
  CheckResult result() const {
    CheckResult r;
    r.name = name;
    r.passed = passed && cases > 0;
    r.max_abs_err = max_abs;
    r.max_rel_err = worst_ratio;
    r.tolerance = worst_tol;
    std::ostringstream os;
    os << cases << " " << unit << "; worst (largest |err|/s relative to its tolerance): " << worst_case
       << "; rule: |got - ref| <= tol * s, " << rule;
    if (!failures.empty()) os << "; FAILED: " << failures;
    r.detail = os.str();
    return r;
  }
};

// ---------------------------------------------------------------------------------------------
// n elements of a device allocation, with poisoned guard elements (every byte 0xFF, NaN in every
// float format) around them; poisoned at construction and by poison(). Outputs are compared inside
// the region; every byte outside it must still be 0xFF afterwards. Layouts:
//   GuardAt::end (the dropout families): the region at element `offset` of the allocation, kGuard
//     more elements after it;
//   GuardAt::both_ends (LayerNorm, softmax): n + 2·kGuard elements, the region at kGuard + offset.
// An element offset that breaks the vector alignment sends the kernels down their scalar path.
inline constexpr std::size_t kGuard = 16;

enum class GuardAt { end, both_ends };

template <class T, GuardAt At = GuardAt::end>
struct Guarded {
  DeviceBuffer<T> buffer;
  std::size_t offset, n;

  Guarded(std::size_t count, std::size_t element_offset)
      : buffer(At == GuardAt::end ? count + element_offset + kGuard : count + 2 * kGuard),
        offset(At == GuardAt::end ? element_offset : kGuard + element_offset),
        n(count) {
    poison();
  }
  T* data() { return buffer.data() + offset; }
  void poison() { buffer.fill_bytes(0xFF); }
  void upload(const std::vector<T>& host) {
    if (host.empty()) return;
    SEQBENCH_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // The region's contents; records in `tally` whether anything outside it was written.
  std::vector<T> download(Tally& tally, const std::string& where) const {
    const std::vector<T> all = buffer.copy_to_host();
    const std::size_t touched = bytes_outside(all);
    tally.add_exact(touched == 0, where, std::to_string(touched) + " bytes written outside the output");
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(offset);
    return {begin, begin + static_cast<std::ptrdiff_t>(n)};
  }
  // The region's values as doubles; adds to `violations` the guard bytes that lost their poison.
  std::vector<double> download(std::size_t& violations) const {
    const std::vector<T> all = buffer.copy_to_host();
    std::vector<double> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = to_float(all[offset + i]);
    violations += bytes_outside(all);
    return out;
  }

 private:
  std::size_t bytes_outside(const std::vector<T>& all) const {
    std::size_t touched = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (i >= offset && i < offset + n) continue;
      const auto* bytes = reinterpret_cast<const unsigned char*>(&all[i]);
      for (std::size_t b = 0; b < sizeof(T); ++b) touched += bytes[b] != 0xFF;
    }
    return touched;
  }
};

// Whether a and b hold the same bytes.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---------------------------------------------------------------------------------------------
// [rows, cols] cases of the bias families: the odd sizes, tall shapes that give many row
// blocks to the bias-gradient reduction, and random shapes, half with cols % 8 == 0 (the Packed
// path when aligned). Half the cases put every tensor at a random element offset (0..8), which
// sends them down the scalar path.
struct MatrixCase {
  std::int64_t rows = 0, cols = 0;
  float p = 0.0f;
  std::uint64_t seed = 0, offset = 0;
  std::size_t off_in0 = 0, off_in1 = 0, off_bias = 0, off_out = 0, off_out2 = 0;  // element offsets

  std::size_t elements() const { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols); }
  std::string describe() const {
    std::ostringstream os;
    os << "rows=" << rows << " cols=" << cols << " p=" << p << " seed=" << seed << " offset=" << offset
       << " element offsets in0/in1/bias/out/out2=" << off_in0 << "/" << off_in1 << "/" << off_bias << "/"
       << off_out << "/" << off_out2;
    return os.str();
  }
};

inline std::vector<MatrixCase> matrix_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1},     {1, 3},     {3, 1},    {1, 8},     {2, 127},  {3, 1000}, {2, 1023},
      {1, 4097},  {5, 1024},  {4, 4096}, {17, 64},   {33, 256}, {127, 3},  {9, 1000},
      {3000, 16}, {2049, 33}, {5000, 8}, {700, 129}, {64, 768}, {8, 3072}};
  constexpr std::int64_t kMaxElements = 300'000;
  for (int i = 0; i < 36; ++i) {
    const std::int64_t cols = rng() % 2 == 0 ? 8 * static_cast<std::int64_t>(1 + rng() % 512)
                                             : static_cast<std::int64_t>(1 + rng() % 5000);
    const std::int64_t row_limits[] = {8, 64, 300, 2000};
    std::int64_t rows =
        1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(row_limits[rng() % 4]));
    rows = std::max<std::int64_t>(1, std::min(rows, kMaxElements / cols));
    shapes.emplace_back(rows, cols);
  }
  const float probabilities[] = {0.1f, 0.5f, 0.0f, 1.0f, 0.9f, 0.3f};
  std::vector<MatrixCase> cases;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    MatrixCase c;
    c.rows = shapes[i].first;
    c.cols = shapes[i].second;
    c.p = i % 7 == 6 ? static_cast<float>(rng() % 1000) / 1000.0f : probabilities[i % 7 % 6];
    c.seed = rng();
    c.offset = rng() % 1000;
    if (rng() % 2 == 1) {
      c.off_in0 = rng() % 9;
      c.off_in1 = rng() % 9;
      c.off_bias = rng() % 9;
      c.off_out = rng() % 9;
      c.off_out2 = rng() % 9;
    }
    cases.push_back(c);
  }
  return cases;
}

// The outputs of a bias family's fused forward and backward.
template <class T>
struct FusedOutputs {
  std::vector<T> y, dx, dbias;
};

// Runs the fused forward and backward twice, each time on fresh poisoned outputs and a poisoned
// workspace of ws_bytes: launch(y, dx, dbias, workspace) enqueues both. The first run's guards go
// to t.fwd, t.bwd_dx and t.bwd_dbias, the second's to t.repeat, which also records whether the
// second run reproduced the first bitwise. Returns the first run's outputs.
template <class T, class Tallies, class Launch>
FusedOutputs<T> run_fused_twice(const MatrixCase& c, std::size_t ws_bytes, Tallies& t,
                                const std::string& where, Launch&& launch) {
  const std::size_t n = c.elements();
  FusedOutputs<T> first;
  for (int run = 0; run < 2; ++run) {
    Guarded<T> y(n, c.off_out), dx(n, c.off_out2), dbias(static_cast<std::size_t>(c.cols), c.off_bias);
    DeviceBuffer<unsigned char> workspace(ws_bytes);
    workspace.fill_bytes(0xFF);
    launch(y.data(), dx.data(), dbias.data(), workspace.data());
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<T> got_y = y.download(run == 0 ? t.fwd : t.repeat, where);
    const std::vector<T> got_dx = dx.download(run == 0 ? t.bwd_dx : t.repeat, where);
    const std::vector<T> got_dbias = dbias.download(run == 0 ? t.bwd_dbias : t.repeat, where);
    if (run == 1) {
      t.repeat.add_exact(same_bits(got_y, first.y), where, "second forward differs bitwise");
      t.repeat.add_exact(same_bits(got_dx, first.dx), where, "second backward dx differs bitwise");
      t.repeat.add_exact(same_bits(got_dbias, first.dbias), where, "second backward dbias differs bitwise");
      break;
    }
    first.y = got_y;
    first.dx = got_dx;
    first.dbias = got_dbias;
  }
  return first;
}

// The number of float additions on the longest path of the bias-gradient sum of one column (the
// order of kernels/dropout_mask.h: each thread's rows, the 8 row lanes, each reduce lane's row
// blocks, the 16 reduce lanes): the γ_D = D·u_f32 factor of the summation error bound
// |computed - exact| <= D·u_f32·Σ|terms| (Higham, Accuracy and Stability, §4.2).
inline double bias_grad_sum_depth(std::int64_t rows, std::int64_t cols) {
  namespace dd = kernels::dropout_detail;
  const dd::RowTilePlan plan = dd::make_row_tile_plan(rows, cols);
  const std::int64_t per_thread = (plan.rows_per_block + dd::kTileRows - 1) / dd::kTileRows;
  const std::int64_t per_reduce_lane = (plan.row_blocks + dd::kReduceRows - 1) / dd::kReduceRows;
  return static_cast<double>(per_thread + dd::kTileRows + per_reduce_lane + dd::kReduceRows);
}

}  // namespace seqbench::operators::check_util
