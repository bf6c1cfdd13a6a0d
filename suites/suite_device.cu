#include <cublas_v2.h>

#include <cstring>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "kernels/copy.h"
#include "suites/sample_stats.h"
#include "suites/suite_device.h"

namespace seqbench {
namespace {

// Fills with uniform values in [-1, 1): never time on zeros (they can run faster than data).
template <class T>
__global__ void fill_uniform_kernel(T* out, std::size_t n, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = from_float<T>(2.0f * philox_uniform(seed, 0, i) - 1.0f);
}

template <class T>
void fill_uniform(DeviceBuffer<T>& buffer, std::uint64_t seed) {
  fill_uniform_kernel<T><<<1024, 256>>>(buffer.data(), buffer.size(), seed);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

ExperimentSpec copy_experiment(std::size_t bytes) {
  ExperimentSpec e;
  e.name = "copy/" + std::to_string(bytes >> 20) + "MiB";
  e.params = {{"bytes", bytes}};
  e.baseline = "cudaMemcpyAsync";
  e.variants = {{"cudaMemcpyAsync", 2.0 * bytes, 0}, {"copy_kernel", 2.0 * bytes, 0}};
  e.prepare = [bytes] {
    auto src = std::make_shared<DeviceBuffer<unsigned char>>(bytes);
    auto dst = std::make_shared<DeviceBuffer<unsigned char>>(bytes);
    src->fill_bytes(0x5A);
    PreparedExperiment p;
    p.variants.push_back([=](cudaStream_t s) {
      SEQBENCH_CUDA_CHECK(cudaMemcpyAsync(dst->data(), src->data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    p.variants.push_back([=](cudaStream_t s) { kernels::launch_copy(dst->data(), src->data(), bytes, s); });
    p.state = std::make_shared<std::pair<decltype(src), decltype(dst)>>(src, dst);
    return p;
  };
  return e;
}

struct GemmState {
  DeviceBuffer<__nv_bfloat16> a, b, c;
  cublasHandle_t handle = nullptr;
  GemmState(int m, int n, int k)
      : a(static_cast<std::size_t>(m) * k),
        b(static_cast<std::size_t>(k) * n),
        c(static_cast<std::size_t>(m) * n) {
    fill_uniform(a, 1);
    fill_uniform(b, 2);
    SEQBENCH_CUBLAS_CHECK(cublasCreate(&handle));
  }
  ~GemmState() {
    if (handle) cublasDestroy(handle);
  }
  GemmState(const GemmState&) = delete;
  GemmState& operator=(const GemmState&) = delete;
};

// C = A·B in bf16 with fp32 accumulation, column-major, no transposes.
ExperimentSpec gemm_experiment(int size) {
  const double m = size, n = size, k = size;
  ExperimentSpec e;
  e.name = "gemm_bf16/" + std::to_string(size);
  e.params = {{"m", size}, {"n", size}, {"k", size}, {"dtype", "bf16"}, {"accumulate", "f32"}};
  e.baseline = "cublas";
  e.variants = {{"cublas", 2.0 * (m * k + k * n + m * n), 2.0 * m * n * k}};
  e.prepare = [size] {
    auto state = std::make_shared<GemmState>(size, size, size);
    PreparedExperiment p;
    p.variants.push_back([state, size](cudaStream_t s) {
      const float alpha = 1.0f, beta = 0.0f;
      SEQBENCH_CUBLAS_CHECK(cublasSetStream(state->handle, s));
      SEQBENCH_CUBLAS_CHECK(cublasGemmEx(state->handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha,
                                         state->a.data(), CUDA_R_16BF, size, state->b.data(), CUDA_R_16BF,
                                         size, &beta, state->c.data(), CUDA_R_16BF, size, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
    });
    p.state = state;
    return p;
  };
  return e;
}

// The copy kernel against cudaMemcpy at a size with a ragged head and tail (offset 3 bytes).
std::vector<CheckResult> device_gpu_checks(std::uint64_t seed) {
  const std::size_t bytes = (std::size_t{1} << 24) + 13;
  const std::size_t words = bytes / sizeof(float) + 8;  // room for the offset and the tail
  DeviceBuffer<float> src(words), want(words), got(words);
  fill_uniform(src, seed);
  got.fill_bytes(0xFF);
  want.fill_bytes(0xFF);
  const auto at3 = [](DeviceBuffer<float>& b) { return reinterpret_cast<unsigned char*>(b.data()) + 3; };
  SEQBENCH_CUDA_CHECK(cudaMemcpy(at3(want), at3(src), bytes, cudaMemcpyDeviceToDevice));
  kernels::launch_copy(at3(got), at3(src), bytes, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto w = want.copy_to_host(), g = got.copy_to_host();
  // Compare as bits: a copy is exact, and 0xFF poison is NaN, which never equals itself as a float.
  const std::size_t mismatches =
      static_cast<std::size_t>(std::memcmp(w.data(), g.data(), w.size() * sizeof(float)) != 0);
  std::size_t differing_words = 0;
  for (std::size_t i = 0; mismatches && i < w.size(); ++i)
    differing_words += std::memcmp(&w[i], &g[i], sizeof(float)) != 0;
  CheckResult r;
  r.name = "device/copy_kernel/exact";
  r.passed = mismatches == 0;
  r.max_abs_err = mismatches == 0 ? 0.0 : 1.0;
  r.tolerance = 0.0;
  r.detail = std::to_string(bytes) + " bytes at byte offset 3, bitwise against cudaMemcpy; " +
             std::to_string(differing_words) + " 4-byte words differ";
  return {r};
}

}  // namespace

double measure_copy_gbps(GpuTimer& timer, std::size_t bytes) {
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  src.fill_bytes(0x5A);
  const auto samples = timer.sample_ms([&](cudaStream_t s) {
    SEQBENCH_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, s));
  });
  return 2.0 * static_cast<double>(bytes) / (summarize_samples(samples).median * 1e-3) / 1e9;
}

SuiteSpec device_suite(const SuiteOptions& options) {
  SuiteSpec suite;
  suite.name = "device";
  suite.description = "the ceilings: device-to-device copy bandwidth and bf16 GEMM rate";
  suite.needs_gpu = true;
  const std::vector<std::size_t> copy_sizes =
      options.quick
          ? std::vector<std::size_t>{std::size_t{64} << 20}
          : std::vector<std::size_t>{std::size_t{16} << 20, std::size_t{256} << 20, std::size_t{1} << 30};
  for (const std::size_t bytes : copy_sizes) suite.experiments.push_back(copy_experiment(bytes));
  suite.experiments.push_back(gemm_experiment(options.quick ? 4096 : 8192));
  suite.gpu_checks = device_gpu_checks;
  return suite;
}

}  // namespace seqbench
