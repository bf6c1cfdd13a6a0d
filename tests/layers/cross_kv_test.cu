// CrossAttentionKV on the GPU: a stack of 2 and 3 DecoderLayers in external-K/V mode fed by one
// CrossAttentionKV (one K/V GEMM for all layers, one d_encoder_out GEMM after layer 0's backward)
// against
//   (1) the double reference: ref::decoder_layer_forward layer by layer (layer i's y is layer
//       i + 1's x), then ref::decoder_layer_backward from the top layer down (layer i's dx is layer
//       i - 1's dy), d_encoder_out = Σ_i (layer i's d_encoder_out);
//   (2) the same stack of DecoderLayers in the default mode (each layer its own K/V GEMM and its
//       own d_encoder_out, summed here in double);
//   (3) double arithmetic on the very T values that CrossAttentionKV's own operations read, each
//       operation on its own.
// In f32, f16 and bf16, pre- and post-LN, dropout on and off, padded sources and targets, S != L,
// hidden not a multiple of 8 (scalar paths) and a multiple (vector paths). Compared: y, dx,
// d_encoder_out, dW_kv_all and db_kv_all (= the per-layer cross_kv gradients stacked), and every
// other parameter gradient of every layer. Outputs and every object's planned block are poisoned
// (0xFF, NaN) before each step. A second step of the batched stack must repeat bitwise and
// allocate nothing.
//
// (1) Tolerances against the reference: the model of tests/layers/layer_check.h (normwise per
// tensor, max|got - ref| <= n · (G · u_T + 2 (k + 2) · 2^-24) · max|ref| + η_T, G = 4).
// Depth: one decoder layer is n = 26 roundings forward and 52 backward
// (tests/layers/decoder_layer_test.cu). A stack of `layers` layers chains them: the longest
// forward path from x to y crosses every layer, n = 26·layers; the backward reads the whole
// forward and adds as many, n = 52·layers (layer 0's gradients and dx are the deepest; d_encoder_out
// sums every layer's contribution inside one GEMM, which is one more accumulation over k =
// layers·2H, included in k). k is the longest inner dimension: 3H, ffn, layers·2H, the token rows
// B·L and B·S of the weight gradients, L and S. In bf16 (and f16's deepest chains) that model
// reaches tol >= 1 and catches only NaN and unwritten elements (expect_close says so when it
// happens); (2) and (3) are the checks that do not grow with depth.
// (2) Mode against mode, in f16 and bf16: both stacks run the same kernels on the same draws and
// differ only in the K/V GEMM's shape (n = 2H per layer against n = layers·2H) and in where
// d_encoder_out is summed (in the GEMM's fp32 accumulation against a sum here of per-layer T
// values), so the batched stack's 2-norm error against the reference must be no worse than
// layer_check's expect_no_less_accurate allows: ||batched - ref||_2 <= 2 ||per-layer - ref||_2 +
// u_T ||ref||_2 + η_T √n, per tensor. (In f32, (1)'s bounds are below 0.03 and catch a wrong
// element themselves.) The test also reports which tensors came out bitwise equal (the two K/V
// GEMMs compute the same dot products over k = H, but cuBLASLt may pick different kernels for the
// two shapes, so bits are not promised).
// (3) The operations CrossAttentionKV adds to a decoder layer, from its first step's own inputs
// and outputs (the heads read back after forward(), d_kv_all and the gradient heads after
// backward(); K = an accumulation's length):
//   split    kv_heads(l)[p, b, n, s, j] = fl_T(fl32(g_T + b_all[c])), g_T = fl_T(Σ_k enc[r, k] W[c, k])
//            with r = b·S + s and c = 2H·l + p·H + n·d + j;
//   merge    d_kv_all[r, c] = d_kv_heads(l)[p, b, n, s, j], bitwise (a permutation);
//   dx GEMM  d_encoder_out = d_kv_all · W_kv_all (K = layers·2H);
//   dW GEMM  dW_kv_all = d_kv_allᵀ · encoder_out (K = B·S);
//   bias     db_kv_all[c] = Σ_r d_kv_all[r, c] (K = B·S).
// Rounding-error analysis, componentwise, with u_T the unit roundoff of T, u_32 = 2^-24 (the
// kernels' fp32 add), u_a = 2^-23 for the GEMMs' and the column sum's fp32 accumulation (twice
// u_32: tensor cores may truncate rather than round, Fasi et al. 2021), γ_K = K u_a / (1 - K u_a),
// a = Σ_k |x_k| |y_k| (so |fl32(x · y) - x · y| <= γ_{K+1} a for any summation order, split-K
// included), η_T = underflow_error(T) per rounding to T:
//   a T result R of an fp32 accumulation r:  |R - exact| <= u_T (|R| + η_T) / (1 - u_T) + η_T + γ_{K+1} a
//   the split: |h - (ĝ + b)| <= (u_T + u_32)(1 + 2 u_T)(1 + 2 u_32)(|h| + η_T) + u_T |ĝ|
//              + (1 + u_T) γ_{H+1} a + 2 η_T   (ĝ the exact product)
// These bounds are a few u_T of each element whatever the stack's depth, so they catch in every
// dtype a wrong layer offset, a wrong ld or stride, K and V swapped, or a layer missing from the
// d_encoder_out sum.
// G is a modelling assumption; the observed ratios are printed for the GPU session; a failure is
// to be analysed, never answered by raising G.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/cross_kv.h"
#include "layers/decoder_layer.h"
#include "reference/transformer_layer.h"
#include "suites/operators/check_util.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpu_test.h"
#include "tests/layers/layer_cases.h"
#include "tests/layers/layer_check.h"
#include "tests/layers/layer_params.h"

