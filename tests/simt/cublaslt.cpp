// The cuBLASLt subset that layers/gemm.cpp calls, on host memory, for the simt build
// (tests/simt/simt.h). Linked instead of libcublasLt, so that the layers' GEMMs (and with them the
// encoder, decoder and cross-K/V layers) run on the CPU against the same references.
//
// What it computes, in cuBLASLt's column-major terms (D is rows × cols = m × n, one batch b):
//
//   x(i, j) = alpha · Σ_q op(A)(i, q) · op(B)(q, j)  [+ beta · C(i, j), C not read when beta = 0]
//   epilogue   DEFAULT          D = x
//              BIAS             D = x + bias[i]
//              RELU_BIAS        D = max(x + bias[i], 0)
//              GELU_BIAS        D = gelu_tanh(x + bias[i])
//              GELU_AUX_BIAS    as GELU_BIAS, and aux(i, j) = x + bias[i] (aux column-major, aux_ld)
//              DGELU_BGRAD      D = gelu_tanh'(aux(i, j)) · x, and bias[i] = Σ_j D(i, j)
//              BGRADB           D = x, and bias[j] = Σ_q op(B)(q, j)
//
// Products of T values are formed in fp32 and summed in fp32 in order q = 0, 1, ..., k-1: one
// legal evaluation order among those cuBLASLt's kernels use (tiles, split-K, tensor-core partial
// sums), with the error of plain recursive summation, γ_k per element; a test bound derived for
// fp32 accumulation in any order holds for it. The bias gradients sum the fp32 values before their
// rounding to T. The GELU is the tanh form, evaluated in fp32 with the host's tanhf.
//
// What cuBLASLt would refuse or fault on is an error here too, printed to stderr and returned as a
// status (so SEQBENCH_CUBLAS_CHECK names the call): descriptors whose shapes do not compose (op(A)
// m × k, op(B) k × n, C and D m × n), a leading dimension below the rows, unequal batch counts,
// types the plan does not support, an epilogue without its pointers or with a batch, an aux_ld that
// is not a multiple of 8; at matmul time, any operand extent (every batch) outside one live device
// allocation, a pointer less aligned than the alignment the heuristic was promised (the
// preference's MIN_ALIGNMENT_*, the bias and aux pointers of the descriptor at heuristic time), and
// a workspace smaller than the algorithm's. The heuristic always finds one algorithm (a plan never
// falls back), asking for min(max workspace, 64 KiB) of workspace, which matmul range-checks and
// overwrites, as a real kernel may.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/simt/runtime_state.h"

namespace simt::detail {
namespace {

constexpr std::uint64_t kAlgoMagic = 0x53494d544c54ull;  // "SIMTLT"
constexpr std::size_t kAlgoWorkspaceCap = std::size_t{64} << 10;

struct MatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  std::int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int32_t bias_type = -1;  // -1: D's type
  const void* aux = nullptr;
  std::int64_t aux_ld = 0;
};

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  std::int32_t batch_count = 1;
  std::int64_t stride = 0;
};

struct Preference {
  std::uint64_t max_workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

// Opaque handles are our objects behind cuBLASLt's pointer types.
MatmulDesc* desc_of(cublasLtMatmulDesc_t d) {
  return reinterpret_cast<MatmulDesc*>(d);
}
Layout* layout_of(cublasLtMatrixLayout_t l) {
  return reinterpret_cast<Layout*>(l);
}
Preference* preference_of(cublasLtMatmulPreference_t p) {
  return reinterpret_cast<Preference*>(p);
}

cublasStatus_t refuse(cublasStatus_t status, const std::string& message) {
  std::fprintf(stderr, "simt cuBLASLt: %s\n", message.c_str());
  return status;
}

template <class V>
cublasStatus_t read_attr(V& out, const void* buf, std::size_t size, const char* name) {
  if (buf == nullptr || size != sizeof(V))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(name) + ": size " + std::to_string(size) +
                                                   " is not the attribute's " + std::to_string(sizeof(V)));
  std::memcpy(&out, buf, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

std::size_t type_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;  // unsupported
  }
}

