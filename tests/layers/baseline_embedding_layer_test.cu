// BaselineEmbeddingLayer on the GPU against reference/embedding.h, and beside the managed
// EmbeddingLayer on the same inputs: random shapes (odd H, right-padded and scattered padding,
// no padding token, both position encodings and indexings, p in {0, 0.1, 0.5}, batches at and
// below the maxima) in all three dtypes; outputs and gradient tables poisoned (guarded) before
// each step; the eager allocation pattern (a caching allocator reaches the device only in the
// first step; nothing is held after a non-retaining backward; retain_graph keeps the graph and a
// second backward gives the same bounds).
//
// Tolerances: the unfused baseline runs the op sequence of the operator suite's "unfused" variant
// (kernels/embedding.h), so its per-element bounds are those derived in
// suites/operators/embedding.cu ("Tolerances"), restated for this layer, with u = unit_roundoff(T),
// v = unit_roundoff(f32), η = underflow_error(T), ks = 1/(1-p), keep ∈ {0, 1}:
//   y       : keep·[(u + 4v)|y| + ks·((u + v)(|s·t| + |e| + |pos|) + 3η) + η]
//             (s·t rounded to T once: u|s·t| + η, v for the float multiply; the position row read
//             from the table rounded double → float → T: (u + v)|pos| + η (exact for learned rows);
//             the add rounded to T: u|e| + η with e = s·t + pos; dropout_apply_u8 multiplies by ks
//             in float (2v: the scale and the product) and rounds once more: u|y| + η; masked_fill is
//             exact; the v terms of the float ops are bounded by 4v|y| + v·ks·(...) above)
//   tables  : u|want| + (m + 2)·u·A + m·(2 + |s|)·η + 5v·A per element of a row used by m
//             tokens, A = |out_scale|·Σ|g_i| over them (per token, g = dy·keep·ks is rounded to T
//             by dropout's backward, and its underflow η is then multiplied by s, and s·g is rounded
//             once more: u·A + m·|s|·η and u·A + m·η in all; each of the m T atomics of index_add_
//             rounds its partial sum: m·(u·A + η); 5v for the float ops);
//             a row no token uses, the padding row included, must be exactly 0.
// The managed layer's bounds are EmbeddingLayer's own (tests/layers/embedding_layer_test.cu); here
// it is checked only against the baseline's exact zeros (padding rows, dropped elements, unused
// gradient rows): both layers must agree exactly where the math says 0, with the same mask.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "layers/baseline_embedding_layer.h"
#include "layers/caching_allocator.h"
#include "layers/device_allocator.h"
#include "layers/embedding_layer.h"
#include "reference/dropout.h"
#include "reference/embedding.h"
#include "suites/operators/check_util.h"
#include "tests/common/gpu_test.h"

namespace seqbench::layers {
namespace {

using namespace operators::check_util;
using kernels::PositionEncoding;
using kernels::PositionIndexing;

struct Case {
  EmbeddingLayerConfig config;
  std::int64_t batch = 0, len = 0;
  double pad_share = 0.0;
  bool right_padded = false;
  std::uint64_t seed = 0, offset = 0;
  std::string describe() const {
    const EmbeddingLayerConfig& c = config;
    std::ostringstream os;
    os << "B=" << batch << " L=" << len << " H=" << c.embedding_dim << " vocab=" << c.vocab_size
       << " max_batch_tokens=" << c.max_batch_tokens << " max_seq_len=" << c.max_seq_len
       << " pad=" << c.padding_idx << " share=" << pad_share
       << (right_padded ? " right-padded" : " scattered") << (c.learned() ? " learned" : " sinusoidal")
       << (c.indexing == PositionIndexing::slot ? "/slot" : "/nonpad") << " offset=" << c.position_offset
       << " scale=" << c.effective_scale() << " p=" << c.dropout << " seed=" << seed << "/" << offset;
    return os.str();
  }
};

std::vector<Case> make_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int fixed_hidden[] = {1, 3, 127, 1023, 4097, 8, 1024, 768, 2, 1000};
  const int vocabs[] = {2, 7, 50, 300, 5000, 32000};
  std::vector<Case> cases;
  for (int i = 0; i < 20; ++i) {
    Case k;
    EmbeddingLayerConfig& c = k.config;
    c.embedding_dim = i < 10 ? fixed_hidden[i] : 1 + static_cast<int>(rng() % 2000);
    c.vocab_size = vocabs[rng() % 6];
    if (static_cast<std::int64_t>(c.vocab_size) * c.embedding_dim > 4'000'000)
      c.vocab_size = 300;  // host ref
    c.max_seq_len = 1 + static_cast<int>(rng() % 64);
    const int tokens_cap = std::max(c.max_seq_len, static_cast<int>(120'000 / c.embedding_dim));
    c.max_batch_tokens = std::min(c.max_seq_len * (1 + static_cast<int>(rng() % 8)), tokens_cap);
    k.len = i % 2 == 0 ? c.max_seq_len
                       : 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(c.max_seq_len));
    const std::int64_t max_b = c.max_batch_tokens / k.len;
    k.batch = i % 2 == 0 ? max_b : 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_b));
    // fairseq's padding index 1 mostly; none (-1) for every fourth case.
    c.padding_idx = i % 4 == 3 ? -1 : std::min(1, c.vocab_size - 1);
    k.pad_share = c.padding_idx >= 0 ? static_cast<double>(rng() % 5) / 8.0 : 0.0;
    k.right_padded = i % 3 != 0;
    c.positions = i % 2 == 0 ? PositionEncoding::sinusoidal : PositionEncoding::learned;
    c.indexing = (i / 2) % 2 == 0 ? PositionIndexing::nonpad_count : PositionIndexing::slot;
    c.position_offset = rng() % 2 == 0 ? 0 : 2;
    if (rng() % 3 == 0) c.scale = rng() % 2 == 0 ? 1.0 : -1.25;  // else sqrt(H)
    const double ps[] = {0.0, 0.1, 0.5};
    c.dropout = ps[i % 3];
    k.seed = rng();
    k.offset = rng() % 1000;
    cases.push_back(k);
  }
  return cases;
}

