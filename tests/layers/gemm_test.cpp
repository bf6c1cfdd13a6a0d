// layers/gemm on the GPU against a double-precision product on the host: random shapes (odd ones,
// misaligned pointers, both ops), all three dtypes, every epilogue, strided batches and in-place
// accumulation; outputs poisoned (0xFF = NaN) before every run, and the elements after each
// output checked untouched.
//
// Tolerances (inputs are T values, exact in double; u_T = unit_roundoff(T), v = 2^-24 for fp32,
// η_T = half T's smallest subnormal; s = Σ_k |a_ik b_kj|):
//   product      |Δz| <= 2 (k + 2) v s          fp32 accumulation over k terms (γ_k), doubled
//                                               because tensor cores may truncate rather than round
//                                               their fp32 sums (Fasi et al., PeerJ CS 2021)
//   bias         + v (|z| + |bias|)             one fp32 add
//   activation   + |act'| Δ + 64 v (|z| + 1)    relu is exact; for GELU an evaluation allowance of
//                                               64 v: cuBLASLt's tanh is not documented, and this
//                                               is an assumption to confirm on the first GPU run
//   output       + u_T |d| + η_T                one rounding to T
//   bias grads   Σ_i (bound_i + u_T |d_i|) + m v Σ_i |d_i| + u_T |g| + η_T   (the sum over rows may
//                                               read rounded or unrounded d; either is inside)
#include "layers/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "reference/bias_act_dropout.h"
#include "tests/common/gpu_test.h"