float load(const void* base, cudaDataType_t t, std::int64_t i) {
  switch (t) {
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

void store(void* base, cudaDataType_t t, std::int64_t i, float v) {
  switch (t) {
    case CUDA_R_16F:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(base)[i] = v;
  }
}

float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

float gelu_tanh_derivative(float x) {
  const float c = 0.7978845608028654f;
  const float t = std::tanh(c * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
}

bool has_bias(std::uint32_t e) {
  return e != CUBLASLT_EPILOGUE_DEFAULT;
}
bool has_aux(std::uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

// The lowest set bit of the pointer (capped at 256): the alignment it keeps.
std::uint32_t alignment(const void* p) {
  const std::uint64_t bits = reinterpret_cast<std::uintptr_t>(p) | 256u;
  return static_cast<std::uint32_t>(bits & (~bits + 1));
}

// Checks the descriptors compose, as cuBLASLt does before it looks for an algorithm.
cublasStatus_t check_problem(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c,
                             const Layout& d) {
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_COMPUTE_32F with fp32 scales is emulated");
  if (type_size(d.type) == 0 || a.type != d.type || b.type != d.type || c.type != d.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A, B, C and D must share one of fp32, fp16 and bf16");
  const std::uint64_t m = d.rows, n = d.cols;
  const std::uint64_t a_rows = desc.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const std::uint64_t k = desc.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const std::uint64_t b_rows = desc.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const std::uint64_t b_cols = desc.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  if (a_rows != m || b_cols != n || b_rows != k || c.rows != m || c.cols != n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "shapes do not compose: op(A) " + std::to_string(a_rows) +
                                                   "x" + std::to_string(k) + ", op(B) " +
                                                   std::to_string(b_rows) + "x" + std::to_string(b_cols) +
                                                   ", D " + std::to_string(m) + "x" + std::to_string(n));
  for (const Layout* l : {&a, &b, &c, &d}) {
    if (l->ld < static_cast<std::int64_t>(std::max<std::uint64_t>(1, l->rows)))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "ld " + std::to_string(l->ld) + " is below the rows " +
                                                     std::to_string(l->rows) + " of a column-major layout");
  }
  if (a.batch_count != d.batch_count || b.batch_count != d.batch_count || c.batch_count != d.batch_count)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "unequal batch counts");
  switch (desc.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADB:
      break;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "epilogue " + std::to_string(desc.epilogue) + " is not emulated");
  }
  if (has_bias(desc.epilogue)) {
    if (desc.bias == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "the epilogue needs a bias pointer");
    if (desc.bias_type != -1 && desc.bias_type != d.type)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "a bias type other than D's is not emulated");
  }
  if (has_aux(desc.epilogue)) {
    if (desc.aux == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "the epilogue needs an aux pointer");
    if (desc.aux_ld < static_cast<std::int64_t>(m) || desc.aux_ld % 8 != 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "aux_ld " + std::to_string(desc.aux_ld) +
                                                     " is not a multiple of 8 at least D's rows " +
                                                     std::to_string(m));
  }
  if (d.batch_count > 1 && desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      desc.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "batched gradient or aux epilogues are not emulated");
  return CUBLAS_STATUS_SUCCESS;
}

// Elements one batch of a column-major layout spans.
std::int64_t span(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return (static_cast<std::int64_t>(l.cols) - 1) * l.ld + static_cast<std::int64_t>(l.rows);
}

// Every batch of an operand inside one allocation, and each batch's pointer as aligned as promised.
cublasStatus_t check_operand(const char* which, const void* ptr, const Layout& l, std::uint32_t align) {
  const std::size_t s = type_size(l.type);
  for (std::int32_t bt = 0; bt < l.batch_count; ++bt) {
    const auto* p = static_cast<const unsigned char*>(ptr) + static_cast<std::size_t>(bt * l.stride) * s;
    if (runtime_check_device_range("cublasLtMatmul", which, p, static_cast<std::size_t>(span(l)) * s) !=
        cudaSuccess)
      return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                    std::string(which) + " of batch " + std::to_string(bt) + " is outside device memory");
    if (alignment(p) < align)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(which) + " of batch " + std::to_string(bt) +
                                                     " is " + std::to_string(alignment(p)) +
                                                     "-byte aligned; the algorithm was chosen for " +
                                                     std::to_string(align));
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace simt::detail

using namespace simt::detail;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  static int context;  // no state: every handle is the same object
  *handle = reinterpret_cast<cublasLtHandle_t>(&context);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  auto* d = new MatmulDesc;
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc_of(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  MatmulDesc& d = *desc_of(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return read_attr(d.trans_a, buf, size, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return read_attr(d.trans_b, buf, size, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return read_attr(d.epilogue, buf, size, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attr(d.bias, buf, size, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return read_attr(d.bias_type, buf, size, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return read_attr(d.aux, buf, size, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return read_attr(d.aux_ld, buf, size, "EPILOGUE_AUX_LD");
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "matmul attribute " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  auto* l = new Layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout_of(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                size_t size) {
  Layout& l = *layout_of(layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return read_attr(l.batch_count, buf, size, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read_attr(l.stride, buf, size, "STRIDED_BATCH_OFFSET");
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "layout attribute " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete preference_of(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  Preference& p = *preference_of(pref);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attr(p.max_workspace, buf, size, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return read_attr(p.align[0], buf, size, "MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return read_attr(p.align[1], buf, size, "MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return read_attr(p.align[2], buf, size, "MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attr(p.align[3], buf, size, "MIN_ALIGNMENT_D_BYTES");
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "preference attribute " + std::to_string(attr) + " is not emulated");
  }
}

// One algorithm: data[0] the magic, data[1..4] the alignments promised for A, B, C and D,
// data[5..6] those of the bias and aux pointers, data[7] the workspace it needs.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (requested < 1 || results == nullptr || returned == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& md = *desc_of(desc);
  const cublasStatus_t st = check_problem(md, *layout_of(a), *layout_of(b), *layout_of(c), *layout_of(d));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const Preference& p = *preference_of(pref);
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = p.align[i];
  r.algo.data[5] = has_bias(md.epilogue) ? alignment(md.bias) : 0;
  r.algo.data[6] = has_aux(md.epilogue) ? alignment(md.aux) : 0;
  r.workspaceSize = std::min<std::uint64_t>(p.max_workspace, kAlgoWorkspaceCap);
  r.algo.data[7] = r.workspaceSize;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t size, size_t* written) {
  if (algo == nullptr || algo->data[0] != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
  std::int32_t value = 0;
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_ID:
      value = 0;  // the one emulated algorithm
      break;
    case CUBLASLT_ALGO_CONFIG_TILE_ID:
    case CUBLASLT_ALGO_CONFIG_STAGES_ID:
      value = 0;  // undefined
      break;
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
      value = 1;
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (buf == nullptr || size != sizeof(value)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &value, sizeof(value));
  if (written != nullptr) *written = sizeof(value);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha_ptr,
                              const void* a_ptr, cublasLtMatrixLayout_t a_layout, const void* b_ptr,
                              cublasLtMatrixLayout_t b_layout, const void* beta_ptr, const void* c_ptr,
                              cublasLtMatrixLayout_t c_layout, void* d_ptr, cublasLtMatrixLayout_t d_layout,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  if (runtime_sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  const MatmulDesc& md = *desc_of(desc);
  const Layout &a = *layout_of(a_layout), &b = *layout_of(b_layout), &c = *layout_of(c_layout),
               &d = *layout_of(d_layout);
  cublasStatus_t st = check_problem(md, a, b, c, d);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (algo == nullptr || algo->data[0] != kAlgoMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the algorithm did not come from the heuristic");
  if (alpha_ptr == nullptr || beta_ptr == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is null");
  const float alpha = *static_cast<const float*>(alpha_ptr), beta = *static_cast<const float*>(beta_ptr);
  const auto promised = [&](int i) { return static_cast<std::uint32_t>(algo->data[i]); };
  if ((st = check_operand("A", a_ptr, a, promised(1))) != CUBLAS_STATUS_SUCCESS) return st;
  if ((st = check_operand("B", b_ptr, b, promised(2))) != CUBLAS_STATUS_SUCCESS) return st;
  if (beta != 0.0f && (st = check_operand("C", c_ptr, c, promised(3))) != CUBLAS_STATUS_SUCCESS) return st;
  if ((st = check_operand("D", d_ptr, d, promised(4))) != CUBLAS_STATUS_SUCCESS) return st;
  const std::int64_t m = static_cast<std::int64_t>(d.rows), n = static_cast<std::int64_t>(d.cols);
  const std::int64_t k = static_cast<std::int64_t>(md.trans_a == CUBLAS_OP_N ? a.cols : a.rows);
  const std::uint32_t e = md.epilogue;
  const bool bgradb = e == CUBLASLT_EPILOGUE_BGRADB;
  const bool bias_grad = bgradb || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;  // the bias pointer is an output
  const bool bias_add = has_bias(e) && !bias_grad;
  const std::int64_t bias_length = bgradb ? n : m;
  const std::size_t s = type_size(d.type);
  if (has_bias(e)) {
    if (runtime_check_device_range("cublasLtMatmul", "bias", md.bias,
                                   static_cast<std::size_t>(bias_length) * s) != cudaSuccess)
      return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "bias is outside device memory");
    if (alignment(md.bias) < promised(5))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "bias is less aligned than at heuristic time");
  }
  if (has_aux(e)) {
    const std::size_t aux_elements = n == 0 ? 0 : static_cast<std::size_t>((n - 1) * md.aux_ld + m);
    if (runtime_check_device_range("cublasLtMatmul", "aux", md.aux, aux_elements * s) != cudaSuccess)
      return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "aux is outside device memory");
    if (alignment(md.aux) < promised(6))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "aux is less aligned than at heuristic time");
  }
  const std::size_t needed = algo->data[7];
  if (workspace_bytes < needed)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "workspace of " + std::to_string(workspace_bytes) +
                                                   " bytes is below the algorithm's " +
                                                   std::to_string(needed));
  if (needed > 0 &&
      runtime_check_device_range("cublasLtMatmul", "workspace", workspace, needed) != cudaSuccess)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "workspace is outside device memory");

  // Checked now; computed now or, on a capturing stream, at each replay of the graph
  // (tests/simt/streams.cpp). The closure holds copies of the descriptor, the layouts and the
  // scalars, as a captured cuBLASLt kernel holds its parameters.
  auto compute = [=] {
    if (needed > 0) std::memset(workspace, 0xa5, needed);
    const auto* A = static_cast<const unsigned char*>(a_ptr);
    const auto* B = static_cast<const unsigned char*>(b_ptr);
    const auto* C = static_cast<const unsigned char*>(c_ptr);
    auto* D = static_cast<unsigned char*>(d_ptr);
    std::vector<float> op_a(static_cast<std::size_t>(m * k)), op_b(static_cast<std::size_t>(n * k));
    std::vector<float> bias_sum(bias_grad ? static_cast<std::size_t>(bias_length) : 0, 0.0f);
    for (std::int32_t bt = 0; bt < d.batch_count; ++bt) {
      const void* ab = A + static_cast<std::size_t>(bt * a.stride) * s;
      const void* bb = B + static_cast<std::size_t>(bt * b.stride) * s;
      const void* cb = beta != 0.0f ? C + static_cast<std::size_t>(bt * c.stride) * s : nullptr;
      void* db = D + static_cast<std::size_t>(bt * d.stride) * s;
      // op(A) row i and op(B) column j, each contiguous over q.
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t q = 0; q < k; ++q)
          op_a[static_cast<std::size_t>(i * k + q)] =
              load(ab, a.type, md.trans_a == CUBLAS_OP_N ? i + q * a.ld : q + i * a.ld);
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t q = 0; q < k; ++q)
          op_b[static_cast<std::size_t>(j * k + q)] =
              load(bb, b.type, md.trans_b == CUBLAS_OP_N ? q + j * b.ld : j + q * b.ld);
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t i = 0; i < m; ++i) {
          const float* ra = &op_a[static_cast<std::size_t>(i * k)];
          const float* rb = &op_b[static_cast<std::size_t>(j * k)];
          float acc = 0.0f;
          for (std::int64_t q = 0; q < k; ++q) acc += ra[q] * rb[q];
          float x = alpha * acc;
          if (beta != 0.0f) x += beta * load(cb, c.type, i + j * c.ld);
          if (bias_add) x += load(md.bias, d.type, i);
          if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
            store(const_cast<void*>(md.aux), d.type, i + j * md.aux_ld, x);
          if (e == CUBLASLT_EPILOGUE_RELU_BIAS) x = std::max(x, 0.0f);
          if (e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) x = gelu_tanh(x);
          if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
            x *= gelu_tanh_derivative(load(md.aux, d.type, i + j * md.aux_ld));
            bias_sum[static_cast<std::size_t>(i)] += x;
          }
          store(db, d.type, i + j * d.ld, x);
        }
      }
      if (bgradb) {
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t q = 0; q < k; ++q)
            bias_sum[static_cast<std::size_t>(j)] += op_b[static_cast<std::size_t>(j * k + q)];
      }
    }
    if (bias_grad) {
      for (std::size_t i = 0; i < bias_sum.size(); ++i)
        store(const_cast<void*>(md.bias), d.type, static_cast<std::int64_t>(i), bias_sum[i]);
    }
  };
  if (simt::detail::runtime_submit("cublasLtMatmul", stream, simt::detail::NodeKind::kernel, compute) !=
      cudaSuccess)
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
