// The GPU layer tests' shared checking: parameters packed in one buffer (LightSeq2's layout),
// drawn with unit-gain ranges; the decoder layer's packed parameters and gradients as the
// reference's; normwise comparison against the double reference with the tolerance model
// documented in tests/layers/encoder_layer_test.cu; the worst observed ratios, printed for the
// GPU session.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "layers/config.h"
#include "layers/decoder_layer.h"
#include "layers/layer_run.h"
#include "reference/layernorm.h"
#include "reference/transformer_layer.h"
#include "suites/operators/check_util.h"
#include "tests/layers/layer_cases.h"

namespace seqbench::layers::layer_check {

inline constexpr double kV = 1.0 / 16777216.0;  // 2^-24, fp32 accumulation
inline constexpr double kGainAllowance = 4.0;   // G of the tolerance model

inline ref::Activation ref_activation(Activation a) {
  switch (a) {
    case Activation::relu:
      return ref::Activation::relu;
    case Activation::gelu:
      return ref::Activation::gelu_erf;
    case Activation::gelu_tanh:
      break;
  }
  return ref::Activation::gelu_tanh;
}

// tol = n · (G · u_T + 2 (k + 2) · 2^-24) for n roundings and the longest inner dimension k.
inline double tolerance(DType dtype, int roundings, int k_max) {
  return roundings * (kGainAllowance * unit_roundoff(dtype) + 2.0 * (k_max + 2) * kV);
}

// The worst err/scale per (label, dtype, tensor) over every case, printed at the end.
inline std::map<std::string, double>& worst_ratios() {
  static std::map<std::string, double> worst;
  return worst;
}

inline void print_worst_ratios(const std::string& label) {
  for (const auto& [name, ratio] : worst_ratios())
    if (name.rfind(label, 0) == 0) std::cout << "[ " << name << " ] worst err/max|ref|: " << ratio << "\n";
}

// One output tensor's error in the 2-norm: ||got - ref||_2 and ||ref||_2 over its n elements
// (err is +inf when any element is NaN).
struct NormwiseError {
  double err = 0.0;
  double ref = 0.0;
  std::size_t n = 0;
};
using NormwiseErrors = std::map<std::string, NormwiseError>;  // per output tensor

// T is a stored dtype, or double (a tensor summed on the host).
template <class T>
NormwiseError normwise_error(const std::vector<T>& got, const std::vector<double>& want) {
  double err2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double g = 0.0;
    if constexpr (std::is_same_v<T, double>)
      g = got[i];
    else
      g = static_cast<double>(to_float(got[i]));
    const double d = g - want[i];
    err2 += d * d;  // NaN stays NaN
    ref2 += want[i] * want[i];
  }
  const double err = std::sqrt(err2);
  return {std::isnan(err) ? INFINITY : err, std::sqrt(ref2), got.size()};
}

// max_i |got_i - ref_i| <= tol · max_i |ref_i| + η_T (NaN fails). With `errors`, the tensor's
// normwise error is recorded there too, for expect_no_less_accurate.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, double tol, DType dtype,
                  const std::string& label, const std::string& tensor, const std::string& where,
                  NormwiseErrors* errors = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << tensor;
  if (errors != nullptr) (*errors)[tensor] = normwise_error(got, want);
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  double err = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(to_float(got[i]));
    const double e = std::isnan(g) ? INFINITY : std::fabs(g - want[i]);
    if (!(e <= err)) {
      err = e;
      at = i;
    }
  }
  const double bound = tol * scale + operators::check_util::underflow_error(dtype);
  const double ratio = scale > 0.0 ? err / scale : err;
  // With tol >= 1 the bound exceeds every |ref_i|, so even an all-zero output passes: the worst-case
  // model of n roundings (bf16's deepest chains) then only catches NaN and poisoned elements. Say so
  // once per tensor rather than let the check look stronger than it is.
  if (tol >= 1.0) {
    static std::map<std::string, bool> said;
    bool& once = said[label + " " + std::string(dtype_name(dtype)) + " " + tensor];
    if (!once)
      std::cout << "[ info ] " << label << " " << dtype_name(dtype) << " " << tensor << ": tol " << tol
                << " >= 1, so this check only catches NaN and unwritten elements\n";
    once = true;
  }
  double& worst = worst_ratios()[label + " " + std::string(dtype_name(dtype)) + " " + tensor];
  worst = std::max(worst, ratio);
  EXPECT_LE(err, bound) << tensor << " (" << where << "): element " << at << " got "
                        << static_cast<double>(to_float(got[at])) << " want " << want[at] << "; max|ref| "
                        << scale << ", err/max|ref| " << ratio << " > tol " << tol;
}

