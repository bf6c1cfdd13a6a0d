#include "layers/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "layers/gemm_heuristic.h"

namespace seqbench::layers {

std::string_view gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::none:
      return "none";
    case GemmEpilogue::bias:
      return "bias";
    case GemmEpilogue::bias_relu:
      return "bias_relu";
    case GemmEpilogue::bias_gelu_tanh:
      return "bias_gelu_tanh";
    case GemmEpilogue::bias_gelu_tanh_aux:
      return "bias_gelu_tanh_aux";
    case GemmEpilogue::dgelu_tanh_bgrad:
      return "dgelu_tanh_bgrad";
    case GemmEpilogue::bgrad_a:
      return "bgrad_a";
  }
  return "unknown";
}

namespace {

constexpr std::int64_t kMaxDim = std::numeric_limits<std::int32_t>::max();

bool has_bias(GemmEpilogue e) {
  return e != GemmEpilogue::none;
}
bool has_aux(GemmEpilogue e) {
  return e == GemmEpilogue::bias_gelu_tanh_aux || e == GemmEpilogue::dgelu_tanh_bgrad;
}
// The bias pointer is an output (a gradient) rather than an input.
bool writes_bias(GemmEpilogue e) {
  return e == GemmEpilogue::dgelu_tanh_bgrad || e == GemmEpilogue::bgrad_a;
}
bool writes_aux(GemmEpilogue e) {
  return e == GemmEpilogue::bias_gelu_tanh_aux;
}

// Stored shape of an operand: [rows, cols] row-major.
struct Stored {
  std::int64_t rows, cols;
};
Stored stored_a(const GemmProblem& p) {
  return p.op_a == GemmOp::none ? Stored{p.m, p.k} : Stored{p.k, p.m};
}
Stored stored_b(const GemmProblem& p) {
  return p.op_b == GemmOp::none ? Stored{p.k, p.n} : Stored{p.n, p.k};
}

std::int64_t extent(Stored s, std::int64_t ld) {
  return s.rows == 0 || s.cols == 0 ? 0 : (s.rows - 1) * ld + s.cols;
}

std::int64_t bias_length(const GemmProblem& p) {
  return p.epilogue == GemmEpilogue::bgrad_a ? p.m : p.n;
}

struct Range {
  std::uintptr_t begin = 0, end = 0;  // [begin, end) bytes; empty when begin == end
};

Range range_of(const void* ptr, std::int64_t elements, std::size_t element_size) {
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (ptr == nullptr || elements <= 0) return {begin, begin};
  return {begin, begin + static_cast<std::uintptr_t>(elements) * element_size};
}

bool overlap(Range a, Range b) {
  return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
}

// The full extent of a batched operand: the last batch's start plus one batch's extent.
std::int64_t batched_extent(std::int64_t one, std::int64_t stride, std::int64_t batches) {
  return one == 0 ? 0 : (batches - 1) * stride + one;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f32:
      break;
  }
  return CUDA_R_32F;
}

cublasOperation_t cublas_op(GemmOp op) {
  return op == GemmOp::none ? CUBLAS_OP_N : CUBLAS_OP_T;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::bias_relu:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::bias_gelu_tanh:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::bias_gelu_tanh_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::dgelu_tanh_bgrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case GemmEpilogue::bgrad_a:
      // Our A is cuBLASLt's B (the operands are swapped for the row-major layout), and the
      // gradient's length is cuBLASLt's n = our m.
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The alignment (a power of two, at most 256 bytes) that every batch's pointer keeps.
std::uint32_t alignment_of(const void* ptr, std::int64_t stride_elements, std::size_t element_size) {
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(ptr) | 256u;
  if (stride_elements != 0) bits |= static_cast<std::uint64_t>(stride_elements) * element_size;
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // lowest set bit
}

}  // namespace

std::int64_t gemm_a_extent(const GemmProblem& p) {
  return extent(stored_a(p), p.lda);
}
std::int64_t gemm_b_extent(const GemmProblem& p) {
  return extent(stored_b(p), p.ldb);
}
std::int64_t gemm_d_extent(const GemmProblem& p) {
  return extent({p.m, p.n}, p.ldc);
}