namespace seqbench::layers {
namespace {

constexpr double kV = 1.0 / 16777216.0;
constexpr std::size_t kGuard = 16;

double eta(DType dtype) {
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

// A device allocation of n elements at element offset `offset` (misaligning it when odd), with
// kGuard poisoned elements after it.
template <class T>
struct Region {
  DeviceBuffer<T> buffer;
  std::size_t offset, n;
  Region(std::size_t count, std::size_t off) : buffer(count + off + kGuard), offset(off), n(count) {
    buffer.fill_bytes(0xFF);
  }
  T* data() { return buffer.data() + offset; }
  void upload(const std::vector<T>& host) {
    SEQBENCH_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // The region, and whether the guard after it kept its poison.
  std::vector<T> download(bool& guard_ok) const {
    const std::vector<T> all = buffer.copy_to_host();
    const auto* bytes = reinterpret_cast<const unsigned char*>(all.data() + offset + n);
    guard_ok = std::all_of(bytes, bytes + kGuard * sizeof(T), [](unsigned char b) { return b == 0xFF; });
    return {all.begin() + static_cast<std::ptrdiff_t>(offset),
            all.begin() + static_cast<std::ptrdiff_t>(offset + n)};
  }
};

template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = from_float<T>(dist(rng));
  return v;
}

template <class T>
double at(const std::vector<T>& v, std::int64_t i) {
  return static_cast<double>(to_float(v[static_cast<std::size_t>(i)]));
}

// The start of run_case's answer for a problem cuBLASLt may have no algorithm for
// (Gemm::has_algorithm false); cuBLASLt's answer follows in parentheses.
const std::string kUnsupported = "unsupported";

struct Case {
  GemmOp op_a = GemmOp::none, op_b = GemmOp::none;
  std::int64_t m = 1, n = 1, k = 1, pad = 0, batch = 1;
  GemmEpilogue epilogue = GemmEpilogue::none;
  float beta = 0.0f;
  std::size_t misalign = 0;
  std::string describe() const {
    std::ostringstream os;
    os << "m=" << m << " n=" << n << " k=" << k << " op_a=" << (op_a == GemmOp::none ? "N" : "T")
       << " op_b=" << (op_b == GemmOp::none ? "N" : "T") << " pad=" << pad << " batch=" << batch
       << " epilogue=" << gemm_epilogue_name(epilogue) << " beta=" << beta << " misalign=" << misalign;
    return os.str();
  }
};

// Runs one case and returns a failure description, or "" when every element is within bounds.
template <class T>
std::string run_case(Gemm& gemm, const Case& c, std::mt19937_64& rng) {
  const DType dtype = DTypeTraits<T>::dtype;
  const double u = unit_roundoff(dtype), e = eta(dtype);
  GemmProblem p;
  p.op_a = c.op_a;
  p.op_b = c.op_b;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.lda = (c.op_a == GemmOp::none ? c.k : c.m) + c.pad;
  p.ldb = (c.op_b == GemmOp::none ? c.n : c.k) + c.pad;
  p.ldc = c.n + c.pad;
  p.batch_count = c.batch;
  p.stride_a = c.batch > 1 ? gemm_a_extent(p) + 3 : 0;
  p.stride_b = c.batch > 1 ? gemm_b_extent(p) + 5 : 0;
  p.stride_c = c.batch > 1 ? gemm_d_extent(p) + 7 : 0;
  p.epilogue = c.epilogue;
  p.beta = c.beta;
  const auto total = [&](std::int64_t one, std::int64_t stride) {
    return static_cast<std::size_t>((c.batch - 1) * stride + one);
  };
  const std::size_t na = total(gemm_a_extent(p), p.stride_a), nb = total(gemm_b_extent(p), p.stride_b),
                    nd = total(gemm_d_extent(p), p.stride_c);
  const bool grad = c.epilogue == GemmEpilogue::dgelu_tanh_bgrad || c.epilogue == GemmEpilogue::bgrad_a;
  const bool uses_aux =
      c.epilogue == GemmEpilogue::bias_gelu_tanh_aux || c.epilogue == GemmEpilogue::dgelu_tanh_bgrad;
  const std::int64_t bias_len = c.epilogue == GemmEpilogue::bgrad_a ? c.m : c.n;
  p.aux_ld = (c.n + 7) / 8 * 8 + (c.pad > 0 ? 8 : 0);

  const std::vector<T> ha = random_values<T>(na, rng, -1, 1), hb = random_values<T>(nb, rng, -1, 1);
  const std::vector<T> hc = random_values<T>(nd, rng, -1, 1);
  const std::vector<T> hbias = random_values<T>(static_cast<std::size_t>(bias_len), rng, -1, 1);
  const std::size_t naux = static_cast<std::size_t>(c.m * p.aux_ld);
  const std::vector<T> haux_in = random_values<T>(naux, rng, -3, 3);
  Region<T> a(na, c.misalign), b(nb, c.misalign), d(nd, c.misalign),
      bias(static_cast<std::size_t>(bias_len), 0), aux(naux, 0);
  a.upload(ha);
  b.upload(hb);
  if (c.beta != 0.0f) d.upload(hc);  // in-place accumulation: C is D
  if (c.epilogue != GemmEpilogue::none && !grad) bias.upload(hbias);
  if (c.epilogue == GemmEpilogue::dgelu_tanh_bgrad) aux.upload(haux_in);
  p.a = a.data();
  p.b = b.data();
  p.c = c.beta != 0.0f ? d.data() : nullptr;
  p.d = d.data();
  p.bias = c.epilogue != GemmEpilogue::none ? bias.data() : nullptr;
  p.aux = uses_aux ? aux.data() : nullptr;
  if (!gemm.has_algorithm(p, dtype)) {
    // A plain product must always have one (the layers' GEMMs are plain), and so must a bias add
    // unless an operand has a single row or column: PyTorch keeps such bias adds off cuBLASLt
    // because its heuristic answers CUBLAS_STATUS_INVALID_VALUE for them (aten Blas.cpp), which
    // Gemm reports as "no algorithm" (layers/gemm_heuristic.h). Any other epilogue may have none
    // for some dtypes, alignments and sizes: the layers then use the separate kernels (they use
    // none of the epilogues today). The run prints every case that had none, with cuBLASLt's
    // answer, so the support matrix on the device is on record.
    const bool degenerate = c.m == 1 || c.n == 1 || c.k == 1;
    if (c.epilogue == GemmEpilogue::none || (c.epilogue == GemmEpilogue::bias && !degenerate))
      return "cuBLASLt has no algorithm for a plain product or bias add (" + gemm.describe_plan(p, dtype) +
             ")";
    return kUnsupported + " (" + gemm.describe_plan(p, dtype) + ")";
  }
  gemm.run<T>(p, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  bool guard_d = true, guard_bias = true, guard_aux = true;
  const std::vector<T> got = d.download(guard_d);
  const std::vector<T> got_bias =
      c.epilogue != GemmEpilogue::none ? bias.download(guard_bias) : std::vector<T>{};
  const std::vector<T> got_aux = uses_aux ? aux.download(guard_aux) : std::vector<T>{};
  if (!guard_d || !guard_bias || !guard_aux) return "wrote past the end of an output";

  std::ostringstream fail;
  const auto check = [&](double g, double want, double bound, const char* what, std::int64_t index) {
    if (std::fabs(g - want) <= bound) return true;
    fail << what << " element " << index << ": got " << g << ", want " << want << ", bound " << bound;
    return false;
  };
  std::vector<double> grad_sum(static_cast<std::size_t>(bias_len), 0.0), grad_bound(grad_sum),
      grad_abs(grad_sum);
  for (std::int64_t bt = 0; bt < c.batch; ++bt) {
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        double z = 0.0, s = 0.0;
        for (std::int64_t q = 0; q < c.k; ++q) {
          const std::int64_t ia = bt * p.stride_a + (c.op_a == GemmOp::none ? i * p.lda + q : q * p.lda + i);
          const std::int64_t ib = bt * p.stride_b + (c.op_b == GemmOp::none ? q * p.ldb + j : j * p.ldb + q);
          z += at(ha, ia) * at(hb, ib);
          s += std::fabs(at(ha, ia) * at(hb, ib));
        }
        const std::int64_t id = bt * p.stride_c + i * p.ldc + j;
        double bound = 2.0 * static_cast<double>(c.k + 2) * kV * s;
        if (c.beta != 0.0f) {
          z += c.beta * at(hc, id);
          bound += 2 * kV * (std::fabs(z) + std::fabs(at(hc, id)));
        }
        double want = z;
        if (c.epilogue == GemmEpilogue::bias || c.epilogue == GemmEpilogue::bias_relu ||
            c.epilogue == GemmEpilogue::bias_gelu_tanh || c.epilogue == GemmEpilogue::bias_gelu_tanh_aux) {
          const double bj = at(hbias, j);
          bound += kV * (std::fabs(z) + std::fabs(bj));
          z += bj;
          want = z;
          if (c.epilogue == GemmEpilogue::bias_gelu_tanh_aux) {
            const double pre_bound = bound + u * std::fabs(z) + e;
            if (!check(at(got_aux, i * p.aux_ld + j), z, pre_bound, "aux", i * p.aux_ld + j))
              return fail.str();
          }
          if (c.epilogue == GemmEpilogue::bias_relu) {
            want = ref::activate(z, ref::Activation::relu);
            bound = z > 0 ? bound : (z > -bound ? bound : 0.0);
          } else if (c.epilogue != GemmEpilogue::bias) {
            want = ref::activate(z, ref::Activation::gelu_tanh);
            bound = std::fabs(ref::activation_derivative(z, ref::Activation::gelu_tanh)) * bound +
                    64 * kV * (std::fabs(z) + 1.0);
          }
        } else if (c.epilogue == GemmEpilogue::dgelu_tanh_bgrad) {
          const double pre = at(haux_in, i * p.aux_ld + j);
          const double slope = ref::activation_derivative(pre, ref::Activation::gelu_tanh);
          want = slope * z;
          bound = std::fabs(slope) * bound + std::fabs(z) * 64 * kV * (std::fabs(pre) + 1.0);
        }
        bound += u * std::fabs(want) + e;
        if (!check(at(got, id), want, bound, "d", id)) {
          // The activation's input, and how far an evaluation with tanh.approx.f32 (relative error
          // 2^-10.987, PTX ISA) could be off there: the first GPU run tells which tanh cuBLASLt uses.
          if (c.epilogue == GemmEpilogue::bias_gelu_tanh || c.epilogue == GemmEpilogue::bias_gelu_tanh_aux) {
            const double u_tanh = std::sqrt(2.0 / std::numbers::pi) * (z + 0.044715 * z * z * z);
            fail << " (GELU input z = " << z << "; a tanh.approx.f32 evaluation could be off by up to "
                 << 0.5 * std::fabs(z) * std::fabs(std::tanh(u_tanh)) * std::exp2(-10.987) << ")";
          }
          return fail.str();
        }
        if (c.epilogue == GemmEpilogue::dgelu_tanh_bgrad) {
          grad_sum[static_cast<std::size_t>(j)] += want;
          grad_bound[static_cast<std::size_t>(j)] += bound + u * std::fabs(want);
          grad_abs[static_cast<std::size_t>(j)] += std::fabs(want);
        }
      }
    }
  }
  if (c.epilogue == GemmEpilogue::bgrad_a) {  // bias[i] = Σ_q op(A)[i, q]
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t q = 0; q < c.k; ++q) {
        const double v = at(ha, c.op_a == GemmOp::none ? i * p.lda + q : q * p.lda + i);
        grad_sum[static_cast<std::size_t>(i)] += v;
        grad_abs[static_cast<std::size_t>(i)] += std::fabs(v);
      }
    }
  }
  if (grad) {
    const double rows = static_cast<double>(c.epilogue == GemmEpilogue::bgrad_a ? c.k : c.m);
    for (std::int64_t j = 0; j < bias_len; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      const double bound = grad_bound[jj] + rows * kV * grad_abs[jj] + u * std::fabs(grad_sum[jj]) + e;
      if (!check(at(got_bias, j), grad_sum[jj], bound, "bias gradient", j)) return fail.str();
    }
  }
  return "";
}

