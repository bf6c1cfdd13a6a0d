// The GEMM-epilogue experiments of the layers suite (issue #5): at the Transformer-Big FFN and
// projection shapes, each cuBLASLt fused epilogue (layers/gemm.h) against the GEMM without one
// followed by the best separate seqbench kernel doing the same elementwise work, so that the
// layers' choice between the two is measured, not assumed.
//
// Where the layers could use an epilogue, and what they do today (layers/ffn_sublayer.cu,
// layers/attention_sublayer.cu, layers/cross_kv.cu; the same for the encoder and the decoder).
// Today no layer uses any epilogue: every bias, activation and bias gradient is in a fused kernel.
//
//   forward
//   F1 fc1 GEMM → bias_act_dropout (fc1 bias, activation, activation dropout in one kernel; the
//      GEMM's raw output ff1_raw is kept and the backward recomputes z = ff1_raw + bias).
//      Epilogues: bias_relu (ReLU), bias_gelu_tanh (GELU tanh, inference), bias_gelu_tanh_aux (GELU
//      tanh, training: aux = z replaces ff1_raw as the saved tensor; ReLU needs no aux, since
//      relu(z) > 0 ⟺ z > 0 gives the backward its mask). No epilogue for the erf GELU. With
//      activation_dropout > 0 (transformer-big: 0.1) the epilogue does bias + act and the dropout
//      stays a kernel: ops fc1_fwd_bias_<act>[_aux]_dropout compare that pair with the fused kernel.
//      With activation_dropout = 0 (transformer-base, gpt2-*) the epilogue alone is the whole op:
//      ops fc1_fwd_bias_relu, fc1_fwd_bias_gelu_tanh, fc1_fwd_bias_gelu_tanh_aux.
//   F2 fc2 GEMM → bias_dropout_residual (bias, hidden dropout, residual add). A bias epilogue
//      removes nothing while the dropout and the residual remain; with hidden_dropout = 0 the bias
//      epilogue plus beta = 1 with C = the residual does all of it: op fc2_fwd_bias_residual. The
//      plain bias add (what an nn.Linear without the residual costs): op fc2_fwd_bias.
//   F3 attention output projection GEMM → bias_dropout_residual: as F2, ops proj_fwd_bias,
//      proj_fwd_bias_residual (k = H).
//   F4 QKV GEMM (self), Q GEMM and K/V GEMM (cross, cross_kv.cu) → qkv_bias_split: the bias rides
//      on the head split, a layout change that must run anyway; a bias epilogue saves no bytes.
//      Not measured.
//   F5 scores GEMM → softmax, context GEMM → merge heads: no cuBLASLt epilogue applies (the 1/√d
//      scale already is the scores GEMM's alpha). Not measured.
//   F6 the eager-like baseline layer (baseline_encoder_layer.h): plain GEMMs and launch_bias_add
//      by design (one op per kernel, as PyTorch eager). Not a candidate.
//   backward
//   B1 fc2 and output projection: bias_dropout_residual_bwd writes d_raw = dy·mask/(1-p) and the
//      bias gradient. With hidden dropout > 0 the kernel must run for d_raw and its column
//      partials ride along; with p = 0 it is a copy of dy plus a column sum, and the dW GEMM's
//      bgrad_a epilogue (Σ_rows dy, while the GEMM reads dy anyway) could replace the sum: ops
//      fc2_bwd_bgrad, proj_bwd_bgrad, separate = launch_column_sum (the same deterministic
//      two-kernel reduction the layer's backward kernels use). The layer at p = 0 also writes the
//      copy, so this comparison is the epilogue's smallest gain.
//   B2 fc1: bias_act_dropout_bwd (dact · mask · act'(z) and the fc1 bias gradient) after the fc2
//      dX GEMM. With GELU tanh and activation_dropout = 0: the dgelu_tanh_bgrad epilogue on that
//      GEMM, reading the forward's aux z: op fc1_bwd_dgelu_tanh_bgrad. ReLU: cuBLASLt's
//      DRELU_BGRAD needs the RELU_AUX_BIAS bit mask from the forward; layers/gemm.h wraps neither,
//      so dReLU + bgrad is NOT measured here (add both epilogues to Gemm first, with GPU tests).
//      bgrad_a on the fc1 dW GEMM (m = ffn) would only replace the partials of the fused kernel.
//   B3 QKV / Q / K/V backward: qkv_bias_split_bwd merges the heads and reduces the bias gradient in
//      the same pass; bgrad_a on the dW GEMM would save only the partials. Not measured.
//
// Experiments: gemm_epilogue/<op>/<dtype>/m=<m>,n=<n>,k=<k>, dtype f16 and bf16, M = the suite's
// batch tokens (8192; quick 4096), H = 1024, F = 4096 (transformer-big). GEMM shapes (row-major,
// layers/gemm_shapes.h):
//   fc1_fwd_*                 linear_forward  m = M, n = F, k = H
//   fc2_fwd_*                 linear_forward  m = M, n = H, k = F
//   proj_fwd_*                linear_forward  m = M, n = H, k = H
//   fc1_bwd_dgelu_tanh_bgrad  linear_dx (fc2) m = M, n = F, k = H
//   fc2_bwd_bgrad             linear_dw (fc2) m = H, n = F, k = M
//   proj_bwd_bgrad            linear_dw (out) m = H, n = H, k = M
// Variants "separate" (the baseline) and "epilogue", both with flops = 2·m·n·k (the elementwise
// work adds no FLOPs: TFLOP/s of the GEMM is the figure of merit) and bytes 0 (GB/s would say
// nothing for a GEMM-bound pair). Params: op, direction, dtype, m, n, k, gemm_flops, epilogue (the
// Gemm epilogue the "epilogue" variant uses), activation, dropout_p, model, tokens.
//
//   op                         separate                              epilogue
//   fc1_fwd_bias_relu          GEMM; bias_act_dropout(relu, p=0)     bias_relu
//   fc1_fwd_bias_gelu_tanh     GEMM; bias_act_dropout(gelu_tanh,0)   bias_gelu_tanh
//   fc1_fwd_bias_gelu_tanh_aux GEMM (ff1_raw kept); as above         bias_gelu_tanh_aux (z kept)
//   fc1_fwd_bias_relu_dropout  GEMM; bias_act_dropout(relu, p)       bias_relu; dropout_fwd(p)
//   fc1_fwd_bias_gelu_tanh_aux_dropout  GEMM; bias_act_dropout(gelu_tanh, p)
//                                                                    bias_gelu_tanh_aux; dropout_fwd
//   fc2/proj_fwd_bias          GEMM; bias_add                        bias
//   fc2/proj_fwd_bias_residual GEMM; bias_dropout_residual(p=0)      bias, beta = 1, C = residual
//   fc1_bwd_dgelu_tanh_bgrad   GEMM; bias_act_dropout_bwd(gelu_tanh, dgelu_tanh_bgrad (aux = z)
//                              p=0) (reads ff1_raw + bias)
//   fc2/proj_bwd_bgrad         GEMM; column_sum(dy)                  bgrad_a
// p is transformer-big's activation_dropout (0.1). At p = 0 the fused dropout kernels run their
// mask-free instance (kernels/dropout_mask.h launch_row_tile_dropout: the same bits, no Philox
// draws), so "separate" at p = 0 is the kernel the layer runs at p = 0, with no mask compute.
//
// Elementwise traffic beyond the GEMM's own operand reads, s = sizeof(T), per element of the
// GEMM's [m, n] output (partials of the column sums, [row_blocks, n] floats, left out):
//   op                           separate                        epilogue
//   fc1_fwd_bias_<act> (no aux)  3s (raw write, read, act write) 1s (act)
//   fc1_fwd_bias_gelu_tanh_aux   3s (raw kept)                   2s (act, z)
//   fc1_fwd_bias_relu_dropout    3s                              3s (act, read, dropped write)
//   fc1_fwd_..._aux_dropout      3s                              4s (act, z, read, dropped write)
//   fc2/proj_fwd_bias            3s                              1s
//   fc2/proj_fwd_bias_residual   4s (raw w, raw r, residual r,   2s (C read, D write)
//                                    out w)
//   fc1_bwd_dgelu_tanh_bgrad     4s (dact w, dact r, raw r, dx w) 2s (aux r, dx w)
//   fc2/proj_bwd_bgrad           + s·k·m for the column sum's    0 (the GEMM reads dy anyway)
//                                  read of dy ([M, out] = [k, m])
//
// Unsupported epilogues: prepare() asks Gemm::has_algorithm() for both products and throws
// seqbench::Error naming the epilogue, the dtype and the shape when cuBLASLt has none on the
// device. The runner (suites/runner.cpp) catches it per variant: the experiment is left out of
// layers.json and recorded there as failed checks run/layers/<experiment>/<variant> with the
// message; every other experiment and suite is measured and reported, and seqbench exits non-zero.
// Run with --filter to leave such an experiment out.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/bias_act_dropout.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "layers/config.h"
#include "layers/gemm.h"
#include "layers/gemm_shapes.h"
#include "layers/memory_planner.h"
#include "suites/layers/layer_experiments.h"
#include "suites/layers/layer_timing.h"
#include "suites/operators/check_util.h"
#include "suites/suite_layers.h"