void validate_gemm(const GemmProblem& p, DType dtype) {
  constexpr const char* op = "gemm";
  SEQBENCH_REQUIRE(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
                   op << ": dtype " << static_cast<int>(dtype) << " is not f32, f16 or bf16");
  SEQBENCH_REQUIRE(p.m >= 0 && p.n >= 0 && p.k >= 0,
                   op << ": shape m=" << p.m << " n=" << p.n << " k=" << p.k << " is negative");
  SEQBENCH_REQUIRE(
      p.m <= kMaxDim && p.n <= kMaxDim && p.k <= kMaxDim,
      op << ": shape m=" << p.m << " n=" << p.n << " k=" << p.k << " has a dimension above " << kMaxDim);
  SEQBENCH_REQUIRE(p.batch_count >= 1 && p.batch_count <= kMaxDim,
                   op << ": batch_count " << p.batch_count << " is outside [1, " << kMaxDim << "]");
  const Stored a = stored_a(p), b = stored_b(p);
  SEQBENCH_REQUIRE(p.lda >= std::max<std::int64_t>(1, a.cols) && p.lda <= kMaxDim,
                   op << ": lda " << p.lda << " is below A's row length " << a.cols << " (A stored " << a.rows
                      << "x" << a.cols << ") or above " << kMaxDim);
  SEQBENCH_REQUIRE(p.ldb >= std::max<std::int64_t>(1, b.cols) && p.ldb <= kMaxDim,
                   op << ": ldb " << p.ldb << " is below B's row length " << b.cols << " (B stored " << b.rows
                      << "x" << b.cols << ") or above " << kMaxDim);
  SEQBENCH_REQUIRE(
      p.ldc >= std::max<std::int64_t>(1, p.n) && p.ldc <= kMaxDim,
      op << ": ldc " << p.ldc << " is below D's row length n=" << p.n << " or above " << kMaxDim);
  SEQBENCH_REQUIRE(
      p.stride_a >= 0 && p.stride_b >= 0 && p.stride_c >= 0,
      op << ": negative batch stride (a=" << p.stride_a << " b=" << p.stride_b << " c=" << p.stride_c << ")");
  const std::int64_t d_one = gemm_d_extent(p);
  if (p.batch_count > 1) {
    SEQBENCH_REQUIRE(p.stride_c >= d_one, op << ": stride_c " << p.stride_c << " < one batch of D (" << d_one
                                             << " elements): batches of the output would overlap");
    SEQBENCH_REQUIRE(p.epilogue == GemmEpilogue::none || p.epilogue == GemmEpilogue::bias,
                     op << ": epilogue " << gemm_epilogue_name(p.epilogue)
                        << " supports batch_count 1 only, got batch_count " << p.batch_count);
  }
  if (p.m == 0 || p.n == 0) {
    SEQBENCH_REQUIRE(!(p.epilogue == GemmEpilogue::bgrad_a && p.n == 0 && p.m > 0),
                     op << ": epilogue bgrad_a with n = 0 still has a bias gradient of " << p.m
                        << " sums to compute; use a column sum (kernels/bias_act_dropout.h) instead");
    SEQBENCH_REQUIRE(p.epilogue != GemmEpilogue::dgelu_tanh_bgrad || p.n == 0 || p.bias != nullptr,
                     op << ": epilogue dgelu_tanh_bgrad needs a bias pointer (its zero gradient is written "
                           "even for m = 0)");
    return;  // nothing to compute
  }
  SEQBENCH_REQUIRE(p.k >= 1, op << ": k = 0 with a non-empty " << p.m << "x" << p.n
                                << " output (an empty sum: zero D yourself rather than launch a GEMM)");
  SEQBENCH_REQUIRE(p.a != nullptr, op << ": a is null");
  SEQBENCH_REQUIRE(p.b != nullptr, op << ": b is null");
  SEQBENCH_REQUIRE(p.d != nullptr, op << ": d is null");
  SEQBENCH_REQUIRE(p.beta == 0.0f || p.c != nullptr, op << ": c is null with beta = " << p.beta);
  SEQBENCH_REQUIRE(!has_bias(p.epilogue) || p.bias != nullptr,
                   op << ": epilogue " << gemm_epilogue_name(p.epilogue) << " needs a bias pointer");
  if (has_aux(p.epilogue)) {
    SEQBENCH_REQUIRE(p.aux != nullptr, op << ": epilogue " << gemm_epilogue_name(p.epilogue) << " needs aux");
    SEQBENCH_REQUIRE(p.aux_ld >= p.n && p.aux_ld % 8 == 0 && p.aux_ld <= kMaxDim,
                     op << ": aux_ld " << p.aux_ld << " must be a multiple of 8 and >= n=" << p.n
                        << " (cuBLASLt's rule for the GELU input matrix)");
  }
  const std::size_t s = dtype_size(dtype);
  const Range d = range_of(p.d, batched_extent(d_one, p.stride_c, p.batch_count), s);
  const Range ra = range_of(p.a, batched_extent(gemm_a_extent(p), p.stride_a, p.batch_count), s);
  const Range rb = range_of(p.b, batched_extent(gemm_b_extent(p), p.stride_b, p.batch_count), s);
  SEQBENCH_REQUIRE(!overlap(d, ra), op << ": output d overlaps input a");
  SEQBENCH_REQUIRE(!overlap(d, rb), op << ": output d overlaps input b");
  if (p.beta != 0.0f && p.c != p.d) {
    const Range rc = range_of(p.c, batched_extent(d_one, p.stride_c, p.batch_count), s);
    SEQBENCH_REQUIRE(!overlap(d, rc), op << ": output d overlaps input c without being c (in-place "
                                            "accumulation needs c == d)");
  }
  const Range bias = has_bias(p.epilogue) ? range_of(p.bias, bias_length(p), s) : Range{};
  const Range aux = has_aux(p.epilogue) ? range_of(p.aux, extent({p.m, p.n}, p.aux_ld), s) : Range{};
  SEQBENCH_REQUIRE(!overlap(d, bias), op << ": bias overlaps output d");
  SEQBENCH_REQUIRE(!overlap(d, aux), op << ": aux overlaps output d");
  SEQBENCH_REQUIRE(!overlap(bias, aux), op << ": bias overlaps aux");
  if (writes_bias(p.epilogue)) {
    SEQBENCH_REQUIRE(!overlap(bias, ra) && !overlap(bias, rb), op << ": bias gradient overlaps input a or b");
  }
  if (writes_aux(p.epilogue)) {
    SEQBENCH_REQUIRE(!overlap(aux, ra) && !overlap(aux, rb), op << ": aux output overlaps input a or b");
  }
}