std::vector<Case> cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Case> all;
  const GemmEpilogue epilogues[] = {GemmEpilogue::none,
                                    GemmEpilogue::bias,
                                    GemmEpilogue::bias_relu,
                                    GemmEpilogue::bias_gelu_tanh,
                                    GemmEpilogue::bias_gelu_tanh_aux,
                                    GemmEpilogue::dgelu_tanh_bgrad,
                                    GemmEpilogue::bgrad_a};
  const std::int64_t odd[] = {1, 3, 7, 64, 127, 129, 256, 1000};
  for (int i = 0; i < 56; ++i) {
    Case c;
    c.op_a = rng() % 2 ? GemmOp::transpose : GemmOp::none;
    c.op_b = rng() % 2 ? GemmOp::transpose : GemmOp::none;
    c.m = rng() % 3 == 0 ? odd[rng() % 8] : 1 + static_cast<std::int64_t>(rng() % 300);
    c.n = rng() % 3 == 0 ? odd[rng() % 8] : 1 + static_cast<std::int64_t>(rng() % 300);
    c.k = rng() % 3 == 0 ? odd[rng() % 8] : 1 + static_cast<std::int64_t>(rng() % 300);
    c.pad = rng() % 4 == 0 ? static_cast<std::int64_t>(rng() % 9) : 0;
    c.epilogue = epilogues[i % 7];
    c.batch = c.epilogue == GemmEpilogue::none || c.epilogue == GemmEpilogue::bias
                  ? 1 + static_cast<std::int64_t>(rng() % 5)
                  : 1;
    c.beta = c.epilogue == GemmEpilogue::none && rng() % 3 == 0 ? 1.0f : 0.0f;
    c.misalign = rng() % 4 == 0 ? 1 : 0;
    all.push_back(c);
  }
  // The layers' products at aligned shapes (multiples of 8, no padding, no offset): forward
  // x·Wᵀ (N, T), input gradient dy·W (N, N), weight gradient dyᵀ·x (T, N), each epilogue: where
  // cuBLASLt has an algorithm, its result is checked like every other case.
  for (const GemmEpilogue e : epilogues) {
    Case c;
    c.m = 64;
    c.n = 96;
    c.k = 40;
    c.epilogue = e;
    // dgelu_tanh_bgrad goes with the input gradient (N, N), bgrad_a with the weight gradient
    // (T, N), every other epilogue with the forward (N, T).
    const bool weight_grad = e == GemmEpilogue::bgrad_a;
    c.op_a = weight_grad ? GemmOp::transpose : GemmOp::none;
    c.op_b = weight_grad || e == GemmEpilogue::dgelu_tanh_bgrad ? GemmOp::none : GemmOp::transpose;
    all.push_back(c);
  }
  return all;
}

