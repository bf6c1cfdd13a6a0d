// The QKV bias + split / merge kernels on the GPU: every launcher (fused and unfused) against
// reference/attention.h through the suite's checks (which `seqbench check` also runs), plus:
// split and merge are inverse permutations bitwise, the vector and scalar paths give the same
// bits, and an empty batch gives a zero bias gradient.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "kernels/qkv_reshape.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::HeadsShape;
using operators::check_util::random_values;

constexpr std::uint64_t kSeed = 20240921;

HeadsShape shape(std::int64_t batch, std::int64_t len, std::int64_t heads, std::int64_t hidden,
                 std::int64_t projections) {
  HeadsShape s;
  s.batch = batch;
  s.len = len;
  s.heads = heads;
  s.hidden = hidden;
  s.projections = projections;
  return s;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return operators::check_util::same_bits(a, b);
}

// n elements of device memory starting `misalign` elements into the allocation, holding `host`.
template <class T>
struct Offset {
  DeviceBuffer<T> buffer;
  std::size_t m;
  Offset(std::size_t n, std::size_t misalign) : buffer(n + misalign), m(misalign) { buffer.fill_bytes(0xFF); }
  T* data() { return buffer.data() + m; }
  void upload(const std::vector<T>& host) {
    SEQBENCH_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    const std::vector<T> all = buffer.copy_to_host();
    return {all.begin() + static_cast<std::ptrdiff_t>(m), all.end()};
  }
};

TEST(QkvReshapeGpu, EveryLauncherMatchesTheReference) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<CheckResult> results = operators::qkv_reshape_gpu_checks(kSeed);
  std::set<std::string> names;
  for (const CheckResult& r : results) {
    names.insert(r.name);
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
  EXPECT_EQ(results.size(), 3u * 10u);
  for (const std::string dtype : {"f32", "f16", "bf16"}) {
    for (const std::string kernel :
         {"split_fwd", "split_bwd_dprojected", "split_bwd_dbias", "merge_heads", "split_heads", "determinism",
          "unfused_split_fwd", "unfused_split_bwd_dprojected", "unfused_split_bwd_dbias",
          "unfused_merge_heads"}) {
      EXPECT_EQ(names.count("operators/qkv_reshape/" + kernel + "/" + dtype), 1u) << kernel << "/" << dtype;
    }
  }
}

// split_heads(merge_heads(x)) == x and merge_heads(split_heads(y)) == y, bitwise, on any shape
// and alignment.
template <class T>
void expect_round_trip(const HeadsShape& s, std::size_t misalign) {
  const auto n = static_cast<std::size_t>(s.elements());
  const std::vector<T> x = random_values<T>(n, 5, -3.0f, 3.0f);
  Offset<T> a(n, misalign), b(n, 0), c(n, misalign);
  a.upload(x);
  kernels::launch_merge_heads<T>(b.data(), a.data(), s, nullptr);
  kernels::launch_split_heads<T>(c.data(), b.data(), s, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(c.download(), x)) << "merge then split, misalign " << misalign;
  kernels::launch_split_heads<T>(b.data(), a.data(), s, nullptr);
  kernels::launch_merge_heads<T>(c.data(), b.data(), s, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(c.download(), x)) << "split then merge, misalign " << misalign;
}

TEST(QkvReshapeGpu, SplitAndMergeAreInversePermutations) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::size_t m : {0, 1, 3}) {
    expect_round_trip<float>(shape(3, 17, 8, 512, 3), m);
    expect_round_trip<float>(shape(1, 1, 3, 1023, 2), m);
    expect_round_trip<__half>(shape(5, 9, 17, 4097, 1), m);
    expect_round_trip<__nv_bfloat16>(shape(2, 64, 16, 1024, 3), m);
    expect_round_trip<__nv_bfloat16>(shape(7, 3, 6, 6, 2), m);
  }
}

// The fused split and its backward give the same bits on the Packed path (aligned, d % K == 0)
// and the scalar path (every tensor one element off): same float operations, same order.
template <class T>
void expect_paths_agree(const HeadsShape& s) {
  const auto n = static_cast<std::size_t>(s.elements()), cols = static_cast<std::size_t>(s.cols());
  const std::vector<T> x = random_values<T>(n, 7, -2.0f, 2.0f), bias = random_values<T>(cols, 8, -1.0f, 1.0f);
  const std::vector<T> dh = random_values<T>(n, 9, -1.0f, 1.0f);
  const std::size_t ws_bytes = kernels::qkv_bias_split_bwd_workspace_bytes(s);
  std::vector<T> y[2], dp[2], db[2];
  for (const std::size_t m : {0, 1}) {
    Offset<T> x_d(n, m), bias_d(cols, m), dh_d(n, m), y_d(n, m), dp_d(n, m), db_d(cols, m);
    x_d.upload(x);
    bias_d.upload(bias);
    dh_d.upload(dh);
    DeviceBuffer<unsigned char> workspace(ws_bytes);
    kernels::launch_qkv_bias_split_fwd<T>(y_d.data(), x_d.data(), bias_d.data(), s, nullptr);
    kernels::launch_qkv_bias_split_bwd<T>(dp_d.data(), db_d.data(), dh_d.data(), s, workspace.data(),
                                          ws_bytes, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    y[m] = y_d.download();
    dp[m] = dp_d.download();
    db[m] = db_d.download();
  }
  EXPECT_TRUE(same_bits(y[0], y[1])) << "split fwd";
  EXPECT_TRUE(same_bits(dp[0], dp[1])) << "d_projected";
  EXPECT_TRUE(same_bits(db[0], db[1])) << "dbias";
}

TEST(QkvReshapeGpu, VectorAndScalarPathsAgreeBitwise) {
  SEQBENCH_REQUIRE_GPU();
  expect_paths_agree<float>(shape(4, 64, 8, 512, 3));
  expect_paths_agree<float>(shape(3, 33, 16, 1024, 2));
  expect_paths_agree<__half>(shape(2, 100, 8, 512, 1));
  expect_paths_agree<__nv_bfloat16>(shape(8, 64, 16, 1024, 3));
}

TEST(QkvReshapeGpu, ZeroRowsGiveAZeroBiasGradient) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::int64_t hidden : {1, 1000, 4097}) {
    const HeadsShape s = shape(0, 7, 1, hidden, 3);
    DeviceBuffer<__half> dbias(static_cast<std::size_t>(s.cols()));
    dbias.fill_bytes(0xFF);
    kernels::launch_qkv_bias_split_bwd<__half>(nullptr, dbias.data(), nullptr, s, nullptr, 0, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto v : dbias.copy_to_host()) ASSERT_EQ(to_float(v), 0.0f) << "hidden=" << hidden;
  }
}

}  // namespace
}  // namespace seqbench