// ---------------------------------------------------------------------------------------------
// Plans.

namespace {

// Everything the descriptors and the heuristic's choice depend on.
using PlanKey = std::array<std::int64_t, 21>;

PlanKey plan_key(const GemmProblem& p, DType dtype) {
  const std::size_t s = dtype_size(dtype);
  return {static_cast<std::int64_t>(dtype),
          static_cast<std::int64_t>(p.op_a),
          static_cast<std::int64_t>(p.op_b),
          p.m,
          p.n,
          p.k,
          p.lda,
          p.ldb,
          p.ldc,
          p.batch_count,
          p.stride_a,
          p.stride_b,
          p.stride_c,
          static_cast<std::int64_t>(p.epilogue),
          has_aux(p.epilogue) ? p.aux_ld : 0,
          alignment_of(p.a, p.stride_a, s),
          alignment_of(p.b, p.stride_b, s),
          alignment_of(p.c != nullptr ? p.c : p.d, p.stride_c, s),
          alignment_of(p.d, p.stride_c, s),
          has_bias(p.epilogue) ? alignment_of(p.bias, 0, s) : 0,
          has_aux(p.epilogue) ? alignment_of(p.aux, 0, s) : 0};
}

void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value,
              std::size_t size) {
  SEQBENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, value, size));
}