// The worst ||fused - ref||_2 / ||baseline - ref||_2 per (label, dtype, tensor), printed at the end.
inline std::map<std::string, double>& worst_fused_over_baseline() {
  static std::map<std::string, double> worst;
  return worst;
}

inline void print_worst_fused_over_baseline() {
  for (const auto& [name, ratio] : worst_fused_over_baseline())
    std::cout << "[ " << name << " ] worst fused/baseline 2-norm error: " << ratio << "\n";
}

// The fused layer against the eager-like baseline on the same case, draws and reference, in a
// 16-bit dtype: for every output tensor
//   ||fused - ref||_2 <= 2 · ||baseline - ref||_2 + u_T · ||ref||_2 + η_T · √n.
// Why: in f16 and bf16 both layers' errors come from rounding stored tensors to T (their GEMMs
// and fp32 accumulations are the same), and the fused layer rounds at fewer places on every path
// (tests/layers/encoder_layer_test.cu counts 16 against 28 forward), so its error is expected
// below the baseline's. The worst-case model of expect_close grows with the rounding depth and
// reaches or nears 1 in bf16's deepest chains, where it catches only NaN and unwritten elements;
// this comparison does not grow with depth. The factor 2 leaves room for a few tensors where the
// two layers' roundings fall differently; u_T · ||ref||_2 is one rounding of the whole tensor
// (a relative 2-norm error of about u_T/√3 on its own), for tensors where the baseline's error
// happens to be near 0; η_T covers subnormal outputs. The 2-norm, not the max, because a ratio of
// two maxima over few elements is noisy, while a layer bug (a wrong row, tail or mask) moves the
// 2-norm error to the size of the values themselves, 2^8 times bf16's rounding. (FlashAttention's
// tests compare a kernel's error with a reference implementation's error in the same way.)
inline void expect_no_less_accurate(const NormwiseErrors& fused, const NormwiseErrors& baseline, DType dtype,
                                    const std::string& label, const std::string& where) {
  ASSERT_EQ(fused.size(), baseline.size()) << where;
  for (const auto& [tensor, f] : fused) {
    const auto it = baseline.find(tensor);
    ASSERT_NE(it, baseline.end()) << tensor << " (" << where << ")";
    const NormwiseError& b = it->second;
    const double floor = unit_roundoff(dtype) * f.ref +
                         operators::check_util::underflow_error(dtype) * std::sqrt(static_cast<double>(f.n));
    const double bound = 2.0 * b.err + floor;
    double& worst = worst_fused_over_baseline()[label + " " + std::string(dtype_name(dtype)) + " " + tensor];
    worst = std::max(worst, b.err > 0.0 ? f.err / b.err : (f.err > 0.0 ? INFINITY : 0.0));
    EXPECT_LE(f.err, bound) << tensor << " (" << where << "): fused ||err||_2 " << f.err << ", baseline "
                            << b.err << ", ||ref||_2 " << f.ref << " over " << f.n << " elements";
  }
}

// expect_no_less_accurate over every case in f16 and bf16, with the seeds for_each_dtype_and_case
// gives (the draws of the reference tests): run(case, seed, baseline, errors, T{}) runs one
// layer and records its errors; describe(case, dtype) names the case.
template <class Case, class Run, class Describe>
void expect_fused_no_less_accurate_on_every_case(const std::vector<Case>& cases, std::uint64_t first_seed,
                                                 const std::string& label, Run&& run, Describe&& describe) {
  layer_test::for_each_dtype_and_case(cases, first_seed, [&](const Case& c, std::uint64_t seed, auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      NormwiseErrors fused, baseline;
      run(c, seed, false, &fused, tag);
      run(c, seed, true, &baseline, tag);
      expect_no_less_accurate(fused, baseline, DTypeTraits<T>::dtype, label,
                              describe(c, DTypeTraits<T>::dtype));
    }
  });
  print_worst_fused_over_baseline();
}

