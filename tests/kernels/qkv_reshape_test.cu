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
#include "tests/kernels/heads_shape.h"

namespace seqbench {
namespace {

using kernels::HeadsShape;
using kernels::qkv_test::shape;
using operators::check_util::random_values;

constexpr std::uint64_t kSeed = 20240921;

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

// A strided projected side (projected_ld: one layer's column block [c0, c0 + P·H) of a wider
// [rows, ld] matrix, layers/cross_kv.h's use) gives the same bits as the packed block: the split
// (with bias) and split_heads read only the block; the backward and the merge write only the block
// (the other columns keep their poison) and the bias gradient is the packed one's.
template <class T>
void expect_strided_matches_packed(HeadsShape s, std::int64_t ld, std::int64_t c0) {
  SCOPED_TRACE("rows " + std::to_string(s.rows()) + " cols " + std::to_string(s.cols()) + " ld " +
               std::to_string(ld) + " c0 " + std::to_string(c0));
  const auto rows = static_cast<std::size_t>(s.rows()), cols = static_cast<std::size_t>(s.cols());
  const auto n = rows * cols, wide_n = rows * static_cast<std::size_t>(ld),
             off = static_cast<std::size_t>(c0);
  const std::vector<T> wide = random_values<T>(wide_n, 11, -2.0f, 2.0f),
                       bias = random_values<T>(cols, 12, -1.0f, 1.0f);
  const std::vector<T> dh = random_values<T>(n, 13, -1.0f, 1.0f);
  std::vector<T> block(n);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      block[r * cols + c] = wide[r * static_cast<std::size_t>(ld) + off + c];
  const std::size_t ws_bytes = kernels::qkv_bias_split_bwd_workspace_bytes(s);
  DeviceBuffer<T> wide_d(wide), block_d(block), bias_d(bias), dh_d(dh);
  DeviceBuffer<T> y_packed(n), y_strided(n), h_packed(n), h_strided(n), dp_packed(n), db_packed(cols),
      db_strided(cols);
  DeviceBuffer<T> dp_strided(wide_n), m_strided(wide_n), m_packed(n);
  dp_strided.fill_bytes(0xFF);
  m_strided.fill_bytes(0xFF);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  HeadsShape strided = s;
  strided.projected_ld = ld;
  kernels::launch_qkv_bias_split_fwd<T>(y_packed.data(), block_d.data(), bias_d.data(), s, nullptr);
  kernels::launch_qkv_bias_split_fwd<T>(y_strided.data(), wide_d.data() + off, bias_d.data(), strided,
                                        nullptr);
  kernels::launch_split_heads<T>(h_packed.data(), block_d.data(), s, nullptr);
  kernels::launch_split_heads<T>(h_strided.data(), wide_d.data() + off, strided, nullptr);
  kernels::launch_qkv_bias_split_bwd<T>(dp_packed.data(), db_packed.data(), dh_d.data(), s, ws.data(),
                                        ws_bytes, nullptr);
  kernels::launch_qkv_bias_split_bwd<T>(dp_strided.data() + off, db_strided.data(), dh_d.data(), strided,
                                        ws.data(), ws_bytes, nullptr);
  kernels::launch_merge_heads<T>(m_packed.data(), dh_d.data(), s, nullptr);
  kernels::launch_merge_heads<T>(m_strided.data() + off, dh_d.data(), strided, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(y_strided.copy_to_host(), y_packed.copy_to_host())) << "split fwd";
  EXPECT_TRUE(same_bits(h_strided.copy_to_host(), h_packed.copy_to_host())) << "split_heads";
  EXPECT_TRUE(same_bits(db_strided.copy_to_host(), db_packed.copy_to_host())) << "dbias";
  const std::vector<T> dpp = dp_packed.copy_to_host(), dps = dp_strided.copy_to_host();
  const std::vector<T> mp = m_packed.copy_to_host(), ms = m_strided.copy_to_host();
  std::uint16_t poison16 = 0xFFFF;
  std::uint32_t poison32 = 0xFFFFFFFFu;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < static_cast<std::size_t>(ld); ++c) {
      const std::size_t i = r * static_cast<std::size_t>(ld) + c;
      const bool inside = c >= off && c < off + cols;
      for (const std::vector<T>* got : {&dps, &ms}) {
        const T want = inside ? (got == &dps ? dpp : mp)[r * cols + (c - off)] : T{};
        if (inside) {
          ASSERT_EQ(std::memcmp(&(*got)[i], &want, sizeof(T)), 0) << "row " << r << " col " << c;
        } else {
          ASSERT_EQ(std::memcmp(&(*got)[i], sizeof(T) == 2 ? static_cast<const void*>(&poison16) : &poison32,
                                sizeof(T)),
                    0)
              << "gap column " << c << " of row " << r << " was written";
        }
      }
    }
  }
}

TEST(QkvReshapeGpu, StridedProjectedSideMatchesThePackedBlock) {
  SEQBENCH_REQUIRE_GPU();
  // Vector path (d % K == 0, ld % K == 0, aligned block start) and scalar ones (odd d, odd ld,
  // a block start off the vector grid), 1 to 3 "layers" of 2H columns.
  expect_strided_matches_packed<float>(shape(2, 9, 4, 64, 2), 3 * 128, 128);
  expect_strided_matches_packed<float>(shape(3, 5, 3, 21, 2), 2 * 42 + 1, 43);
  expect_strided_matches_packed<__half>(shape(4, 33, 8, 512, 2), 2 * 1024, 1024);
  expect_strided_matches_packed<__half>(shape(1, 7, 3, 12, 2), 3 * 24, 48);
  expect_strided_matches_packed<__half>(shape(2, 3, 1, 4, 2), 8, 0);  // ld = P·H spelled out
  expect_strided_matches_packed<__nv_bfloat16>(shape(5, 13, 5, 40, 2), 4 * 80, 160);
  expect_strided_matches_packed<__nv_bfloat16>(shape(2, 11, 2, 6, 3), 19, 1);
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
