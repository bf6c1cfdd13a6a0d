// Operator-suite experiments and GPU checks for the dropout family (kernels/dropout.h).
//
// Experiments: LightSeq2 Fig. 17 (dropout over element counts 0.1M .. 100M), forward and
// backward, fp32 and bf16. Three variants each: "unfused" (uint8 mask kernel + multiply kernel,
// the baseline), "fused_bitmask" (one kernel; forward writes 1 bit per element, backward reads
// it) and "fused_regen" (one kernel; nothing saved, backward redraws the mask); backward adds
// "fused_regen_in_place" (fused_regen with dx == dy, as the attention backward runs it). Every variant is
// credited with the op's minimal bytes, x read + y written (dy read + dx written), so their
// GB/s and % of copy bandwidth compare directly. What each keeps for backward: the uint8 mask,
// params.elements bytes; the bit-packed mask, params.bitmask_bytes; regeneration, nothing.
//
// Checks: every launcher against reference/dropout.h on random sizes (odd ones, misaligned
// offsets) in all three dtypes with poisoned outputs and guard elements; the keep rate within
// 4σ; bitwise determinism; the bit-packed mask equal to the reference's mask packed on the host.

// reference/ is host code on Eigen; without this, nvcc compiles Eigen's functions as
// __host__ __device__ and warns (an error under SEQBENCH_WERROR) for each constexpr std call.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "kernels/dropout.h"
#include "kernels/dropout_mask.h"
#include "reference/dropout.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using kernels::DropoutConfig;
using namespace check_util;

constexpr float kBenchP = 0.1f;  // the Transformer default
constexpr std::uint64_t kBenchSeed = 20240917;
constexpr std::uint64_t kBenchOffset = 3;

// ---------------------------------------------------------------------------------------------
// Experiments.

template <class T>
struct BenchState {
  DeviceBuffer<T> in, out;
  DeviceBuffer<T> in_place;  // backward only: fused_regen_in_place's dy, which each call turns into its dx
  DeviceBuffer<std::uint8_t> mask_u8;
  DeviceBuffer<std::uint32_t> mask_bits;
  explicit BenchState(std::size_t n)
      : in(random_values<T>(n, kBenchSeed + n, -1.0f, 1.0f)),
        out(n),
        mask_u8(n),
        mask_bits(kernels::dropout_mask_bytes(n) / 4) {}
};