void set_layout_batch(cublasLtMatrixLayout_t layout, std::int64_t batch_count, std::int64_t stride) {
  if (batch_count == 1) return;
  const auto count = static_cast<std::int32_t>(batch_count);
  SEQBENCH_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  SEQBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &stride, sizeof(stride)));
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_d = nullptr;  // cuBLASLt's A, B, C=D
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
  std::string refusal;  // non-empty: cuBLASLt has no algorithm for the problem, and why

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (layout_d != nullptr) cublasLtMatrixLayoutDestroy(layout_d);
    if (layout_b != nullptr) cublasLtMatrixLayoutDestroy(layout_b);
    if (layout_a != nullptr) cublasLtMatrixLayoutDestroy(layout_a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }

  // The per-call pointers of the epilogue (the heuristic also reads them, for their alignment).
  void set_pointers(const GemmProblem& p) {
    if (has_bias(p.epilogue)) set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias));
    if (has_aux(p.epilogue)) set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux));
  }
};

std::string describe_problem(const GemmProblem& p, DType dtype) {
  std::ostringstream os;
  os << dtype_name(dtype) << " m=" << p.m << " n=" << p.n << " k=" << p.k
     << " op_a=" << (p.op_a == GemmOp::none ? "N" : "T") << " op_b=" << (p.op_b == GemmOp::none ? "N" : "T")
     << " lda=" << p.lda << " ldb=" << p.ldb << " ldc=" << p.ldc << " batch=" << p.batch_count
     << " epilogue=" << gemm_epilogue_name(p.epilogue);
  return os.str();
}

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;  // never null; Plan::refusal: no algorithm

  const Plan& find_or_make(const GemmProblem& p, DType dtype);

  std::unique_ptr<Plan> make_plan(const GemmProblem& p, DType dtype) const {
    auto plan = std::make_unique<Plan>();
    const cudaDataType_t type = cuda_type(dtype);
    SEQBENCH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Row-major D = op(A)·op(B) is column-major Dᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's A is our B.
    const cublasOperation_t trans_a = cublas_op(p.op_b), trans_b = cublas_op(p.op_a);
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a));
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b));
    const cublasLtEpilogue_t epilogue = lt_epilogue(p.epilogue);
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
    if (has_bias(p.epilogue)) {
      const auto bias_type = static_cast<std::int32_t>(type);
      set_attr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
    }
    if (has_aux(p.epilogue)) {
      set_attr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.aux_ld, sizeof(p.aux_ld));
    }
    // Column-major views of the row-major operands: a row-major [r, c] matrix with leading
    // dimension ld is a column-major [c, r] one with the same ld.
    const Stored a = stored_a(p), b = stored_b(p);
    SEQBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_a, type,
                                                     static_cast<std::uint64_t>(b.cols),
                                                     static_cast<std::uint64_t>(b.rows), p.ldb));
    SEQBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_b, type,
                                                     static_cast<std::uint64_t>(a.cols),
                                                     static_cast<std::uint64_t>(a.rows), p.lda));
    SEQBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->layout_d, type, static_cast<std::uint64_t>(p.n),
                                                     static_cast<std::uint64_t>(p.m), p.ldc));
    set_layout_batch(plan->layout_a, p.batch_count, p.stride_b);
    set_layout_batch(plan->layout_b, p.batch_count, p.stride_a);
    set_layout_batch(plan->layout_d, p.batch_count, p.stride_c);
    plan->set_pointers(p);

    cublasLtMatmulPreference_t preference = nullptr;
    SEQBENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const std::size_t s = dtype_size(dtype);
    const std::uint32_t align_a = alignment_of(p.b, p.stride_b, s),
                        align_b = alignment_of(p.a, p.stride_a, s),
                        align_c = alignment_of(p.c != nullptr ? p.c : p.d, p.stride_c, s),
                        align_d = alignment_of(p.d, p.stride_c, s);
    cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
    int found = 0;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const std::uint32_t*> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d}};
    for (const auto& [attr, value] : alignments) {
      if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmulPreferenceSetAttribute(preference, attr, value, sizeof(*value));
    }
    bool asked = false;  // whether `status` is the heuristic's answer
    if (status == CUBLAS_STATUS_SUCCESS) {
      status =
          cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->layout_a, plan->layout_b, plan->layout_d,
                                         plan->layout_d, preference, kHeuristicResults, results, &found);
      asked = true;
    }
    cublasLtMatmulPreferenceDestroy(preference);
    // A preference that could not be set is an error; the heuristic's own answer may be a refusal
    // (layers/gemm_heuristic.h): the plan is kept, so that has_algorithm() and run() answer from
    // the cache and run()'s error can say why.
    if (!asked) SEQBENCH_CUBLAS_CHECK(status);
    const HeuristicChoice choice = choose_algorithm(status, results, found);
    if (choice.index < 0) {
      plan->refusal = choice.refusal;
      return plan;
    }
    plan->algo = results[choice.index].algo;
    plan->workspace_bytes = results[choice.index].workspaceSize;
    return plan;
  }
};