namespace seqbench::layer_experiments {

using layers::GemmEpilogue;
using layers::GemmProblem;

namespace {

// Which comparison an experiment makes (the "op" param; see the table above).
enum class EpilogueOp {
  fc1_fwd_bias_relu,
  fc1_fwd_bias_gelu_tanh,
  fc1_fwd_bias_gelu_tanh_aux,
  fc1_fwd_bias_relu_dropout,
  fc1_fwd_bias_gelu_tanh_aux_dropout,
  fc2_fwd_bias,
  proj_fwd_bias,
  fc2_fwd_bias_residual,
  proj_fwd_bias_residual,
  fc1_bwd_dgelu_tanh_bgrad,
  fc2_bwd_bgrad,
  proj_bwd_bgrad,
};

constexpr EpilogueOp kOps[] = {EpilogueOp::fc1_fwd_bias_relu,
                               EpilogueOp::fc1_fwd_bias_gelu_tanh,
                               EpilogueOp::fc1_fwd_bias_gelu_tanh_aux,
                               EpilogueOp::fc1_fwd_bias_relu_dropout,
                               EpilogueOp::fc1_fwd_bias_gelu_tanh_aux_dropout,
                               EpilogueOp::fc2_fwd_bias,
                               EpilogueOp::proj_fwd_bias,
                               EpilogueOp::fc2_fwd_bias_residual,
                               EpilogueOp::proj_fwd_bias_residual,
                               EpilogueOp::fc1_bwd_dgelu_tanh_bgrad,
                               EpilogueOp::fc2_bwd_bgrad,
                               EpilogueOp::proj_bwd_bgrad};

// The GEMM of a comparison: which product of which nn.Linear.
enum class Product { forward, dx, dw };
enum class Dim { hidden, ffn };

struct OpInfo {
  const char* name;
  bool backward;
  GemmEpilogue epilogue;
  kernels::Activation activation;  // fc1 ops only
  bool has_activation;
  bool dropout;   // activation dropout at the preset's p (fc1 *_dropout ops)
  bool residual;  // bias epilogue with beta = 1, C = residual
  Product product;
  Dim out_f, in_f;  // the nn.Linear's weight [out_f, in_f]
};

struct Shape {
  std::int64_t m, n, k;
};

OpInfo info(EpilogueOp op) {
  using A = kernels::Activation;
  using E = GemmEpilogue;
  constexpr Dim F = Dim::ffn, H = Dim::hidden;
  switch (op) {
    case EpilogueOp::fc1_fwd_bias_relu:
      return {"fc1_fwd_bias_relu", false, E::bias_relu, A::relu, true, false, false, Product::forward, F, H};
    case EpilogueOp::fc1_fwd_bias_gelu_tanh:
      return {"fc1_fwd_bias_gelu_tanh",
              false,
              E::bias_gelu_tanh,
              A::gelu_tanh,
              true,
              false,
              false,
              Product::forward,
              F,
              H};
    case EpilogueOp::fc1_fwd_bias_gelu_tanh_aux:
      return {"fc1_fwd_bias_gelu_tanh_aux",
              false,
              E::bias_gelu_tanh_aux,
              A::gelu_tanh,
              true,
              false,
              false,
              Product::forward,
              F,
              H};
    case EpilogueOp::fc1_fwd_bias_relu_dropout:
      return {"fc1_fwd_bias_relu_dropout",
              false,
              E::bias_relu,
              A::relu,
              true,
              true,
              false,
              Product::forward,
              F,
              H};
    case EpilogueOp::fc1_fwd_bias_gelu_tanh_aux_dropout:
      return {"fc1_fwd_bias_gelu_tanh_aux_dropout",
              false,
              E::bias_gelu_tanh_aux,
              A::gelu_tanh,
              true,
              true,
              false,
              Product::forward,
              F,
              H};
    case EpilogueOp::fc2_fwd_bias:
      return {"fc2_fwd_bias", false, E::bias, A::relu, false, false, false, Product::forward, H, F};
    case EpilogueOp::proj_fwd_bias:
      return {"proj_fwd_bias", false, E::bias, A::relu, false, false, false, Product::forward, H, H};
    case EpilogueOp::fc2_fwd_bias_residual:
      return {"fc2_fwd_bias_residual", false, E::bias, A::relu, false, false, true, Product::forward, H, F};
    case EpilogueOp::proj_fwd_bias_residual:
      return {"proj_fwd_bias_residual", false, E::bias, A::relu, false, false, true, Product::forward, H, H};
    case EpilogueOp::fc1_bwd_dgelu_tanh_bgrad:
      // The fc2 dX GEMM (fc2's weight is [H, F]), whose output is fc1's activation gradient.
      return {"fc1_bwd_dgelu_tanh_bgrad",
              true,
              E::dgelu_tanh_bgrad,
              A::gelu_tanh,
              true,
              false,
              false,
              Product::dx,
              H,
              F};
    case EpilogueOp::fc2_bwd_bgrad:
      return {"fc2_bwd_bgrad", true, E::bgrad_a, A::relu, false, false, false, Product::dw, H, F};
    case EpilogueOp::proj_bwd_bgrad:
      break;
  }
  return {"proj_bwd_bgrad", true, E::bgrad_a, A::relu, false, false, false, Product::dw, H, H};
}

std::int64_t dim(Dim which, std::int64_t hidden, std::int64_t ffn) {
  return which == Dim::hidden ? hidden : ffn;
}

// The row-major GEMM shape of layers/gemm_shapes.h's product for `rows` tokens.
Shape gemm_shape(const OpInfo& o, std::int64_t rows, std::int64_t hidden, std::int64_t ffn) {
  const std::int64_t out_f = dim(o.out_f, hidden, ffn), in_f = dim(o.in_f, hidden, ffn);
  switch (o.product) {
    case Product::forward:
      return {rows, out_f, in_f};
    case Product::dx:
      return {rows, in_f, out_f};
    case Product::dw:
      break;
  }
  return {out_f, in_f, rows};
}

// The GEMM problem (no epilogue) of the comparison on the given buffers: `a` is the input (forward),
// dy (dX, dW); `b` the weight (forward, dX) or the layer input (dW); `d` the output.
GemmProblem plain_problem(const OpInfo& o, const void* a, const void* b, void* d, std::int64_t rows,
                          std::int64_t hidden, std::int64_t ffn) {
  const std::int64_t out_f = dim(o.out_f, hidden, ffn), in_f = dim(o.in_f, hidden, ffn);
  switch (o.product) {
    case Product::forward:
      return layers::linear_forward(a, b, d, rows, out_f, in_f);
    case Product::dx:
      return layers::linear_dx(a, b, d, rows, out_f, in_f);
    case Product::dw:
      break;
  }
  return layers::linear_dw(a, b, d, rows, out_f, in_f);
}

// One experiment's device state. Operand A ([rows of A, cols of A] as stored), B, the outputs and
// the elementwise tensors, all sized for the op; unused ones stay empty.
template <class T>
struct EpilogueState {
  DeviceBuffer<unsigned char> gemm_workspace;
  std::unique_ptr<layers::Gemm> gemm;
  DeviceBuffer<T> a, b, raw, out, aux, tmp, bias, dbias, residual;
  DeviceBuffer<unsigned char> workspace;  // column partials of the separate bias gradients
  GemmProblem separate, epilogue;         // the two GEMMs (separate: no epilogue)