inline std::vector<double> flat(const ref::Matrix& m) {
  return {m.data(), m.data() + m.size()};
}
inline std::vector<double> flat(const ref::Vector& v) {
  return {v.data(), v.data() + v.size()};
}
inline std::vector<double> concat(std::initializer_list<std::vector<double>> parts) {
  std::vector<double> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

template <class T>
std::vector<T> slice(const std::vector<T>& all, std::size_t offset, std::size_t n) {
  return {all.begin() + static_cast<std::ptrdiff_t>(offset),
          all.begin() + static_cast<std::ptrdiff_t>(offset + n)};
}

// Parameters packed in one host buffer in the order of `shapes`: gammas U(0.5, 1.5), weights
// U(±1/√fan_in) (unit mean-square gain), biases and betas U(±0.2). offsets[i] is tensor i's start.
template <class T>
std::vector<T> random_parameters(const std::vector<ParameterShape>& shapes, std::uint64_t& seed,
                                 std::vector<std::size_t>& offsets) {
  std::vector<T> params;
  offsets.clear();
  for (const ParameterShape& sh : shapes) {
    float lo = -0.2f, hi = 0.2f;
    if (sh.name.find("gamma") != std::string::npos) {
      lo = 0.5f;
      hi = 1.5f;
    } else if (sh.name.find("weight") != std::string::npos) {
      hi = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.cols)));
      lo = -hi;
    }
    offsets.push_back(params.size());
    const std::vector<T> v = operators::check_util::random_values<T>(sh.elements(), ++seed, lo, hi);
    params.insert(params.end(), v.begin(), v.end());
  }
  return params;
}

// ReLU's derivative jumps at 0. An exact pre-activation h = in·W1ᵀ + b1 within the layer's error
// of 0 can land on the other side in a layer (the fused layer adds the bias to the product rounded
// to T, the baseline rounds the sum, and `in` carries the error of every sub-layer before the FFN),
// and that one element then moves fc1's gradients, and every gradient upstream of them, by
// |d_act|: an O(1) change that no rounding model bounds, falling on different elements in
// different layers. (Seen on the CPU executor, tests/simt: in two bf16 cases one such element moved
// dfc1_bias by 13% and 20% of its norm, in the fused layer in one case and in the baseline in the
// other.) So a relu case places each column's fc1 bias in the middle of the widest gap between that
// column's products in·W1ᵀ, searched among the middle half of the sorted values so that both signs
// stay, and rounds it to T. The per-element masks stay (each column keeps rows on both sides); the
// draws' near-ties with 0 go. Returns the margin: the smallest |h_rj| / (max_r |(in·W1ᵀ)_rj| + |b_j|)
// over the columns.
//
// The margin a comparison needs is the pre-activation's relative error, which grows with the
// rounding depth before the FFN: 16 u_T, from the bf16 case above that still flipped one element
// at a margin of 8.5 u (3.3%). f16's margins on the tests' draws are 90 u and more; bf16's, 8 to
// 16 u, are not enough, so bf16's relu cases are left out of the fused-against-baseline comparison
// (its MatchesTheReference bound, n · 4u ≥ 1, already covers a flip there).
inline double relu_margin_needed(DType dtype) {
  return 16.0 * unit_roundoff(dtype);
}

template <class T>
double center_relu_bias(std::vector<T>& params, std::size_t bias_offset, ref::FfnParams& ffn,
                        const ref::Matrix& sublayer_in, const ref::TransformerLayerConfig& rc) {
  const ref::Matrix in =
      rc.pre_layer_norm
          ? ref::layernorm_forward(sublayer_in, ffn.norm.gamma, ffn.norm.beta, rc.layer_norm_eps).y
          : sublayer_in;
  const ref::Matrix product = in * ffn.fc1.weight.transpose();  // [rows, ffn]
  const ref::Index rows = product.rows();
  double margin = INFINITY;
  for (ref::Index j = 0; j < product.cols(); ++j) {
    std::vector<double> v(product.col(j).data(), product.col(j).data() + rows);
    std::sort(v.begin(), v.end());
    double scale = 0.0;
    for (double p : v) scale = std::max(scale, std::fabs(p));
    double zero_at = v.front() - 1.0;  // one row: below it (the lone value stays positive)
    if (rows > 1) {
      const std::size_t n = v.size(), first = (n - 1) / 4, last = std::max(first + 1, n - 1 - (n - 1) / 4);
      std::size_t widest = first;
      for (std::size_t i = first; i < last; ++i)
        if (v[i + 1] - v[i] > v[widest + 1] - v[widest]) widest = i;
      zero_at = 0.5 * (v[widest] + v[widest + 1]);
    }
    const T bias = from_float<T>(static_cast<float>(-zero_at));
    params[bias_offset + static_cast<std::size_t>(j)] = bias;
    const double b = static_cast<double>(to_float(bias));
    ffn.fc1.bias(j) = b;
    double closest = INFINITY;
    for (double p : v) closest = std::min(closest, std::fabs(p + b));
    margin = std::min(margin, closest / (scale + std::fabs(b)));
  }
  return margin;
}

// A case's recorded errors (for expect_no_less_accurate) are dropped when its relu margin is below
// relu_margin_needed: both layers' runs drop theirs, so the comparison skips the case, and says so.
inline void drop_errors_below_relu_margin(NormwiseErrors* errors, double relu_margin, DType dtype,
                                          const std::string& where) {
  if (errors == nullptr || relu_margin >= relu_margin_needed(dtype)) return;
  std::cout << "[ info ] " << where << ": relu margin " << relu_margin << " < " << relu_margin_needed(dtype)
            << " (16 u), left out of the fused-against-baseline comparison\n";
  errors->clear();
}