Gemm::Gemm(void* workspace, std::size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  SEQBENCH_REQUIRE(workspace_bytes == 0 || workspace != nullptr,
                   "gemm: workspace is null with workspace_bytes = " << workspace_bytes);
  SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(workspace) % 256 == 0,
                   "gemm: workspace is not 256-byte aligned (cuBLASLt's requirement)");
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace_bytes;
  SEQBENCH_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
}

Gemm::~Gemm() {
  impl_->plans.clear();
  if (impl_->handle != nullptr) cublasLtDestroy(impl_->handle);
}

// The cached plan of a non-empty, validated problem, made on first use; a refused one when cuBLASLt
// has no algorithm for it (also cached, so a fallback decision costs one heuristic query).
const Plan& Gemm::Impl::find_or_make(const GemmProblem& p, DType dtype) {
  const PlanKey key = plan_key(p, dtype);
  auto it = plans.find(key);
  if (it == plans.end()) {
    it = plans.emplace(key, make_plan(p, dtype)).first;
  } else if (it->second->refusal.empty()) {
    it->second->set_pointers(p);
  }
  return *it->second;
}

void Gemm::run(const GemmProblem& p, DType dtype, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("gemm");
  validate_gemm(p, dtype);
  if (p.m == 0 || p.n == 0) {
    if (p.epilogue == GemmEpilogue::dgelu_tanh_bgrad && p.n > 0) {  // Σ over no rows
      SEQBENCH_CUDA_CHECK(
          cudaMemsetAsync(p.bias, 0, static_cast<std::size_t>(p.n) * dtype_size(dtype), stream));
    }
    return;
  }
  const Plan& plan = impl_->find_or_make(p, dtype);
  SEQBENCH_REQUIRE(plan.refusal.empty(), "gemm: cuBLASLt has no algorithm for "
                                             << describe_problem(p, dtype) << " with a workspace of "
                                             << impl_->workspace_bytes << " bytes: " << plan.refusal
                                             << " (has_algorithm() tells in advance)");
  const void* c = p.c != nullptr ? p.c : p.d;
  SEQBENCH_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, plan.desc, &p.alpha, p.b, plan.layout_a, p.a,
                                       plan.layout_b, &p.beta, c, plan.layout_d, p.d, plan.layout_d,
                                       &plan.algo, impl_->workspace, plan.workspace_bytes, stream));
}

bool Gemm::has_algorithm(const GemmProblem& p, DType dtype) {
  validate_gemm(p, dtype);
  if (p.m == 0 || p.n == 0) return true;  // nothing for cuBLASLt to do
  return impl_->find_or_make(p, dtype).refusal.empty();
}

std::size_t Gemm::plans() const {
  return impl_->plans.size();
}

std::string Gemm::describe_plan(const GemmProblem& p, DType dtype) const {
  const auto it = impl_->plans.find(plan_key(p, dtype));
  if (it == impl_->plans.end()) return "";
  if (!it->second->refusal.empty()) return "no algorithm: " + it->second->refusal;
  const cublasLtMatmulAlgo_t& algo = it->second->algo;
  std::ostringstream os;
  const std::pair<cublasLtMatmulAlgoConfigAttributes_t, const char*> fields[] = {
      {CUBLASLT_ALGO_CONFIG_ID, "algo"},
      {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile"},
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages"},
      {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk"}};
  for (const auto& [attr, name] : fields) {
    std::int32_t value = 0;  // the four attributes are 32-bit integers
    std::size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) ==
        CUBLAS_STATUS_SUCCESS)
      os << (os.tellp() > 0 ? " " : "") << name << "=" << value;
  }
  os << " workspace=" << it->second->workspace_bytes;
  return os.str();
}

}  // namespace seqbench::layers