template <class T>
ExperimentSpec dropout_experiment(std::size_t n, bool backward) {
  const std::string dtype = DTypeTraits<T>::name;
  ExperimentSpec e;
  e.name = std::string(backward ? "dropout_bwd/" : "dropout_fwd/") + dtype + "/elements=" + std::to_string(n);
  e.params = {{"elements", n},
              {"dtype", dtype},
              {"p", std::round(kBenchP * 1e6) / 1e6},
              {"direction", backward ? "bwd" : "fwd"},
              // Kept for backward: unfused `elements` bytes (uint8), fused_bitmask this, fused_regen 0.
              {"bitmask_bytes", kernels::dropout_mask_bytes(n)}};
  e.baseline = "unfused";
  const double bytes = 2.0 * static_cast<double>(n) * sizeof(T);  // x read + y written (dy, dx)
  e.variants = {{"unfused", bytes, 0}, {"fused_bitmask", bytes, 0}, {"fused_regen", bytes, 0}};
  // Backward also times fused_regen_in_place (dx == dy), what the attention backward runs: the
  // same bytes. Its buffer starts as dy and holds each call's dx afterwards (values drift across
  // calls; the kernel's time does not depend on them).
  if (backward) e.variants.push_back({"fused_regen_in_place", bytes, 0});
  e.dump_variant = "fused_bitmask";
  e.prepare = [n, backward] {
    auto s = std::make_shared<BenchState<T>>(n);
    const DropoutConfig config{kBenchP, kBenchSeed, kBenchOffset};
    const std::size_t mask_bytes = kernels::dropout_mask_bytes(n);
    PreparedExperiment p;
    if (!backward) {
      p.variants.push_back([s, n, config](cudaStream_t st) {
        kernels::launch_dropout_mask_u8(s->mask_u8.data(), n, config, st);
        kernels::launch_dropout_apply_u8(s->out.data(), s->in.data(), s->mask_u8.data(), n, config.p, st);
      });
      p.variants.push_back([s, n, config, mask_bytes](cudaStream_t st) {
        kernels::launch_dropout_fwd(s->out.data(), s->in.data(), n, config, s->mask_bits.data(), mask_bytes,
                                    st);
      });
      p.variants.push_back([s, n, config](cudaStream_t st) {
        kernels::launch_dropout_fwd(s->out.data(), s->in.data(), n, config, nullptr, 0, st);
      });
    } else {
      // The saved masks the backward variants read, made once by the forwards.
      kernels::launch_dropout_mask_u8(s->mask_u8.data(), n, config, nullptr);
      kernels::launch_dropout_fwd(s->out.data(), s->in.data(), n, config, s->mask_bits.data(), mask_bytes,
                                  nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      p.variants.push_back([s, n, config](cudaStream_t st) {
        kernels::launch_dropout_apply_u8(s->out.data(), s->in.data(), s->mask_u8.data(), n, config.p, st);
      });
      p.variants.push_back([s, n, config, mask_bytes](cudaStream_t st) {
        kernels::launch_dropout_bwd(s->out.data(), s->in.data(), n, config.p, s->mask_bits.data(), mask_bytes,
                                    st);
      });
      p.variants.push_back([s, n, config](cudaStream_t st) {
        kernels::launch_dropout_bwd_regenerate(s->out.data(), s->in.data(), n, config, st);
      });
      s->in_place = DeviceBuffer<T>(n);
      SEQBENCH_CUDA_CHECK(
          cudaMemcpy(s->in_place.data(), s->in.data(), n * sizeof(T), cudaMemcpyDeviceToDevice));
      p.variants.push_back([s, n, config](cudaStream_t st) {
        kernels::launch_dropout_bwd_regenerate(s->in_place.data(), s->in_place.data(), n, config, st);
      });
    }
    // For `seqbench dump`: the input, the keep mask the fused_bitmask variant used (its own packed
    // mask, written by the forward variant or by prepare's forward for backward, unpacked to one
    // byte per element: torch cannot redraw seqbench's Philox stream) and the output.
    p.dump = [s, n, backward] {
      const std::vector<std::int64_t> shape = {static_cast<std::int64_t>(n)};
      const std::vector<std::uint32_t> words = s->mask_bits.copy_to_host();
      std::vector<std::uint8_t> packed(words.size() * sizeof(std::uint32_t));
      if (!packed.empty()) std::memcpy(packed.data(), words.data(), packed.size());
      std::vector<DumpArray> a;
      a.push_back(dump_array(backward ? "dy" : "x", "input", s->in, shape));
      a.push_back(dump_host_array("keep", "input", unpack_keep_mask(packed, n), shape));
      a.push_back(dump_array(backward ? "dx" : "y", "output", s->out, shape));
      return a;
    };
    p.state = s;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Checks.

// Tolerance of one dropout output y = x·keep/(1-p) (fwd) or dx = dy·keep/(1-p) (bwd), relative
// to the exact value: the host's float scale 1/(1-p) carries two roundings (1-p, then the
// division), the kernel's multiply one more, all of fp32 (u32 each, 3·u32 with a u32 of slack:
// 4·u32), and the store to T one rounding of T (u_T, plus η_T = underflow_error(T) absolute for
// results among T's subnormals). Inputs are T values, exact in double. Dropped elements must be
// exactly 0.
double dropout_bound(double want, DType dtype) {
  if (want == 0.0) return 0.0;
  return (unit_roundoff(dtype) + 4.0 * unit_roundoff(DType::f32)) * std::fabs(want) + underflow_error(dtype);
}

const char* kDropoutRule =
    "per element |got-want| <= (u_T + 4 u_f32)|want| + eta_T: u_T for the store to T, 2 u_f32 for the host's "
    "float scale 1/(1-p), 1 for the multiply, 1 of slack, eta_T = half T's smallest subnormal; dropped "
    "elements exactly 0";

struct DropoutCase {
  std::size_t n;
  float p;
  std::uint64_t seed, offset;
  std::size_t in_offset, out_offset, mask_byte_offset;
  std::string describe() const {
    std::ostringstream os;
    os << "n=" << n << " p=" << p << " seed=" << seed << " offset=" << offset << " in_off=" << in_offset
       << " out_off=" << out_offset << " u8mask_off=" << mask_byte_offset;
    return os.str();
  }
};

std::vector<DropoutCase> dropout_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> sizes = {1,  2,  3,  4,   5,   7,   8,    9,    15,   16,   17,
                                    31, 32, 33, 127, 128, 129, 1000, 1023, 1024, 4097, 65536 + 3};
  for (int i = 0; i < 40; ++i) {
    const int bucket = static_cast<int>(rng() % 5);
    const std::size_t limit = bucket < 2 ? 300 : bucket < 4 ? 100000 : 1200000;
    sizes.push_back(1 + rng() % limit);
  }
  const float probabilities[] = {0.1f, 0.5f, 0.0f, 0.9f, 1.0f, 0.25f, 0.75f};
  std::vector<DropoutCase> cases;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    DropoutCase c;
    c.n = sizes[i];
    c.p = i % 8 == 7 ? static_cast<float>(rng() % 1000) / 1000.0f : probabilities[i % 7];
    c.seed = rng();
    c.offset = rng() % 1000;
    // Half the cases aligned (the Packed<T> path), the rest at random element offsets.
    const bool aligned = rng() % 2 == 0;
    c.in_offset = aligned ? 0 : rng() % 9;
    c.out_offset = aligned ? 0 : rng() % 9;
    c.mask_byte_offset = aligned ? 0 : rng() % 8;
    cases.push_back(c);
  }
  return cases;
}

template <class T>
std::vector<CheckResult> dropout_checks_for(std::uint64_t seed) {
  const DType dtype = DTypeTraits<T>::dtype;
  const std::string suffix = std::string("/") + DTypeTraits<T>::name;
  const std::string prefix = "operators/dropout/";
  Tally fwd(prefix + "fwd" + suffix, kDropoutRule);
  Tally mask_bits(prefix + "fwd_mask_bits" + suffix,
                  "bitwise: the forward's packed mask equals reference make_dropout_mask packed on the host "
                  "(padding bits 0, nothing past dropout_mask_bytes(n) written)");
  Tally bwd(prefix + "bwd_bitmask" + suffix, kDropoutRule);
  Tally regen(
      prefix + "bwd_regenerate" + suffix,
      std::string(kDropoutRule) +
          "; and bitwise equal to bwd_bitmask (the same mask), out of place and in place (dx == dy, as "
          "the attention backward runs it)");
  Tally mask_u8(prefix + "unfused_mask_u8" + suffix,
                "bitwise: uint8 mask equals reference make_dropout_mask");
  Tally apply(prefix + "unfused_apply_u8" + suffix,
              std::string(kDropoutRule) + "; and bitwise equal to the fused forward");

  for (const DropoutCase& c : dropout_cases(seed ^ static_cast<std::uint64_t>(dtype) * 0x9E3779B9ull)) {
    const std::string where = c.describe();
    const DropoutConfig config{c.p, c.seed, c.offset};
    const auto n = static_cast<ref::Index>(c.n);
    const ref::KeepMask keep = ref::make_dropout_mask(1, n, c.p, c.seed, c.offset);
    const std::vector<T> x = random_values<T>(c.n, c.seed + 1, -2.0f, 2.0f);
    const std::vector<T> dy = random_values<T>(c.n, c.seed + 2, -2.0f, 2.0f);
    const ref::Matrix want_y = ref::dropout_forward(to_matrix(x, 1, n), keep, c.p);
    const ref::Matrix want_dx = ref::dropout_backward(to_matrix(dy, 1, n), keep, c.p);

    // Forward with the bit-packed mask.
    Guarded<T> x_in(c.n, c.in_offset), dy_in(c.n, c.in_offset);
    x_in.upload(x);
    dy_in.upload(dy);
    Guarded<T> y(c.n, c.out_offset);
    const std::size_t mask_bytes = kernels::dropout_mask_bytes(c.n);
    Guarded<std::uint32_t> bits(mask_bytes / 4, 0);
    kernels::launch_dropout_fwd<T>(y.data(), x_in.data(), c.n, config, bits.data(), mask_bytes, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<T> got_y = y.download(fwd, where);
    for (std::size_t i = 0; i < c.n; ++i) {
      const double want = want_y(0, static_cast<ref::Index>(i));
      fwd.add(as_double(got_y[i]), want, dropout_bound(want, dtype), where, i);
    }
    const std::vector<std::uint32_t> got_words = bits.download(mask_bits, where);
    const std::vector<std::uint8_t> want_packed =
        kernels::dropout_detail::pack_dropout_mask(keep.data(), c.n);
    mask_bits.add_exact(std::memcmp(got_words.data(), want_packed.data(), mask_bytes) == 0, where,
                        "packed mask differs from the reference mask");

    // Backward from the packed mask, and by regeneration: the same bits.
    Guarded<T> dx(c.n, c.out_offset), dx_regen(c.n, c.out_offset);
    kernels::launch_dropout_bwd<T>(dx.data(), dy_in.data(), c.n, c.p, bits.data(), mask_bytes, nullptr);
    kernels::launch_dropout_bwd_regenerate<T>(dx_regen.data(), dy_in.data(), c.n, config, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<T> got_dx = dx.download(bwd, where);
    const std::vector<T> got_regen = dx_regen.download(regen, where);
    for (std::size_t i = 0; i < c.n; ++i) {
      const double want = want_dx(0, static_cast<ref::Index>(i));
      bwd.add(as_double(got_dx[i]), want, dropout_bound(want, dtype), where, i);
      regen.add(as_double(got_regen[i]), want, dropout_bound(want, dtype), where, i);
    }
    regen.add_exact(std::memcmp(got_dx.data(), got_regen.data(), c.n * sizeof(T)) == 0, where,
                    "regenerated backward differs bitwise from the bit-packed one");
    {
      Guarded<T> in_place(c.n, c.in_offset);
      in_place.upload(dy);
      kernels::launch_dropout_bwd_regenerate<T>(in_place.data(), in_place.data(), c.n, config, nullptr);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<T> got_in_place = in_place.download(regen, where);
      regen.add_exact(std::memcmp(got_in_place.data(), got_regen.data(), c.n * sizeof(T)) == 0, where,
                      "in-place regenerated backward (dx == dy) differs bitwise from the out-of-place one");
    }

    // The unfused baseline: a uint8 mask (at a byte offset), then a multiply.
    Guarded<std::uint8_t> u8(c.n, c.mask_byte_offset);
    Guarded<T> y_unfused(c.n, c.out_offset);
    kernels::launch_dropout_mask_u8(u8.data(), c.n, config, nullptr);
    kernels::launch_dropout_apply_u8<T>(y_unfused.data(), x_in.data(), u8.data(), c.n, c.p, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<std::uint8_t> got_u8 = u8.download(mask_u8, where);
    mask_u8.add_exact(std::memcmp(got_u8.data(), keep.data(), c.n) == 0, where,
                      "uint8 mask differs from reference");
    const std::vector<T> got_unfused = y_unfused.download(apply, where);
    for (std::size_t i = 0; i < c.n; ++i) {
      const double want = want_y(0, static_cast<ref::Index>(i));
      apply.add(as_double(got_unfused[i]), want, dropout_bound(want, dtype), where, i);
    }
    apply.add_exact(std::memcmp(got_unfused.data(), got_y.data(), c.n * sizeof(T)) == 0, where,
                    "unfused output differs bitwise from the fused one");
  }
  return {fwd.result(), mask_bits.result(), bwd.result(), regen.result(), mask_u8.result(), apply.result()};
}

std::size_t popcount_bytes(const std::vector<std::uint32_t>& words) {
  std::size_t count = 0;
  for (std::uint32_t w : words) {
    for (; w != 0; w &= w - 1) ++count;
  }
  return count;
}

// The keep rate of the GPU mask over n = 10^7 elements lies within 4σ of 1 - q, σ² = q(1-q)/n,
// q = dropout_drop_probability(p), p on the 2^-16 grid of the 16-bit draws (core/philox.h; a
// false alarm once in ~16000 runs for an ideal generator; the seed is fixed, so the outcome is
// reproducible).
std::vector<CheckResult> keep_rate_checks(std::uint64_t seed) {
  std::vector<CheckResult> results;
  const std::size_t n = 10'000'000;
  DeviceBuffer<float> x(n), y(n);
  x.fill_bytes(0x3F);  // 0x3F3F3F3F ≈ 0.747: any finite value
  DeviceBuffer<std::uint32_t> bits(kernels::dropout_mask_bytes(n) / 4);
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    const DropoutConfig config{p, seed, 11};
    kernels::launch_dropout_fwd<float>(y.data(), x.data(), n, config, bits.data(), bits.bytes(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const double kept = static_cast<double>(popcount_bytes(bits.copy_to_host())) / static_cast<double>(n);
    const double q = dropout_drop_probability(p);
    const double target = 1.0 - q;
    const double sigma = std::sqrt(q * (1.0 - q) / static_cast<double>(n));
    CheckResult r;
    std::ostringstream name;
    name << "operators/dropout/keep_rate/p=" << p;
    r.name = name.str();
    r.max_abs_err = std::fabs(kept - target);
    r.max_rel_err = r.max_abs_err / target;
    r.tolerance = 4.0 * sigma;
    r.passed = r.max_abs_err <= r.tolerance;
    std::ostringstream detail;
    detail << "kept fraction " << kept << " of n=" << n << " (seed " << seed << ", offset 11), target "
           << target << " = 1 - q, q = ceil(p 2^16)/2^16 = " << q << ", |diff| <= 4 sigma = 4 sqrt(q(1-q)/n)";
    r.detail = detail.str();
    results.push_back(r);
  }
  return results;
}

// Bitwise determinism: the same (seed, offset) twice gives identical outputs and masks; another
// offset or seed gives a different mask, differing in a fraction 2q(1-q) of the bits within 4σ
// (q = dropout_drop_probability(p)).
template <class T>
CheckResult determinism_check(std::uint64_t seed) {
  const std::size_t n = (std::size_t{1} << 20) + 3;
  const float p = 0.3f;
  const std::vector<T> host = random_values<T>(n, seed, -1.0f, 1.0f);
  DeviceBuffer<T> x(host), y1(n), y2(n);
  const std::size_t mask_bytes = kernels::dropout_mask_bytes(n);
  DeviceBuffer<std::uint32_t> m1(mask_bytes / 4), m2(mask_bytes / 4), m3(mask_bytes / 4), m4(mask_bytes / 4);
  y1.fill_bytes(0xFF);
  y2.fill_bytes(0x00);
  // Run 1 writes y1 and m1; run 2 (twice, over other contents) y2 and m2; then other streams.
  kernels::launch_dropout_fwd<T>(y1.data(), x.data(), n, {p, seed, 5}, m1.data(), mask_bytes, nullptr);
  kernels::launch_dropout_fwd<T>(y2.data(), x.data(), n, {p, seed, 5}, m2.data(), mask_bytes, nullptr);
  kernels::launch_dropout_fwd<T>(y2.data(), x.data(), n, {p, seed, 5}, m2.data(), mask_bytes, nullptr);
  DeviceBuffer<T> scratch(n);
  kernels::launch_dropout_fwd<T>(scratch.data(), x.data(), n, {p, seed, 6}, m3.data(), mask_bytes, nullptr);
  kernels::launch_dropout_fwd<T>(scratch.data(), x.data(), n, {p, seed + 1, 5}, m4.data(), mask_bytes,
                                 nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto a = m1.copy_to_host(), b = m2.copy_to_host(), c = m3.copy_to_host(), d = m4.copy_to_host();
  const auto ya = y1.copy_to_host(), yb = y2.copy_to_host();
  const bool same = a == b && std::memcmp(ya.data(), yb.data(), n * sizeof(T)) == 0;
  std::vector<std::uint32_t> diff_offset(a.size()), diff_seed(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff_offset[i] = a[i] ^ c[i];
    diff_seed[i] = a[i] ^ d[i];
  }
  const double q = dropout_drop_probability(p);  // p on the 2^-16 grid
  const double expect = 2.0 * q * (1.0 - q);
  const double sigma = std::sqrt(expect * (1.0 - expect) / static_cast<double>(n));
  const double f_offset = static_cast<double>(popcount_bytes(diff_offset)) / static_cast<double>(n);
  const double f_seed = static_cast<double>(popcount_bytes(diff_seed)) / static_cast<double>(n);
  CheckResult r;
  r.name = std::string("operators/dropout/determinism/") + DTypeTraits<T>::name;
  r.max_abs_err = std::max(std::fabs(f_offset - expect), std::fabs(f_seed - expect));
  r.tolerance = 4.0 * sigma;
  r.passed = same && r.max_abs_err <= r.tolerance;
  std::ostringstream detail;
  detail << "n=" << n << " p=" << p << " seed=" << seed
         << ": repeat bitwise identical (y and mask): " << (same ? "yes" : "NO")
         << "; fraction of mask bits differing for offset+1: " << f_offset << ", for seed+1: " << f_seed
         << ", expected 2q(1-q) = " << expect << " (q = ceil(p 2^16)/2^16) within 4 sigma";
  r.detail = detail.str();
  return r;
}

}  // namespace

void add_dropout_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  // Fig. 17's range, 0.1M .. 100M elements, plus 2^24 (the issue's "16M and above" target).
  const std::vector<std::size_t> sizes = shapes<std::size_t>(
      options, {100'000}, {1'000'000}, {100'000, 1'000'000, 10'000'000, std::size_t{1} << 24, 100'000'000});
  for (const bool backward : {false, true}) {
    for (const std::size_t n : sizes) {
      suite.experiments.push_back(dropout_experiment<float>(n, backward));
      suite.experiments.push_back(dropout_experiment<__nv_bfloat16>(n, backward));
    }
  }
}

std::vector<CheckResult> dropout_gpu_checks(std::uint64_t seed) {
  std::vector<CheckResult> all = checks_for_all_dtypes([&](auto tag) {
    using T = decltype(tag);
    auto results = dropout_checks_for<T>(seed);
    results.push_back(determinism_check<T>(seed));
    return results;
  });
  auto rates = keep_rate_checks(seed);
  all.insert(all.end(), rates.begin(), rates.end());
  return all;
}

}  // namespace seqbench::operators