  EpilogueState() : gemm_workspace(layers::kGemmWorkspaceBytes) {
    gemm = std::make_unique<layers::Gemm>(gemm_workspace.data(), gemm_workspace.size());
  }
};

std::string describe(const OpInfo& o, DType dtype, const Shape& s) {
  return "gemm_epilogue/" + std::string(o.name) + "/" + std::string(dtype_name(dtype)) +
         "/m=" + std::to_string(s.m) + ",n=" + std::to_string(s.n) + ",k=" + std::to_string(s.k);
}

template <class T>
PreparedExperiment prepare_epilogue(EpilogueOp op, std::int64_t rows, std::int64_t hidden, std::int64_t ffn,
                                    float p) {
  using operators::check_util::fill;
  const DType dtype = DTypeTraits<T>::dtype;
  const OpInfo o = info(op);
  const Shape s = gemm_shape(o, rows, hidden, ffn);
  const std::int64_t out_f = dim(o.out_f, hidden, ffn), in_f = dim(o.in_f, hidden, ffn);
  const auto count = [](std::int64_t r, std::int64_t c) { return static_cast<std::size_t>(r * c); };
  auto state = std::make_shared<EpilogueState<T>>();
  EpilogueState<T>& st = *state;

  // Operands as the layer has them: input/gradient rows [rows, ·], weights [out_f, in_f] drawn
  // U(-1/√in, 1/√in) as ParameterBlock does, biases U(-0.05, 0.05).
  const float w_range = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_f)));
  std::uint64_t seed = kInputSeed + 100 * static_cast<std::uint64_t>(op);
  // a: the input [rows, in_f] (forward) or dy [rows, out_f] (dX, dW), U(-1, 1); b: the weight
  // [out_f, in_f] (forward, dX), U(-1/√in, 1/√in), or the input [rows, in_f] (dW), U(-1, 1).
  const bool b_is_weight = o.product != Product::dw;
  st.a = DeviceBuffer<T>(count(rows, o.product == Product::forward ? in_f : out_f));
  st.b = DeviceBuffer<T>(count(b_is_weight ? out_f : rows, in_f));
  fill(st.a, seed++, -1.0f, 1.0f);
  fill(st.b, seed++, b_is_weight ? -w_range : -1.0f, b_is_weight ? w_range : 1.0f);
  const std::size_t n_out = count(s.m, s.n);
  st.out = DeviceBuffer<T>(n_out);
  GemmProblem plain = plain_problem(o, st.a.data(), st.b.data(), nullptr, rows, hidden, ffn);
  const kernels::DropoutConfig dropout{o.dropout ? p : 0.0f, kDropoutSeed, 2};
  const float sign_range = 3.0f;  // pre-activations z (and ff1_raw) drawn in [-3, 3]
  // The GELU input matrix's row pitch: cuBLASLt wants a multiple of 8 (layers/gemm.h), so a width
  // that is not one (an ffn of 68) gets padded rows; the pad columns are neither written nor read,
  // and the minimal bytes count none of them.
  const auto aux_ld = static_cast<std::int64_t>(layers::align_up(static_cast<std::size_t>(s.n), 8));
  const std::size_t n_aux = count(s.m, aux_ld);

  switch (o.epilogue) {
    case GemmEpilogue::bias_relu:
    case GemmEpilogue::bias_gelu_tanh:
    case GemmEpilogue::bias_gelu_tanh_aux:
    case GemmEpilogue::bias:
      st.bias = DeviceBuffer<T>(static_cast<std::size_t>(s.n));
      fill(st.bias, seed++, -0.05f, 0.05f);
      st.raw = DeviceBuffer<T>(n_out);  // the separate GEMM's output
      if (o.dropout) st.tmp = DeviceBuffer<T>(n_out);
      if (o.epilogue == GemmEpilogue::bias_gelu_tanh_aux) st.aux = DeviceBuffer<T>(n_aux);
      if (o.residual) {
        st.residual = DeviceBuffer<T>(n_out);
        fill(st.residual, seed++, -1.0f, 1.0f);
      }
      break;
    case GemmEpilogue::dgelu_tanh_bgrad:
      // separate: dact = raw (the GEMM's output), the fused backward reads tmp = ff1_raw and the
      // bias; epilogue: reads aux = z. Both [rows, ffn].
      st.bias = DeviceBuffer<T>(static_cast<std::size_t>(s.n));
      st.dbias = DeviceBuffer<T>(static_cast<std::size_t>(s.n));
      st.raw = DeviceBuffer<T>(n_out);
      st.tmp = DeviceBuffer<T>(n_out);
      st.aux = DeviceBuffer<T>(n_aux);
      fill(st.bias, seed++, -0.05f, 0.05f);
      fill(st.tmp, seed++, -sign_range, sign_range);
      fill(st.aux, seed++, -sign_range, sign_range);
      st.workspace = DeviceBuffer<unsigned char>(kernels::bias_act_dropout_bwd_workspace_bytes(s.m, s.n));
      break;
    case GemmEpilogue::bgrad_a:
      // dbias [out_f] = Σ_rows dy: the column sum of a [rows, out_f].
      st.dbias = DeviceBuffer<T>(static_cast<std::size_t>(out_f));
      st.workspace = DeviceBuffer<unsigned char>(kernels::column_sum_workspace_bytes(rows, out_f));
      break;
    case GemmEpilogue::none:
      SEQBENCH_FAIL("gemm_epilogue: op " << o.name << " has no epilogue");
  }

  // The two GEMMs.
  st.separate = plain;
  st.separate.d = o.epilogue == GemmEpilogue::bgrad_a ? st.out.data() : st.raw.data();
  st.epilogue = plain;
  st.epilogue.epilogue = o.epilogue;
  switch (o.epilogue) {
    case GemmEpilogue::bias_relu:
    case GemmEpilogue::bias_gelu_tanh:
    case GemmEpilogue::bias_gelu_tanh_aux:
    case GemmEpilogue::bias:
      // With dropout the epilogue writes the activation to tmp and the dropout kernel writes out.
      st.epilogue.d = o.dropout ? st.tmp.data() : st.out.data();
      st.epilogue.bias = st.bias.data();
      if (o.epilogue == GemmEpilogue::bias_gelu_tanh_aux) {
        st.epilogue.aux = st.aux.data();
        st.epilogue.aux_ld = aux_ld;
      }
      if (o.residual) {
        st.epilogue.c = st.residual.data();
        st.epilogue.beta = 1.0f;
      }
      break;
    case GemmEpilogue::dgelu_tanh_bgrad:
      st.epilogue.d = st.out.data();
      st.epilogue.bias = st.dbias.data();
      st.epilogue.aux = st.aux.data();
      st.epilogue.aux_ld = aux_ld;
      break;
    case GemmEpilogue::bgrad_a:
      st.epilogue.d = st.out.data();
      st.epilogue.bias = st.dbias.data();
      break;
    case GemmEpilogue::none:
      break;
  }
  SEQBENCH_REQUIRE(st.gemm->has_algorithm(st.separate, dtype),
                   describe(o, dtype, s)
                       << ": cuBLASLt has no algorithm for the plain GEMM (" << dtype_name(dtype)
                       << " m=" << s.m << " n=" << s.n << " k=" << s.k << ")");
  SEQBENCH_REQUIRE(st.gemm->has_algorithm(st.epilogue, dtype),
                   describe(o, dtype, s)
                       << ": epilogue " << layers::gemm_epilogue_name(o.epilogue)
                       << " is unsupported on this device: cuBLASLt has no algorithm for it at "
                       << dtype_name(dtype) << " m=" << s.m << " n=" << s.n << " k=" << s.k
                       << " (the layer must keep the separate kernel here; leave this "
                          "experiment out with --filter to time the others)");

  PreparedExperiment prepared;
  EpilogueState<T>* sp = state.get();
  const std::int64_t m = s.m, n = s.n;
  // The "separate" variant: the plain GEMM, then the op's kernel.
  switch (o.epilogue) {
    case GemmEpilogue::bias_relu:
    case GemmEpilogue::bias_gelu_tanh:
    case GemmEpilogue::bias_gelu_tanh_aux: {
      const kernels::Activation act = o.activation;
      prepared.variants.push_back([sp, m, n, act, dropout](cudaStream_t stream) {
        sp->gemm->template run<T>(sp->separate, stream);
        kernels::launch_bias_act_dropout_fwd<T>(sp->out.data(), sp->raw.data(), sp->bias.data(), m, n, act,
                                                dropout, stream);
      });
      break;
    }
    case GemmEpilogue::bias: {
      const bool residual = o.residual;
      prepared.variants.push_back([sp, m, n, residual, dropout](cudaStream_t stream) {
        sp->gemm->template run<T>(sp->separate, stream);
        if (residual)
          kernels::launch_bias_dropout_residual_fwd<T>(sp->out.data(), sp->raw.data(), sp->bias.data(),
                                                       sp->residual.data(), m, n, dropout, stream);
        else
          kernels::launch_bias_add<T>(sp->out.data(), sp->raw.data(), sp->bias.data(), m, n, stream);
      });
      break;
    }
    case GemmEpilogue::dgelu_tanh_bgrad: {
      prepared.variants.push_back([sp, m, n, dropout](cudaStream_t stream) {
        sp->gemm->template run<T>(sp->separate, stream);
        kernels::launch_bias_act_dropout_bwd<T>(
            sp->out.data(), sp->dbias.data(), sp->raw.data(), sp->tmp.data(), sp->bias.data(), m, n,
            kernels::Activation::gelu_tanh, dropout, sp->workspace.data(), sp->workspace.size(), stream);
      });
      break;
    }
    case GemmEpilogue::bgrad_a: {
      prepared.variants.push_back([sp, rows, out_f](cudaStream_t stream) {
        sp->gemm->template run<T>(sp->separate, stream);
        kernels::launch_column_sum<T>(sp->dbias.data(), sp->a.data(), rows, out_f, sp->workspace.data(),
                                      sp->workspace.size(), stream);
      });
      break;
    }
    case GemmEpilogue::none:
      break;
  }
  // The "epilogue" variant: the GEMM with the epilogue; the fc1 *_dropout ops then the dropout
  // kernel on its activation (tmp).
  const bool drop = o.dropout;
  prepared.variants.push_back([sp, m, n, drop, dropout](cudaStream_t stream) {
    sp->gemm->template run<T>(sp->epilogue, stream);
    if (drop)
      kernels::launch_dropout_fwd<T>(sp->out.data(), sp->tmp.data(), static_cast<std::size_t>(m * n), dropout,
                                     nullptr, 0, stream);
  });
  // One run of each before timing (the plans exist already; this loads the kernels).
  for (const Work& w : prepared.variants) w(nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  prepared.state = state;
  return prepared;
}