namespace seqbench::layers {
namespace {

using namespace layer_check;
using namespace layer_test;
using operators::check_util::random_values;
using operators::check_util::same_bits;
using operators::check_util::to_matrix;

constexpr std::uint64_t kSeed = 20241123;
constexpr int kLayerForwardRoundings = 26;
constexpr int kLayerBackwardRoundings = 52;
constexpr std::size_t kCrossKvWeight = 10, kCrossKvBias = 11;  // in decoder_layer_parameter_shapes
constexpr double kFp32Roundoff = 1.0 / 16777216.0;             // u_32 = 2^-24: one fp32 add
constexpr double kAccumulationRoundoff = 1.0 / 8388608.0;      // u_a = 2^-23: a GEMM's or sum's fp32 step

struct Case {
  int layers, batch, len, src_len, hidden, heads, ffn;
  bool pre;
  Activation activation;
  bool dropout;
  std::vector<int> target_lengths, source_lengths;  // empty: no padding mask
};

std::string describe_case(const Case& c, DType dtype) {
  std::ostringstream os;
  os << dtype_name(dtype) << " layers=" << c.layers << " B=" << c.batch << " L=" << c.len
     << " S=" << c.src_len << " H=" << c.hidden << " heads=" << c.heads << " ffn=" << c.ffn
     << (c.pre ? " pre-LN" : " post-LN") << " " << activation_name(c.activation)
     << (c.dropout ? " dropout" : " no-dropout") << " target=[";
  os << joined(c.target_lengths) << "] source=[" << joined(c.source_lengths) << "]";
  return os.str();
}

std::vector<Case> cases() {
  using A = Activation;
  return {
      {2, 2, 5, 7, 12, 3, 37, true, A::relu, false, {5, 3}, {7, 2}},
      {2, 3, 7, 4, 20, 4, 33, false, A::gelu, true, {7, 0, 4}, {4, 1, 3}},
      {3, 2, 6, 11, 64, 4, 129, true, A::gelu_tanh, true, {2, 6}, {11, 5}},
      {3, 1, 1, 1, 8, 1, 9, false, A::relu, true, {1}, {1}},
      {2, 4, 3, 9, 32, 2, 40, true, A::gelu, true, {}, {9, 0, 4, 9}},
  };
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(to_float(v[i]));
  return out;
}

// The componentwise bound of a T result R of an fp32 accumulation of length K whose exact value
// has absolute sum `a` (header, (3)).
double accumulation_bound(DType dtype, double result, double a, std::size_t K) {
  const double u = unit_roundoff(dtype), eta = operators::check_util::underflow_error(dtype);
  const double ka = static_cast<double>(K + 1) * kAccumulationRoundoff;
  return u * (std::fabs(result) + eta) / (1.0 - u) + eta + ka / (1.0 - ka) * a;
}

// The worst |got - want| / bound per (dtype, tensor) over every case, printed at the end.
std::map<std::string, double>& worst_op_ratios() {
  static std::map<std::string, double> worst;
  return worst;
}

// |got_i - want_i| <= bound_i for every i (NaN fails).
template <class T>
void expect_within(const std::vector<T>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, DType dtype, const std::string& tensor,
                   const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << tensor;
  ASSERT_EQ(got.size(), bound.size()) << tensor;
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(to_float(got[i]));
    const double ratio = std::isnan(g) ? INFINITY : std::fabs(g - want[i]) / bound[i];
    if (!(ratio <= worst)) {
      worst = ratio;
      at = i;
    }
  }
  double& seen = worst_op_ratios()[std::string(dtype_name(dtype)) + " " + tensor];
  seen = std::max(seen, worst);
  if (got.empty()) return;
  EXPECT_LE(worst, 1.0) << tensor << " (" << where << "): element " << at << " got "
                        << static_cast<double>(to_float(got[at])) << " want " << want[at] << ", bound "
                        << bound[at];
}

// What CrossAttentionKV's operations read and wrote in the batched stack's first step.
template <class T>
struct BatchedOps {
  std::vector<std::vector<T>> heads;    // per layer: kv_heads(l) [2, B, N, S, d] after forward()
  std::vector<std::vector<T>> d_heads;  // per layer: d_kv_heads(l) after backward()
  std::vector<T> d_kv_all;              // [B·S, layers·2H] after backward()
};

// Check (3) of the header: CrossAttentionKV's split, merge, two GEMMs and bias gradient, each
// against double arithmetic on its own T inputs.
template <class T>
void check_batched_ops(int NL, int B, int S, int H, int heads, const std::vector<T>& enc,
                       const std::vector<T>& w_all, const std::vector<T>& b_all, const BatchedOps<T>& ops,
                       const std::vector<T>& d_enc, const std::vector<T>& dw_all,
                       const std::vector<T>& db_all, const std::string& where) {
  const DType dtype = DTypeTraits<T>::dtype;
  const double u = unit_roundoff(dtype), eta = operators::check_util::underflow_error(dtype);
  const std::size_t R = static_cast<std::size_t>(B) * static_cast<std::size_t>(S);
  const std::size_t Hs = static_cast<std::size_t>(H), C = static_cast<std::size_t>(NL) * 2 * Hs;
  const std::size_t d = Hs / static_cast<std::size_t>(heads);
  const auto f = [](T v) { return static_cast<double>(to_float(v)); };
  // Σ_i x[x0 + i·xs] · y[y0 + i·ys] over n terms, exactly (double), and Σ_i |x_i · y_i|.
  const auto dot = [&](const std::vector<T>& x, std::size_t x0, std::size_t xs, const std::vector<T>& y,
                       std::size_t y0, std::size_t ys, std::size_t n) {
    std::pair<double, double> sum{0.0, 0.0};
    for (std::size_t i = 0; i < n; ++i) {
      const double p = f(x[x0 + i * xs]) * f(y[y0 + i * ys]);
      sum.first += p;
      sum.second += std::fabs(p);
    }
    return sum;
  };
  ASSERT_EQ(ops.d_kv_all.size(), R * C);
  // Element i of a [2, B, N, S, d] heads tensor is row r, column (within the layer's 2H) c.
  const auto heads_index = [&](std::size_t p, std::size_t b, std::size_t n, std::size_t s, std::size_t j) {
    return (((p * static_cast<std::size_t>(B) + b) * static_cast<std::size_t>(heads) + n) *
                static_cast<std::size_t>(S) +
            s) *
               d +
           j;
  };
  for (int l = 0; l < NL; ++l) {
    const auto L = static_cast<std::size_t>(l);
    const std::vector<T>& h = ops.heads[L];
    const std::vector<T>& dh = ops.d_heads[L];
    ASSERT_EQ(h.size(), 2 * R * Hs);
    ASSERT_EQ(dh.size(), 2 * R * Hs);
    std::vector<double> want(h.size()), bound(h.size());
    std::size_t merge_mismatches = 0, first_mismatch = 0;
    for (std::size_t p = 0; p < 2; ++p)
      for (std::size_t b = 0; b < static_cast<std::size_t>(B); ++b)
        for (std::size_t n = 0; n < static_cast<std::size_t>(heads); ++n)
          for (std::size_t s = 0; s < static_cast<std::size_t>(S); ++s)
            for (std::size_t j = 0; j < d; ++j) {
              const std::size_t i = heads_index(p, b, n, s, j);
              const std::size_t r = b * static_cast<std::size_t>(S) + s;
              const std::size_t c = 2 * Hs * L + p * Hs + n * d + j;
              const auto [g, a] = dot(enc, r * Hs, 1, w_all, c * Hs, 1, Hs);
              const double ka = static_cast<double>(Hs + 1) * kAccumulationRoundoff;
              want[i] = g + f(b_all[c]);
              bound[i] = (u + kFp32Roundoff) * (1.0 + 2.0 * u) * (1.0 + 2.0 * kFp32Roundoff) *
                             (std::fabs(f(h[i])) + eta) +
                         u * std::fabs(g) + (1.0 + u) * ka / (1.0 - ka) * a + 2.0 * eta;
              if (std::memcmp(&ops.d_kv_all[r * C + c], &dh[i], sizeof(T)) != 0 && merge_mismatches++ == 0)
                first_mismatch = i;
            }
    expect_within(h, want, bound, dtype, "kv_heads(" + std::to_string(l) + ")", where);
    EXPECT_EQ(merge_mismatches, 0u) << "d_kv_all's column block of layer " << l
                                    << " is not the merge of d_kv_heads(" << l << ") bitwise (" << where
                                    << "): first at heads element " << first_mismatch;
  }
  const std::vector<T>& D = ops.d_kv_all;
  // d_encoder_out [R, H] = D [R, C] · W_all [C, H].
  std::vector<double> want(R * Hs), bound(R * Hs);
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t k = 0; k < Hs; ++k) {
      const auto [e, a] = dot(D, r * C, 1, w_all, k, Hs, C);
      want[r * Hs + k] = e;
      bound[r * Hs + k] = accumulation_bound(dtype, f(d_enc[r * Hs + k]), a, C);
    }
  expect_within(d_enc, want, bound, dtype, "d_encoder_out = d_kv_all · W_kv_all", where);
  // dW_kv_all [C, H] = Dᵀ · enc; db_kv_all [C] = Σ_r D.
  want.assign(C * Hs, 0.0);
  bound.assign(C * Hs, 0.0);
  std::vector<double> want_b(C), bound_b(C);
  for (std::size_t c = 0; c < C; ++c) {
    for (std::size_t k = 0; k < Hs; ++k) {
      const auto [e, a] = dot(D, c, C, enc, k, Hs, R);
      want[c * Hs + k] = e;
      bound[c * Hs + k] = accumulation_bound(dtype, f(dw_all[c * Hs + k]), a, R);
    }
    double e = 0.0, a = 0.0;
    for (std::size_t r = 0; r < R; ++r) {
      e += f(D[r * C + c]);
      a += std::fabs(f(D[r * C + c]));
    }
    want_b[c] = e;
    bound_b[c] = accumulation_bound(dtype, f(db_all[c]), a, R);
  }
  expect_within(dw_all, want, bound, dtype, "dW_kv_all = d_kv_allᵀ · encoder_out", where);
  expect_within(db_all, want_b, bound_b, dtype, "db_kv_all = Σ_rows d_kv_all", where);
}