template <class T>
void expect_all_cases_pass(std::uint64_t seed) {
  DeviceBuffer<unsigned char> workspace(kGemmWorkspaceBytes);
  Gemm gemm(workspace.data(), workspace.size());
  std::mt19937_64 rng(seed);
  int run = 0, unsupported = 0, plain = 0;
  for (const Case& c : cases(seed)) {
    const std::string failure = run_case<T>(gemm, c, rng);
    if (failure.rfind(kUnsupported, 0) == 0) {
      ++unsupported;
      std::cout << "[ info ] " << DTypeTraits<T>::name << " " << c.describe() << ": " << failure << "\n";
      continue;
    }
    EXPECT_EQ(failure, "") << DTypeTraits<T>::name << " " << c.describe();
    ++run;
    if (c.epilogue == GemmEpilogue::none || c.epilogue == GemmEpilogue::bias) ++plain;
  }
  // The plain products and bias adds (a third of the cases, odd shapes and alignments included)
  // always run, bias adds on a single row or column aside: run_case fails them when cuBLASLt has
  // no algorithm. Which epilogue cases have one
  // depends on cuBLASLt's kernels for each alignment; no count of them is required, the list above
  // and the gemm_epilogue suite put the device's support on record.
  EXPECT_GT(plain, 0);
  std::cout << "[ info ] " << DTypeTraits<T>::name << ": " << run << " cases checked (" << plain
            << " plain or bias), " << unsupported << " cases without a cuBLASLt algorithm\n";
}