ExperimentSpec epilogue_experiment(const LayersSuiteShapes& shapes, EpilogueOp op, DType dtype) {
  const std::int64_t rows = shapes.tokens;
  const layers::LayerConfig c = layers_suite_config(shapes, dtype, shapes.tokens, shapes.lengths.back());
  const std::int64_t hidden = c.hidden, ffn = c.ffn;
  const float p = static_cast<float>(c.activation_dropout);
  const OpInfo o = info(op);
  const Shape s = gemm_shape(o, rows, hidden, ffn);
  const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  ExperimentSpec e;
  e.name = describe(o, dtype, s);
  e.params = {{"op", o.name},
              {"direction", o.backward ? "bwd" : "fwd"},
              {"dtype", std::string(dtype_name(dtype))},
              {"m", s.m},
              {"n", s.n},
              {"k", s.k},
              {"gemm_flops", flops},
              {"epilogue", std::string(layers::gemm_epilogue_name(o.epilogue))},
              {"activation", o.has_activation ? kernels::activation_name(o.activation) : "none"},
              {"dropout_p", o.dropout ? std::round(static_cast<double>(p) * 1e6) / 1e6 : 0.0},
              {"model", shapes.model},
              {"tokens", rows}};
  e.baseline = "separate";
  e.variants = {{"separate", 0.0, flops}, {"epilogue", 0.0, flops}};
  e.prepare = [op, dtype, rows, hidden, ffn, p] {
    return dispatch_dtype(
        dtype, [&](auto tag) { return prepare_epilogue<decltype(tag)>(op, rows, hidden, ffn, p); });
  };
  return e;
}

}  // namespace

void add_gemm_epilogue_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const LayersSuiteShapes shapes = layers_suite_shapes(options);
  for (const DType dtype : kLayerDTypes)
    for (const EpilogueOp op : kOps) suite.experiments.push_back(epilogue_experiment(shapes, op, dtype));
}

}  // namespace seqbench::layer_experiments