// What one run of a GPU stack produced (host copies).
// The order CrossAttentionKV's header promises to enforce, each breach of which would otherwise
// give silently wrong gradients: backward() before every layer's backward_kv; a layer's
// backward_kv after kv.backward() (which may reuse the heads' bytes) or after a new kv.forward();
// another layer's index; the raw-pointer backward_kv for an object's forward_kv. (On the GPU: a
// refused call must come after a real forward, which launches kernels.) The layers are in
// external-K/V mode and each backward_kv consumes its forward.
template <class Layers, class In, class Out, class DIn, class DOut>
void expect_order_is_enforced(CrossAttentionKV& kv, const Layers& layers, const In& in_of, const Out& out_of,
                              const DIn& din_of, const DOut& dout_of, void* d_enc_out, const void* enc, int B,
                              int L, int S, const std::int32_t* tlp, const std::int32_t* slp,
                              cudaStream_t stream) {
  using testing::expect_error;
  const int NL = kv.layers();
  const auto forward_all = [&] {
    kv.forward(enc, static_cast<std::size_t>(B), static_cast<std::size_t>(S), stream);
    for (int i = 0; i < NL; ++i)
      layers[static_cast<std::size_t>(i)]->forward_kv(out_of(i), in_of(i), kv, i, static_cast<std::size_t>(L),
                                                      tlp, slp, 1, 0, stream);
  };
  const auto backward_from = [&](int first) {
    for (int i = NL - 1; i >= first; --i)
      layers[static_cast<std::size_t>(i)]->backward_kv(din_of(i), kv, i, dout_of(i), in_of(i), stream);
  };
  // backward() before layer 0's backward_kv.
  forward_all();
  backward_from(1);
  expect_error([&] { kv.backward(d_enc_out, enc, stream); },
               "CrossAttentionKV::backward: 1 of " + std::to_string(NL) +
                   " layers have not written their d_kv_heads since the last forward() (layers 0)");
  // Layer 0 alone: layers 1.. consumed their forward in backward_from(1).
  layers[0]->backward_kv(din_of(0), kv, 0, dout_of(0), in_of(0), stream);
  kv.backward(d_enc_out, enc, stream);
  kv.backward(d_enc_out, enc, stream);  // the gradient heads are intact: the same gradients again
  expect_error([&] { kv.kv_heads(0); },
               "CrossAttentionKV::kv_heads: backward() has run since the last forward()");
  // A layer's backward_kv after kv.backward() (layer 0's gradient marked by hand, the documented
  // way for a caller that writes it by other means).
  forward_all();
  backward_from(1);
  kv.mark_d_kv_heads_written(0);
  kv.backward(d_enc_out, enc, stream);
  expect_error([&] { layers[0]->backward_kv(din_of(0), kv, 0, dout_of(0), in_of(0), stream); },
               "CrossAttentionKV::kv_heads: backward() has run since the last forward()");
  // A layer's backward_kv after a new kv.forward(): layer 0 still holds the last forward_kv.
  kv.forward(enc, static_cast<std::size_t>(B), static_cast<std::size_t>(S), stream);
  expect_error([&] { layers[0]->backward_kv(din_of(0), kv, 0, dout_of(0), in_of(0), stream); },
               "DecoderLayer::backward_kv: the CrossAttentionKV has run forward() again since this layer's "
               "forward_kv");
  // Another layer's index, and the raw-pointer backward_kv, for layer 0's forward_kv of layer 0.
  layers[0]->forward_kv(out_of(0), in_of(0), kv, 0, static_cast<std::size_t>(L), tlp, slp, 1, 0, stream);
  if (NL > 1) {
    expect_error(
        [&] { layers[0]->backward_kv(din_of(0), kv, 1, dout_of(0), in_of(0), stream); },
        "DecoderLayer::backward_kv: the last forward_kv did not read layer 1 of this CrossAttentionKV "
        "(it read layer 0)");
  }
  expect_error(
      [&] {
        layers[0]->backward_kv(din_of(0), kv.d_kv_heads(0), dout_of(0), in_of(0), kv.kv_heads(0), stream);
      },
      "DecoderLayer::backward_kv: the last forward_kv took its heads from a CrossAttentionKV");
  layers[0]->backward_kv(din_of(0), kv, 0, dout_of(0), in_of(0), stream);  // the right call still runs
  SEQBENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template <class T>
struct StackResult {
  std::vector<T> y, dx, d_enc;                  // d_enc: batched; empty in the default mode
  std::vector<std::vector<T>> grads, d_enc_of;  // per layer: packed gradients, d_encoder_out (default)
  std::vector<T> dw_kv_all, db_kv_all;          // batched
};

template <class T>
void run_case(const Case& cs, std::uint64_t seed) {
  const DType dtype = DTypeTraits<T>::dtype;
  const std::string where = describe_case(cs, dtype);
  SCOPED_TRACE(where);
  const int NL = cs.layers, B = cs.batch, L = cs.len, S = cs.src_len, H = cs.hidden, F = cs.ffn;
  const std::size_t rows = static_cast<std::size_t>(B * L), src_rows = static_cast<std::size_t>(B * S);
  const std::size_t Hs = static_cast<std::size_t>(H), C = static_cast<std::size_t>(NL) * 2 * Hs;

  const LayerConfig config = case_config(B * std::max(L, S) + 5, std::max(L, S) + 2, H, cs.heads, F, cs.pre,
                                         cs.activation, cs.dropout, dtype);

  const std::vector<DecoderTensorShape> shapes = decoder_layer_parameter_shapes(config);
  std::vector<std::size_t> offsets;
  std::uint64_t s = seed;
  std::vector<std::vector<T>> params(static_cast<std::size_t>(NL));
  for (auto& p : params) p = random_parameters<T>(shapes, s, offsets);
  // W_kv_all / b_kv_all: the layers' cross_kv_weight / cross_kv_bias stacked in layer order.
  std::vector<T> w_all, b_all;
  for (const auto& p : params) {
    const std::vector<T> w = slice(p, offsets[kCrossKvWeight], shapes[kCrossKvWeight].elements());
    const std::vector<T> b = slice(p, offsets[kCrossKvBias], shapes[kCrossKvBias].elements());
    w_all.insert(w_all.end(), w.begin(), w.end());
    b_all.insert(b_all.end(), b.begin(), b.end());
  }
  ASSERT_EQ(w_all.size(), C * Hs);
  ASSERT_EQ(b_all.size(), C);
  const std::vector<T> x = random_values<T>(rows * Hs, ++s, -1.0f, 1.0f);
  const std::vector<T> enc = random_values<T>(src_rows * Hs, ++s, -1.0f, 1.0f);
  const std::vector<T> dy = random_values<T>(rows * Hs, ++s, -1.0f, 1.0f);
  const auto layer_seed = [&](int i) { return (seed ^ 0xdec0deull) + static_cast<std::uint64_t>(i) * 7919u; };

  // (1) The reference, layer by layer, on exactly the T values of the inputs and parameters.
  const ref::Index Hi = H;
  const ref::TransformerLayerConfig rc = ref_config(config);
  const std::vector<ref::Index> tgt(cs.target_lengths.begin(), cs.target_lengths.end());
  const std::vector<ref::Index> src(cs.source_lengths.begin(), cs.source_lengths.end());
  const ref::Matrix em = to_matrix(enc, static_cast<ref::Index>(src_rows), Hi);
  std::vector<ref::DecoderLayerParams> rps;
  std::vector<ref::DecoderLayerMasks> masks;
  std::vector<ref::Matrix> xs = {to_matrix(x, static_cast<ref::Index>(rows), Hi)};
  for (int i = 0; i < NL; ++i) {
    rps.push_back(decoder_ref_params(params[static_cast<std::size_t>(i)], shapes, offsets, Hi));
    masks.push_back(ref::decoder_layer_dropout_masks(B, L, S, H, F, rc, layer_seed(i)));
    if (cs.activation == Activation::relu) {  // no pre-activation near 0 (layer_check::center_relu_bias)
      ASSERT_EQ(shapes[17].name, "fc1_bias");
      const ref::Matrix ffn_in =
          ref::decoder_layer_forward(xs.back(), em, B, rps.back(), rc, tgt, src, masks.back()).x2;
      center_relu_bias(params[static_cast<std::size_t>(i)], offsets[17], rps.back().ffn, ffn_in, rc);
    }
    xs.push_back(ref::decoder_layer_forward(xs.back(), em, B, rps.back(), rc, tgt, src, masks.back()).y);
  }
  std::vector<ref::DecoderLayerGrads> rgs(static_cast<std::size_t>(NL));
  ref::Matrix d_up = to_matrix(dy, static_cast<ref::Index>(rows), Hi);
  ref::Matrix d_enc_ref = ref::Matrix::Zero(static_cast<ref::Index>(src_rows), Hi);
  for (int i = NL - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    rgs[u] = ref::decoder_layer_backward(d_up, xs[u], em, B, rps[u], rc, tgt, src, masks[u]);
    d_up = rgs[u].dx;
    d_enc_ref += rgs[u].d_encoder_out;
  }

  // The GPU stacks. Per-layer parameters in device buffers; the batched stack's layers get null
  // cross_kv pointers (the projection lives in CrossAttentionKV).
  std::vector<DeviceBuffer<T>> d_params, d_grads;
  for (int i = 0; i < NL; ++i) {
    d_params.emplace_back(params[static_cast<std::size_t>(i)]);
    d_grads.emplace_back(params[static_cast<std::size_t>(i)].size());
  }
  const std::vector<std::int32_t> tl(cs.target_lengths.begin(), cs.target_lengths.end());
  const std::vector<std::int32_t> sl(cs.source_lengths.begin(), cs.source_lengths.end());
  DeviceBuffer<std::int32_t> d_tl(tl), d_sl(sl);
  const std::int32_t* tlp = tl.empty() ? nullptr : d_tl.data();
  const std::int32_t* slp = sl.empty() ? nullptr : d_sl.data();
  DeviceBuffer<T> d_x(x), d_enc(enc), d_dy(dy);
  // Between layers: acts[i] (1 <= i < NL) is layer i's input = layer i - 1's output, grads_up[i]
  // its gradient (layer i's dx, layer i - 1's dy). Layer 0 reads d_x and writes dx_out; layer
  // NL - 1 writes y_out and reads d_dy. acts[0] and grads_up[0] are unused.
  std::vector<DeviceBuffer<T>> acts, grads_up;
  for (int i = 0; i < NL; ++i) {
    acts.emplace_back(rows * Hs);
    grads_up.emplace_back(rows * Hs);
  }
  DeviceBuffer<T> y_out(rows * Hs), dx_out(rows * Hs);
  DeviceBuffer<T> d_enc_out(src_rows * Hs), dw_all(C * Hs), db_all(C);
  std::vector<DeviceBuffer<T>> d_enc_of;  // the default stack's per-layer d_encoder_out
  for (int i = 0; i < NL; ++i) d_enc_of.emplace_back(src_rows * Hs);
  DeviceBuffer<T> d_w_all(w_all), d_b_all(b_all);
  CudaAllocator cuda;
  Stream stream;

  // NL layers "dec<i>." on the per-layer buffers, in external-K/V mode (null cross_kv views) or not.
  const auto make_layers = [&](bool external, CountingAllocator& counter) {
    std::vector<std::unique_ptr<DecoderLayer>> layers;
    for (int i = 0; i < NL; ++i) {
      DecoderLayerWeights w;
      DecoderLayerGrads g;
      point_views(w, g, d_params[static_cast<std::size_t>(i)].data(),
                  d_grads[static_cast<std::size_t>(i)].data(), offsets);
      if (external) {
        w.cross_kv_weight = w.cross_kv_bias = nullptr;
        g.cross_kv_weight = g.cross_kv_bias = nullptr;
      }
      DecoderLayerOptions o;
      o.prefix = "dec" + std::to_string(i) + ".";
      o.external_kv = external;
      layers.push_back(std::make_unique<DecoderLayer>(config, w, g, counter, o));
    }
    return layers;
  };
  const auto poison = [&] {
    for (auto& g : d_grads) g.fill_bytes(0xFF);
    for (auto& a : acts) a.fill_bytes(0xFF);
    for (auto& g : grads_up) g.fill_bytes(0xFF);
    for (auto& e : d_enc_of) e.fill_bytes(0xFF);
    y_out.fill_bytes(0xFF);
    dx_out.fill_bytes(0xFF);
    d_enc_out.fill_bytes(0xFF);
    dw_all.fill_bytes(0xFF);
    db_all.fill_bytes(0xFF);
  };
  const auto in_of = [&](int i) -> const T* {
    return i == 0 ? d_x.data() : acts[static_cast<std::size_t>(i)].data();
  };
  const auto out_of = [&](int i) -> T* {
    return i == NL - 1 ? y_out.data() : acts[static_cast<std::size_t>(i + 1)].data();
  };
  const auto dout_of = [&](int i) -> const T* {
    return i == NL - 1 ? d_dy.data() : grads_up[static_cast<std::size_t>(i + 1)].data();
  };
  const auto din_of = [&](int i) -> T* {
    return i == 0 ? dx_out.data() : grads_up[static_cast<std::size_t>(i)].data();
  };
  const auto collect = [&](StackResult<T>& r, bool external) {
    r.y = y_out.copy_to_host();
    r.dx = dx_out.copy_to_host();
    for (auto& g : d_grads) r.grads.push_back(g.copy_to_host());
    if (external) {
      r.d_enc = d_enc_out.copy_to_host();
      r.dw_kv_all = dw_all.copy_to_host();
      r.db_kv_all = db_all.copy_to_host();
    } else {
      for (auto& e : d_enc_of) r.d_enc_of.push_back(e.copy_to_host());
    }
  };

  // Every byte of an object's planned block, so that a tensor a step forgot to write cannot hold
  // the last step's (or the other stack's) values and pass.
  const auto poison_block = [](const MemoryManager& memory) {
    if (memory.block_bytes() > 0) SEQBENCH_CUDA_CHECK(cudaMemset(memory.block(), 0xFF, memory.block_bytes()));
  };
  const std::size_t head_elements = 2 * src_rows * Hs;
  const auto read_back = [](const void* device, std::size_t count) {
    std::vector<T> host(count);
    if (count > 0)
      SEQBENCH_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  };

  // The batched stack: one CrossAttentionKV and NL external-K/V layers, each object one block.
  StackResult<T> batched, again, per_layer;
  BatchedOps<T> ops;
  {
    CountingAllocator counter(cuda);
    CrossAttentionKV kv(config, NL, d_w_all.data(), d_b_all.data(), dw_all.data(), db_all.data(), counter);
    const std::vector<std::unique_ptr<DecoderLayer>> layers = make_layers(true, counter);
    // One step; with `capture`, the heads after forward() and d_kv_all and the gradient heads after
    // backward() are read back for check (3). (The heads share bytes with d_kv_all once the
    // backward runs, so they are read before the layers go on; the gradient heads and d_kv_all
    // are not written after backward()'s split backward: only d_encoder_out, an external, and the
    // always-live GEMM workspace are.)
    const auto step = [&](bool capture) {
      poison();
      poison_block(kv.memory());
      for (const auto& layer : layers) poison_block(layer->memory());
      kv.forward(d_enc.data(), static_cast<std::size_t>(B), static_cast<std::size_t>(S), stream.get());
      if (capture) {
        stream.synchronize();
        for (int i = 0; i < NL; ++i) ops.heads.push_back(read_back(kv.kv_heads(i), head_elements));
      }
      for (int i = 0; i < NL; ++i)
        layers[static_cast<std::size_t>(i)]->forward_kv(out_of(i), in_of(i), kv, i,
                                                        static_cast<std::size_t>(L), tlp, slp, layer_seed(i),
                                                        0, stream.get());
      for (int i = NL - 1; i >= 0; --i)
        layers[static_cast<std::size_t>(i)]->backward_kv(din_of(i), kv, i, dout_of(i), in_of(i),
                                                         stream.get());
      kv.backward(d_enc_out.data(), d_enc.data(), stream.get());
      stream.synchronize();
      if (capture) {
        for (int i = 0; i < NL; ++i) ops.d_heads.push_back(read_back(kv.d_kv_heads(i), head_elements));
        const MemoryManager& memory = kv.memory();
        ops.d_kv_all =
            read_back(memory.get(memory.id("cross_kv.d_kv_all"), src_rows * C * sizeof(T)), src_rows * C);
      }
    };
    step(true);
    EXPECT_EQ(counter.stats().allocations, static_cast<std::size_t>(NL) + 1);
    collect(batched, true);
    step(false);
    EXPECT_EQ(counter.stats().allocations, static_cast<std::size_t>(NL) + 1);
    collect(again, true);
    expect_order_is_enforced(kv, layers, in_of, out_of, din_of, dout_of, d_enc_out.data(), d_enc.data(), B, L,
                             S, tlp, slp, stream.get());
  }
  EXPECT_TRUE(same_bits(again.y, batched.y)) << "y repeats";
  EXPECT_TRUE(same_bits(again.dx, batched.dx)) << "dx repeats";
  EXPECT_TRUE(same_bits(again.d_enc, batched.d_enc)) << "d_encoder_out repeats";
  EXPECT_TRUE(same_bits(again.dw_kv_all, batched.dw_kv_all)) << "dW_kv_all repeats";
  EXPECT_TRUE(same_bits(again.db_kv_all, batched.db_kv_all)) << "db_kv_all repeats";

  // (2) The default stack: every layer its own K/V projection and d_encoder_out.
  {
    CountingAllocator counter(cuda);
    const std::vector<std::unique_ptr<DecoderLayer>> layers = make_layers(false, counter);
    poison();
    for (const auto& layer : layers) poison_block(layer->memory());
    for (int i = 0; i < NL; ++i)
      layers[static_cast<std::size_t>(i)]->forward(
          out_of(i), in_of(i), d_enc.data(), static_cast<std::size_t>(B), static_cast<std::size_t>(L),
          static_cast<std::size_t>(S), tlp, slp, layer_seed(i), 0, stream.get());
    for (int i = NL - 1; i >= 0; --i)
      layers[static_cast<std::size_t>(i)]->backward(din_of(i), d_enc_of[static_cast<std::size_t>(i)].data(),
                                                    dout_of(i), in_of(i), d_enc.data(), stream.get());
    stream.synchronize();
    collect(per_layer, false);
  }

  const int k_max =
      std::max({3 * H, F, static_cast<int>(C), static_cast<int>(rows), static_cast<int>(src_rows), L, S});
  const double tol_fwd = tolerance(dtype, kLayerForwardRoundings * NL, k_max);
  const double tol_bwd = tolerance(dtype, kLayerBackwardRoundings * NL, k_max);
  const std::string label = "cross_kv";
  // The default stack's d_encoder_out: Σ_i of its layers' (T values, summed in double).
  std::vector<double> d_enc_sum(src_rows * Hs, 0.0);
  for (const auto& e : per_layer.d_enc_of)
    for (std::size_t j = 0; j < e.size(); ++j) d_enc_sum[j] += static_cast<double>(to_float(e[j]));
  std::vector<std::string> bitwise;
  NormwiseErrors batched_errors, per_layer_errors;  // check (2)
  // Check (1) of the batched tensor and the 2-norm errors of both modes for check (2).
  const auto both = [&](const std::vector<T>& got, const std::vector<double>& want, const auto& other,
                        bool other_bits_equal, double tol, const std::string& tensor) {
    expect_close(got, want, tol, dtype, label, tensor, where, &batched_errors);
    per_layer_errors[tensor] = normwise_error(other, want);
    if (other_bits_equal) bitwise.push_back(tensor);
  };
  both(batched.y, flat(xs.back()), per_layer.y, same_bits(batched.y, per_layer.y), tol_fwd, "y");
  both(batched.dx, flat(d_up), per_layer.dx, same_bits(batched.dx, per_layer.dx), tol_bwd, "dx");
  both(batched.d_enc, flat(d_enc_ref), d_enc_sum, false, tol_bwd, "d_encoder_out");
  // The per-layer mode's d_encoder_out tensors against the reference's, too (the default mode's
  // own check, in a stack).
  for (int i = 0; i < NL; ++i)
    expect_close(per_layer.d_enc_of[static_cast<std::size_t>(i)],
                 flat(rgs[static_cast<std::size_t>(i)].d_encoder_out), tol_bwd, dtype, label,
                 "d_encoder_out of layer " + std::to_string(i), where);
  std::vector<double> want_w, want_b;
  std::vector<T> per_layer_w, per_layer_b;
  for (int i = 0; i < NL; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const std::vector<std::vector<double>> want = decoder_ref_grads(rgs[u]);
    ASSERT_EQ(want.size(), shapes.size());
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      const std::vector<T> def = slice(per_layer.grads[u], offsets[t], shapes[t].elements());
      if (t == kCrossKvWeight || t == kCrossKvBias) {
        auto& w = t == kCrossKvWeight ? want_w : want_b;
        w.insert(w.end(), want[t].begin(), want[t].end());
        auto& p = t == kCrossKvWeight ? per_layer_w : per_layer_b;
        p.insert(p.end(), def.begin(), def.end());
        continue;  // the external-K/V layers do not write these slots
      }
      const std::vector<T> got = slice(batched.grads[u], offsets[t], shapes[t].elements());
      both(got, want[t], def, same_bits(got, def), tol_bwd,
           "layer " + std::to_string(i) + " d" + shapes[t].name);
    }
  }
  both(batched.dw_kv_all, want_w, per_layer_w, same_bits(batched.dw_kv_all, per_layer_w), tol_bwd,
       "dW_kv_all");
  both(batched.db_kv_all, want_b, per_layer_b, same_bits(batched.db_kv_all, per_layer_b), tol_bwd,
       "db_kv_all");
  if constexpr (!std::is_same_v<T, float>)
    expect_no_less_accurate(batched_errors, per_layer_errors, dtype, "cross_kv_modes", where);
  check_batched_ops(NL, B, S, H, cs.heads, enc, w_all, b_all, ops, batched.d_enc, batched.dw_kv_all,
                    batched.db_kv_all, where);
  std::cout << "[ " << where << " ] bitwise equal to the per-layer mode: " << bitwise.size() << " tensors:";
  for (const std::string& b : bitwise) std::cout << " " << b << ";";
  std::cout << "\n";
}

TEST(CrossKvGpu, LayerBatchedStackMatchesTheReferenceAndThePerLayerStack) {
  SEQBENCH_REQUIRE_GPU();
  for_each_dtype_and_case(
      cases(), kSeed, [](const Case& c, std::uint64_t seed, auto tag) { run_case<decltype(tag)>(c, seed); });
  print_worst_ratios("cross_kv");
  print_worst_fused_over_baseline();
  for (const auto& [name, ratio] : worst_op_ratios())
    std::cout << "[ cross_kv_ops " << name << " ] worst err/bound: " << ratio << "\n";
}

}  // namespace
}  // namespace seqbench::layers
