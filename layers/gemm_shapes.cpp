#include "layers/gemm_shapes.h"

namespace seqbench::layers {

GemmProblem linear_forward(const void* in, const void* w, void* out, std::int64_t rows, std::int64_t out_f,
                           std::int64_t in_f) {
  GemmProblem g;
  g.op_a = GemmOp::none;
  g.op_b = GemmOp::transpose;
  g.m = rows;
  g.n = out_f;
  g.k = in_f;
  g.a = in;
  g.lda = in_f;
  g.b = w;
  g.ldb = in_f;
  g.d = out;
  g.ldc = out_f;
  return g;
}

GemmProblem linear_dx(const void* dy, const void* w, void* dx, std::int64_t rows, std::int64_t out_f,
                      std::int64_t in_f) {
  GemmProblem g;
  g.m = rows;
  g.n = in_f;
  g.k = out_f;
  g.a = dy;
  g.lda = out_f;
  g.b = w;
  g.ldb = in_f;
  g.d = dx;
  g.ldc = in_f;
  return g;
}

GemmProblem linear_dw(const void* dy, const void* in, void* dw, std::int64_t rows, std::int64_t out_f,
                      std::int64_t in_f) {
  GemmProblem g;
  g.op_a = GemmOp::transpose;  // dy stored [rows, out_f] = [k, m]
  g.m = out_f;
  g.n = in_f;
  g.k = rows;
  g.a = dy;
  g.lda = out_f;
  g.b = in;
  g.ldb = in_f;
  g.d = dw;
  g.ldc = in_f;
  return g;
}

GemmProblem per_head(GemmOp op_a, const void* a, std::int64_t a_rows, std::int64_t a_cols, GemmOp op_b,
                     const void* b, std::int64_t b_rows, std::int64_t b_cols, void* d, std::int64_t count,
                     float alpha) {
  GemmProblem g;
  g.op_a = op_a;
  g.op_b = op_b;
  g.m = op_a == GemmOp::none ? a_rows : a_cols;
  g.k = op_a == GemmOp::none ? a_cols : a_rows;
  g.n = op_b == GemmOp::none ? b_cols : b_rows;
  g.a = a;
  g.lda = a_cols;
  g.b = b;
  g.ldb = b_cols;
  g.d = d;
  g.ldc = g.n;
  g.alpha = alpha;
  g.batch_count = count;
  g.stride_a = a_rows * a_cols;
  g.stride_b = b_rows * b_cols;
  g.stride_c = g.m * g.n;
  return g;
}

}  // namespace seqbench::layers