std::vector<std::int32_t> make_tokens(const Case& k) {
  std::mt19937_64 rng(k.seed + 1);
  const EmbeddingLayerConfig& c = k.config;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(k.batch * k.len));
  for (std::int64_t b = 0; b < k.batch; ++b) {
    const std::int64_t keep = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(k.len));
    for (std::int64_t l = 0; l < k.len; ++l) {
      const bool pad =
          c.padding_idx >= 0 && (k.right_padded ? (k.pad_share > 0 && l >= keep)
                                                : static_cast<double>(rng() % 1000) < 1000.0 * k.pad_share);
      tokens[static_cast<std::size_t>(b * k.len + l)] =
          pad ? c.padding_idx : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.vocab_size));
    }
  }
  return tokens;
}

struct Tallies {
  Tally fwd, bwd, retained, managed_zeros, allocations;
  explicit Tallies(const std::string& dt)
      : fwd("layers/baseline_embedding/fwd/" + dt, kRule),
        bwd("layers/baseline_embedding/bwd/" + dt, kRule),
        retained("layers/baseline_embedding/retain_graph/" + dt,
                 "a second backward of a retained graph within the same bounds; the graph is kept"),
        managed_zeros("layers/baseline_embedding/managed_zeros/" + dt,
                      "the managed layer is exactly 0 wherever the baseline must be (same mask)"),
        allocations("layers/baseline_embedding/allocations/" + dt,
                    "device allocations only in the first step (caching allocator); nothing held after a "
                    "non-retaining backward but the sinusoid buffer") {}
  static constexpr const char* kRule =
      "the unfused bounds of suites/operators/embedding.cu (y: (u_T + 4u)|y| + ks((u_T + u)(|s t| + |e| + "
      "|pos|) + 3 eta_T) + eta_T; rows: u_T|want| + (m + 2) u_T A + m (2 + |scale|) eta_T + 5u A); dropped "
      "elements, "
      "padding rows and unused gradient rows exact";
};

