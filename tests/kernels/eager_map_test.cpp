// kernels/eager_map.h on the CPU: eager::map_vector is the whole body of a thread of the unfused
// baselines' elementwise kernel, host-and-device, so it runs here on host memory, thread by
// thread: for n from 0 to 300 (whole vectors, tails, fewer elements than one vector), row lengths
// 1, 3, 8 and 37, one and two inputs, 16-byte aligned pointers and pointers one element off (the
// scalar path), and in place on either input. Every element of [0, n) must equal fn of its inputs, row and
// column rounded once to T (the same float arithmetic the device does: bitwise), fn must never see an element
// outside [0, n), and the guard elements after the output must stay poisoned, as must everything when a
// thread past the end runs.
#include "kernels/eager_map.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace seqbench::kernels::eager {
namespace {

// out = a·1.5 + b - row + 0.25·col, and a count of calls outside [0, n).
struct Probe {
  std::int64_t n, row_len;
  int* outside;
  float operator()(float a, float b, std::int64_t row, std::int64_t col) const {
    if (row < 0 || col < 0 || col >= row_len || row * row_len + col >= n) ++*outside;
    return a * 1.5f + b - static_cast<float>(row) + 0.25f * static_cast<float>(col);
  }
};

enum class InPlace { no, on_in0, on_in1 };  // out separate, out == in0, out == in1

template <class T>
void expect_map(std::int64_t n, std::int64_t row_len, int inputs, int offset, InPlace in_place,
                std::mt19937& rng) {
  constexpr int K = Packed<T>::kSize;
  constexpr int kGuard = 2 * K;
  const std::string where = std::string(DTypeTraits<T>::name) + " n=" + std::to_string(n) +
                            " row_len=" + std::to_string(row_len) + " inputs=" + std::to_string(inputs) +
                            " offset=" + std::to_string(offset) +
                            (in_place == InPlace::on_in0   ? " out=in0"
                             : in_place == InPlace::on_in1 ? " out=in1"
                                                           : "");
  SCOPED_TRACE(where);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  // 16-byte aligned storage (as cudaMalloc gives), then `offset` elements in.
  const auto size = static_cast<std::size_t>(n + offset + kGuard + K);
  std::vector<Packed<T>> s0(size / K + 1), s1(size / K + 1), so(size / K + 1);
  T* in0 = reinterpret_cast<T*>(s0.data()) + offset;
  T* in1 = reinterpret_cast<T*>(s1.data()) + offset;
  T* out = in_place == InPlace::on_in0   ? in0
           : in_place == InPlace::on_in1 ? in1
                                         : reinterpret_cast<T*>(so.data()) + offset;
  for (std::int64_t i = 0; i < n; ++i) {
    in0[i] = from_float<T>(u(rng));
    in1[i] = from_float<T>(u(rng));
  }
  const T poison = from_float<T>(12345.0f);
  for (std::int64_t i = in_place == InPlace::no ? 0 : n; i < n + kGuard; ++i) out[i] = poison;
  std::vector<float> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    a[static_cast<std::size_t>(i)] = to_float(in0[i]);
    if (inputs == 2) b[static_cast<std::size_t>(i)] = to_float(in1[i]);
  }

  int outside = 0;
  const Probe fn{n, row_len, &outside};
  const MapArgs<T> args{
      out, in0,     inputs == 2 ? in1 : nullptr,
      n,   row_len, is_vector_aligned(out) && is_vector_aligned(in0) && is_vector_aligned(in1)};
  const std::int64_t threads = (n + K - 1) / K + 3;  // the grid rounds up: threads past the end run too
  for (std::int64_t v = 0; v < threads; ++v) {
    if (inputs == 2)
      map_vector<T, 2>(args, fn, v);
    else
      map_vector<T, 1>(args, fn, v);
  }
  EXPECT_EQ(outside, 0) << "fn was called for an element outside [0, n)";
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const float want =
        a[k] * 1.5f + b[k] - static_cast<float>(i / row_len) + 0.25f * static_cast<float>(i % row_len);
    const T w = from_float<T>(want);
    ASSERT_EQ(std::memcmp(&out[i], &w, sizeof(T)), 0)
        << "element " << i << ": got " << to_float(out[i]) << ", want " << to_float(w);
  }
  for (std::int64_t i = n; i < n + kGuard; ++i)
    ASSERT_EQ(std::memcmp(&out[i], &poison, sizeof(T)), 0) << "guard element " << i << " was written";
}

template <class T>
void expect_all_shapes(std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::int64_t n = 0; n <= 300; n += (n < 40 ? 1 : 37))
    for (const std::int64_t row_len : {1, 3, 8, 37})
      for (const int inputs : {1, 2})
        for (const int offset : {0, 1}) {
          expect_map<T>(n, row_len, inputs, offset, InPlace::no, rng);
          expect_map<T>(n, row_len, inputs, offset, InPlace::on_in0, rng);
          if (inputs == 2) expect_map<T>(n, row_len, inputs, offset, InPlace::on_in1, rng);
        }
}

TEST(EagerMap, EveryThreadWritesExactlyItsElementsFloat) {
  expect_all_shapes<float>(1);
}
TEST(EagerMap, EveryThreadWritesExactlyItsElementsHalf) {
  expect_all_shapes<__half>(2);
}
TEST(EagerMap, EveryThreadWritesExactlyItsElementsBf16) {
  expect_all_shapes<__nv_bfloat16>(3);
}

}  // namespace
}  // namespace seqbench::kernels::eager