TEST(GemmGpu, MatchesTheDoubleProductF32) {
  SEQBENCH_REQUIRE_GPU();
  expect_all_cases_pass<float>(11);
}

TEST(GemmGpu, MatchesTheDoubleProductF16) {
  SEQBENCH_REQUIRE_GPU();
  expect_all_cases_pass<__half>(12);
}

TEST(GemmGpu, MatchesTheDoubleProductBf16) {
  SEQBENCH_REQUIRE_GPU();
  expect_all_cases_pass<__nv_bfloat16>(13);
}

// Steady state: the second call of a problem reuses its plan (no new descriptors, no heuristic).
TEST(GemmGpu, PlansAreMadeOncePerProblem) {
  SEQBENCH_REQUIRE_GPU();
  DeviceBuffer<unsigned char> workspace(kGemmWorkspaceBytes);
  Gemm gemm(workspace.data(), workspace.size());
  DeviceBuffer<__nv_bfloat16> a(64 * 32), b(48 * 32), d(64 * 48), bias(48);
  for (auto* buf : {&a, &b, &bias}) buf->fill_bytes(0);
  GemmProblem p;
  p.op_b = GemmOp::transpose;
  p.m = 64;
  p.n = 48;
  p.k = 32;
  p.a = a.data();
  p.lda = 32;
  p.b = b.data();
  p.ldb = 32;
  p.d = d.data();
  p.ldc = 48;
  p.epilogue = GemmEpilogue::bias;
  p.bias = bias.data();
  for (int i = 0; i < 3; ++i) gemm.run<__nv_bfloat16>(p, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(gemm.plans(), 1u);
  EXPECT_NE(gemm.describe_plan(p, DType::bf16), "");
}

}  // namespace
}  // namespace seqbench::layers