template <class T>
void check_case(const Case& k, Tallies& t) {
  const DType dtype = DTypeTraits<T>::dtype;
  const double u = unit_roundoff(dtype), v = unit_roundoff(DType::f32), eta = underflow_error(dtype);
  const std::string where = k.describe();
  EmbeddingLayerConfig c = k.config;
  c.dtype = dtype;
  const bool learned = c.learned();
  const std::int64_t n = k.batch * k.len, h = c.embedding_dim;
  const auto nh = static_cast<std::size_t>(n * h);
  const std::int64_t pos_rows = c.num_positions();
  const auto tok_elems = static_cast<std::size_t>(c.vocab_size * h);
  const auto pos_elems = learned ? static_cast<std::size_t>(pos_rows * h) : 0;

  const std::vector<std::int32_t> tokens = make_tokens(k);
  const std::vector<T> table = random_values<T>(tok_elems, k.seed + 2, -1.0f, 1.0f);
  const std::vector<T> pos_table = random_values<T>(pos_elems, k.seed + 3, -1.0f, 1.0f);
  const std::vector<T> dy = random_values<T>(nh, k.seed + 4, -1.0f, 1.0f);

  const kernels::EmbeddingConfig kc = c.kernel_config(k.seed, k.offset);
  ref::EmbeddingConfig rc;
  rc.scale = static_cast<double>(kc.scale);
  rc.padding_idx = c.padding_idx;
  rc.positions = learned ? ref::PositionEncoding::learned : ref::PositionEncoding::sinusoidal;
  rc.indexing = c.indexing == PositionIndexing::slot ? ref::PositionIndexing::slot
                                                     : ref::PositionIndexing::nonpad_count;
  rc.position_offset = c.position_offset;
  rc.dropout_p = static_cast<double>(kc.dropout.p);
  ref::TokenMatrix tok_m(k.batch, k.len);
  for (std::int64_t i = 0; i < n; ++i) tok_m.data()[i] = tokens[static_cast<std::size_t>(i)];
  const ref::Matrix table_m = to_matrix(table, c.vocab_size, h);
  const ref::Matrix pos_m = learned ? to_matrix(pos_table, pos_rows, h) : ref::Matrix();
  const ref::Matrix sin_m = learned ? ref::Matrix() : ref::sinusoidal_positions(pos_rows, h);
  const ref::Matrix dy_m = to_matrix(dy, n, h);
  const ref::KeepMask keep = ref::make_dropout_mask(n, h, rc.dropout_p, k.seed, k.offset);
  const ref::Matrix want_y = ref::embedding_forward(tok_m, table_m, pos_m, rc, keep);
  const ref::EmbeddingGrads want = ref::embedding_backward(dy_m, tok_m, table_m, pos_m, rc, keep);
  const ref::PositionMatrix positions = ref::embedding_positions(tok_m, rc);
  const ref::Matrix g = ref::dropout_backward(dy_m, keep, rc.dropout_p);
  const double ks = ref::dropout_scale(rc.dropout_p);

  DeviceBuffer<std::int32_t> tokens_d(tokens);
  DeviceBuffer<T> table_d(table), pos_d(pos_table), dy_d(dy);
  Guarded<T> y(nh, 0), dt(tok_elems, 0), dp(pos_elems, 0), ym(nh, 0), dtm(tok_elems, 0), dpm(pos_elems, 0);
  CudaAllocator cuda;
  CountingAllocator counter(cuda), managed_counter(cuda);
  std::vector<T> y1, dt1, dp1, dt2, dp2;
  std::uint64_t first_step = 0;
  {
    CachingAllocator cache(counter);
    const EmbeddingLayerWeights w{table_d.data(), learned ? pos_d.data() : nullptr};
    BaselineEmbeddingLayer layer(c, w, {dt.data(), learned ? dp.data() : nullptr}, cache);
    EmbeddingLayer managed(c, w, {dtm.data(), learned ? dpm.data() : nullptr}, managed_counter);
    for (int step = 0; step < 3; ++step) {
      y.poison();
      dt.poison();
      dp.poison();
      layer.forward(y.data(), tokens_d.data(), static_cast<std::size_t>(k.batch),
                    static_cast<std::size_t>(k.len), k.seed, k.offset, nullptr);
      const bool retain = step == 2;
      layer.backward(dy_d.data(), tokens_d.data(), nullptr, retain);
      SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
      if (step == 0) {
        y1 = y.download(t.fwd, where);
        dt1 = dt.download(t.bwd, where);
        dp1 = dp.download(t.bwd, where);
        first_step = counter.stats().allocations;
      }
      if (!retain) {
        t.allocations.add_exact(layer.saved_bytes() == 0, where,
                                std::to_string(layer.saved_bytes()) + " bytes held after a backward");
        const std::size_t buffer = learned ? 0 : static_cast<std::size_t>(pos_rows * h) * sizeof(T);
        t.allocations.add_exact(
            cache.stats().allocated_bytes == CachingAllocator::round_size(buffer), where,
            std::to_string(cache.stats().allocated_bytes) + " bytes allocated after a backward");
      } else {
        const bool saves = kc.dropout.p > 0.0f || learned;
        t.retained.add_exact((layer.saved_bytes() > 0) == saves, where,
                             "retain_graph kept " + std::to_string(layer.saved_bytes()) + " bytes");
        dt.poison();
        dp.poison();
        layer.backward(dy_d.data(), tokens_d.data(), nullptr, true);
        SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
        dt2 = dt.download(t.retained, where);
        dp2 = dp.download(t.retained, where);
      }
    }
    t.allocations.add_exact(counter.stats().allocations == first_step, where,
                            "steps 2 and 3 reached the device (" +
                                std::to_string(counter.stats().allocations) + " allocations, " +
                                std::to_string(first_step) + " in the first step)");
    managed.forward(ym.data(), tokens_d.data(), static_cast<std::size_t>(k.batch),
                    static_cast<std::size_t>(k.len), k.seed, k.offset, nullptr);
    managed.backward(dy_d.data(), tokens_d.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const std::vector<T> ym1 = ym.download(t.managed_zeros, where);
  const std::vector<T> dtm1 = dtm.download(t.managed_zeros, where),
                       dpm1 = dpm.download(t.managed_zeros, where);

  // Forward, element by element.
  const double s = rc.scale;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t tok = tokens[static_cast<std::size_t>(i)];
    const bool pad = c.padding_idx >= 0 && tok == c.padding_idx;
    for (std::int64_t col = 0; col < h; ++col) {
      const auto e_idx = static_cast<std::size_t>(i * h + col);
      const double kk = pad || keep.data()[e_idx] == 0 ? 0.0 : 1.0;
      const double want_e = want_y.data()[e_idx];
      const double st = pad ? 0.0 : s * table_m(tok, col);
      const double pos = learned ? pos_m(positions.data()[i], col) : sin_m(positions.data()[i], col);
      const double e = st + pos;
      t.fwd.add(as_double(y1[e_idx]), want_e,
                kk * ((u + 4 * v) * std::fabs(want_e) +
                      ks * ((u + v) * (std::fabs(st) + std::fabs(e) + std::fabs(pos)) + 3 * eta) + eta),
                where, e_idx);
      if (kk == 0.0) t.managed_zeros.add(as_double(ym1[e_idx]), 0.0, 0.0, where + " y", e_idx);
    }
  }
  // Gradient tables, row by row.
  const auto check_table = [&](const ref::Matrix& want_t, const std::vector<T>& got,
                               const std::vector<T>& again, const std::vector<T>& managed_got,
                               double out_scale, bool by_position) {
    const ref::Index rows = want_t.rows();
    std::vector<double> count(static_cast<std::size_t>(rows), 0.0),
        abs_sum(static_cast<std::size_t>(rows * h), 0.0);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int32_t tok = tokens[static_cast<std::size_t>(i)];
      if (c.padding_idx >= 0 && tok == c.padding_idx) continue;
      const std::int64_t r = by_position ? positions.data()[i] : tok;
      count[static_cast<std::size_t>(r)] += 1;
      for (std::int64_t col = 0; col < h; ++col)
        abs_sum[static_cast<std::size_t>(r * h + col)] += std::fabs(out_scale) * std::fabs(g(i, col));
    }
    for (ref::Index r = 0; r < rows; ++r) {
      const double m = count[static_cast<std::size_t>(r)];
      for (std::int64_t col = 0; col < h; ++col) {
        const auto idx = static_cast<std::size_t>(r * h + col);
        const double wv = want_t(r, col), A = abs_sum[idx], have = m > 0 ? 1.0 : 0.0;
        const double bound =
            have * (u * std::fabs(wv) + (m + 2) * u * A + m * (2 + std::fabs(out_scale)) * eta + 5 * v * A);
        t.bwd.add(as_double(got[idx]), wv, bound, where, idx);
        t.retained.add(as_double(again[idx]), wv, bound, where, idx);
        if (m == 0) t.managed_zeros.add(as_double(managed_got[idx]), 0.0, 0.0, where + " unused row", idx);
      }
    }
  };
  check_table(want.d_token_table, dt1, dt2, dtm1, s, false);
  if (learned) check_table(want.d_position_table, dp1, dp2, dpm1, 1.0, true);
}

template <class T>
void run_all(std::uint64_t seed) {
  Tallies t(DTypeTraits<T>::name);
  for (const Case& k : make_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 17)))
    check_case<T>(k, t);
  for (const Tally* tally : {&t.fwd, &t.bwd, &t.retained, &t.managed_zeros, &t.allocations}) {
    const CheckResult r = tally->result();
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
}

TEST(BaselineEmbeddingLayerGpu, MatchesTheReferenceInEveryDtype) {
  SEQBENCH_REQUIRE_GPU();
  run_all<float>(20261124);
  run_all<__half>(20261124);
  run_all<__nv_bfloat16>(20261124);
}

}  // namespace
}  // namespace seqbench::layers