// The reference layer config of a LayerConfig.
inline ref::TransformerLayerConfig ref_config(const LayerConfig& c) {
  ref::TransformerLayerConfig rc;
  rc.heads = c.heads;
  rc.pre_layer_norm = c.pre_layer_norm;
  rc.activation = ref_activation(c.activation);
  rc.layer_norm_eps = c.layer_norm_eps;
  rc.attn_dropout = c.attn_dropout;
  rc.activation_dropout = c.activation_dropout;
  rc.hidden_dropout = c.hidden_dropout;
  return rc;
}

// Reference parameters of one decoder layer from its packed host values (in the order of
// decoder_layer_parameter_shapes). The fused QKV [3H, H] is the query, key and value rows; the
// cross-attention's K/V projection [2H, H] the key and value rows.
template <class T>
ref::DecoderLayerParams decoder_ref_params(const std::vector<T>& params,
                                           const std::vector<DecoderTensorShape>& shapes,
                                           const std::vector<std::size_t>& offsets, ref::Index Hi) {
  const auto host_param = [&](std::size_t i) { return slice(params, offsets[i], shapes[i].elements()); };
  const auto vec = [&](std::size_t i) { return operators::check_util::to_vector(host_param(i)); };
  const auto mat = [&](std::size_t i) {
    return operators::check_util::to_matrix(host_param(i), static_cast<ref::Index>(shapes[i].rows),
                                            static_cast<ref::Index>(shapes[i].cols));
  };
  ref::DecoderLayerParams rp;
  rp.self_attention.norm = {vec(0), vec(1)};
  const ref::Matrix wqkv = mat(2);
  const ref::Vector bqkv = vec(3);
  rp.self_attention.attention.q_proj = {wqkv.topRows(Hi), bqkv.head(Hi)};
  rp.self_attention.attention.k_proj = {wqkv.middleRows(Hi, Hi), bqkv.segment(Hi, Hi)};
  rp.self_attention.attention.v_proj = {wqkv.bottomRows(Hi), bqkv.tail(Hi)};
  rp.self_attention.attention.out_proj = {mat(4), vec(5)};
  rp.cross_attention.norm = {vec(6), vec(7)};
  rp.cross_attention.attention.q_proj = {mat(8), vec(9)};
  const ref::Matrix wkv = mat(10);
  const ref::Vector bkv = vec(11);
  rp.cross_attention.attention.k_proj = {wkv.topRows(Hi), bkv.head(Hi)};
  rp.cross_attention.attention.v_proj = {wkv.bottomRows(Hi), bkv.tail(Hi)};
  rp.cross_attention.attention.out_proj = {mat(12), vec(13)};
  rp.ffn.norm = {vec(14), vec(15)};
  rp.ffn.fc1 = {mat(16), vec(17)};
  rp.ffn.fc2 = {mat(18), vec(19)};
  return rp;
}

// The reference's decoder gradients in the packed order of decoder_layer_parameter_shapes.
inline std::vector<std::vector<double>> decoder_ref_grads(const ref::DecoderLayerGrads& rg) {
  const ref::DecoderLayerParams& dp = rg.dparams;
  const ref::MhaParams& ds = dp.self_attention.attention;
  const ref::MhaParams& dc = dp.cross_attention.attention;
  return {flat(dp.self_attention.norm.gamma),
          flat(dp.self_attention.norm.beta),
          concat({flat(ds.q_proj.weight), flat(ds.k_proj.weight), flat(ds.v_proj.weight)}),
          concat({flat(ds.q_proj.bias), flat(ds.k_proj.bias), flat(ds.v_proj.bias)}),
          flat(ds.out_proj.weight),
          flat(ds.out_proj.bias),
          flat(dp.cross_attention.norm.gamma),
          flat(dp.cross_attention.norm.beta),
          flat(dc.q_proj.weight),
          flat(dc.q_proj.bias),
          concat({flat(dc.k_proj.weight), flat(dc.v_proj.weight)}),
          concat({flat(dc.k_proj.bias), flat(dc.v_proj.bias)}),
          flat(dc.out_proj.weight),
          flat(dc.out_proj.bias),
          flat(dp.ffn.norm.gamma),
          flat(dp.ffn.norm.beta),
          flat(dp.ffn.fc1.weight),
          flat(dp.ffn.fc1.bias),
          flat(dp.ffn.fc2.weight),
          flat(dp.ffn.fc2.bias)};
}

}  // namespace seqbench::layers::layer_check
