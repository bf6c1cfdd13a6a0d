// EmbeddingLayer on the GPU against reference/embedding.h: random shapes (odd H, padded batches,
// both position encodings and indexings, both backwards, batches at and below the planned maxima)
// in all three dtypes, outputs and gradients poisoned before each run with guard regions checked,
// the per-element bounds of the kernels' own checks (derived in suites/operators/embedding.cu,
// "Tolerances": the same formulas here, not loosened), bitwise determinism of the deterministic
// backward, and the steady state: after the first forward (which allocates the planned block),
// further steps allocate nothing.

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
#include "core/error.h"
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
  EmbeddingLayerOptions options;
  std::int64_t batch = 0, len = 0;
  double pad_share = 0.0;
  bool right_padded = false;  // padding at the end of each sentence (as batches are), else anywhere
  std::uint64_t seed = 0, offset = 0;
  std::string describe() const {
    const EmbeddingLayerConfig& c = config;
    std::ostringstream os;
    os << "B=" << batch << " L=" << len << " H=" << c.embedding_dim << " vocab=" << c.vocab_size
       << " max_batch_tokens=" << c.max_batch_tokens << " max_seq_len=" << c.max_seq_len
       << " pad=" << c.padding_idx << " share=" << pad_share
       << (right_padded ? " right-padded" : " scattered") << (c.learned() ? " learned" : " sinusoidal")
       << (c.indexing == PositionIndexing::slot ? "/slot" : "/nonpad") << " offset=" << c.position_offset
       << " scale=" << c.effective_scale() << " p=" << c.dropout
       << (options.deterministic_backward ? " sorted" : " atomic") << " seed=" << seed << "/" << offset;
    return os.str();
  }
};

std::vector<Case> make_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int fixed_hidden[] = {1, 3, 127, 1023, 4097, 8, 512, 768, 2, 1000};
  const int vocabs[] = {1, 2, 7, 50, 300, 5000, 50257};
  std::vector<Case> cases;
  for (int i = 0; i < 20; ++i) {
    Case k;
    EmbeddingLayerConfig& c = k.config;
    c.embedding_dim = i < 10 ? fixed_hidden[i] : 1 + static_cast<int>(rng() % 2000);
    c.vocab_size = i == 1 || i == 8 ? 50257 : vocabs[rng() % 7];
    if (static_cast<std::int64_t>(c.vocab_size) * c.embedding_dim > 4'000'000)
      c.vocab_size = 300;  // host reference
    c.max_seq_len = 1 + static_cast<int>(rng() % 64);
    const int tokens_cap = std::max(c.max_seq_len, static_cast<int>(120'000 / c.embedding_dim));
    c.max_batch_tokens = c.max_seq_len * (1 + static_cast<int>(rng() % 8));
    c.max_batch_tokens = std::min(c.max_batch_tokens, std::max(c.max_seq_len, tokens_cap));
    // Half the cases run at the maxima; the others below them (a workspace planned larger than used).
    k.len = i % 2 == 0 ? c.max_seq_len
                       : 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(c.max_seq_len));
    const std::int64_t max_b = c.max_batch_tokens / k.len;
    k.batch = i % 2 == 0 ? max_b : 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_b));
    c.padding_idx = rng() % 4 == 0 ? -1 : static_cast<int>(rng() % static_cast<unsigned>(c.vocab_size));
    k.pad_share = static_cast<double>(rng() % 5) / 8.0;
    k.right_padded = rng() % 2 == 0;
    c.positions = i % 2 == 0 ? PositionEncoding::learned : PositionEncoding::sinusoidal;
    c.indexing = (i / 2) % 2 == 0 ? PositionIndexing::nonpad_count : PositionIndexing::slot;
    // LightSeq's offset 0, or fairseq's padding_idx + 1 (small ids only: the learned table and the
    // host reference grow with it).
    c.position_offset =
        rng() % 2 == 0 ? 0 : (c.padding_idx >= 0 && c.padding_idx < 64 ? c.padding_idx + 1 : 2);
    if (rng() % 3 == 0) c.scale = rng() % 2 == 0 ? 1.0 : -1.25;  // else sqrt(H)
    const double ps[] = {0.0, 0.1, 0.5};
    c.dropout = ps[rng() % 3];
    k.options.deterministic_backward = i % 5 != 3;
    k.seed = rng();
    k.offset = rng() % 1000;
    cases.push_back(k);
  }
  return cases;
}

// Right padding: each sentence keeps a random length >= 1 and pads the rest; scattered: a share of
// the tokens anywhere.
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
  Tally fwd, bwd, determinism, steady;
  explicit Tallies(const std::string& dt)
      : fwd("layers/embedding/fwd/" + dt, kRule),
        bwd("layers/embedding/bwd/" + dt, kRule),
        determinism(
            "layers/embedding/determinism/" + dt,
            "bitwise: a second step on the same layer reproduces y and (sorted backward) the gradients"),
        steady("layers/embedding/steady_state/" + dt,
               "one allocation (the planned block, at the first forward); none in later steps") {}
  static constexpr const char* kRule =
      "the per-element bounds of suites/operators/embedding.cu (fused forward: (u_T + 5u)|y| + 16u sinusoid "
      "+ "
      "eta_T; sorted rows: (min(m,32) + ceil(s/32) + 4)u A; atomic rows: m (u_T A + eta_T) + 5u A); dropped "
      "elements, padding rows and unused gradient rows exact";
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
  const std::int64_t pos_rows = learned ? c.num_positions() : 0;
  const auto tok_elems = static_cast<std::size_t>(c.vocab_size * h);
  const auto pos_elems = static_cast<std::size_t>(pos_rows * h);

  const std::vector<std::int32_t> tokens = make_tokens(k);
  const std::vector<T> table = random_values<T>(tok_elems, k.seed + 2, -1.0f, 1.0f);
  const std::vector<T> pos_table = random_values<T>(pos_elems, k.seed + 3, -1.0f, 1.0f);
  const std::vector<T> dy = random_values<T>(nh, k.seed + 4, -1.0f, 1.0f);

  // The reference, with exactly the layer's kernel parameters (the scale as the float it uses).
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
  const ref::Matrix dy_m = to_matrix(dy, n, h);
  const ref::KeepMask keep = ref::make_dropout_mask(n, h, rc.dropout_p, k.seed, k.offset);
  const ref::Matrix want_y = ref::embedding_forward(tok_m, table_m, pos_m, rc, keep);
  const ref::EmbeddingGrads want = ref::embedding_backward(dy_m, tok_m, table_m, pos_m, rc, keep);
  const ref::PositionMatrix positions = ref::embedding_positions(tok_m, rc);
  const ref::Matrix g = ref::dropout_backward(dy_m, keep, rc.dropout_p);
  const double ks = ref::dropout_scale(rc.dropout_p);

  DeviceBuffer<std::int32_t> tokens_d(tokens);
  DeviceBuffer<T> table_d(table), pos_d(pos_table), dy_d(dy);
  Guarded<T> y(nh, 0), dt(tok_elems, 0), dp(pos_elems, 0);
  CudaAllocator cuda;
  CountingAllocator counter(cuda);
  const EmbeddingLayerWeights w{table_d.data(), learned ? pos_d.data() : nullptr};
  const EmbeddingLayerGrads gr{dt.data(), learned ? dp.data() : nullptr};
  EmbeddingLayer layer(c, w, gr, counter, k.options);

  std::vector<T> y1, dt1, dp1;
  for (int step = 0; step < 3; ++step) {
    y.poison();
    dt.poison();
    dp.poison();
    layer.forward(y.data(), tokens_d.data(), static_cast<std::size_t>(k.batch),
                  static_cast<std::size_t>(k.len), k.seed, k.offset, nullptr);
    layer.backward(dy_d.data(), tokens_d.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    if (step == 0) {
      y1 = y.download(t.fwd, where);
      dt1 = dt.download(t.bwd, where);
      dp1 = dp.download(t.bwd, where);
      t.steady.add_exact(
          counter.stats().allocations == (layer.block_bytes() > 0 ? 1u : 0u), where,
          "the first step made " + std::to_string(counter.stats().allocations) + " allocations");
      continue;
    }
    const std::vector<T> ys = y.download(t.determinism, where);
    t.determinism.add_exact(same_bits(ys, y1), where,
                            "forward of step " + std::to_string(step) + " differs bitwise");
    const std::vector<T> dts = dt.download(t.determinism, where), dps = dp.download(t.determinism, where);
    if (k.options.deterministic_backward) {
      t.determinism.add_exact(same_bits(dts, dt1) && same_bits(dps, dp1), where,
                              "sorted backward of step " + std::to_string(step) + " differs bitwise");
    }
  }
  t.steady.add_exact(counter.stats().allocations == (layer.block_bytes() > 0 ? 1u : 0u), where,
                     "steps 2 and 3 allocated (" + std::to_string(counter.stats().allocations) + " in all)");

  // Forward, element by element (suites/operators/embedding.cu, "fused y").
  const double s = rc.scale;
  const double dpos = learned ? 0.0 : 16 * v;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t tok = tokens[static_cast<std::size_t>(i)];
    const bool pad = c.padding_idx >= 0 && tok == c.padding_idx;
    for (std::int64_t col = 0; col < h; ++col) {
      const auto e = static_cast<std::size_t>(i * h + col);
      const double kk = pad || keep.data()[e] == 0 ? 0.0 : 1.0;
      const double want_e = want_y.data()[e];
      t.fwd.add(as_double(y1[e]), want_e, kk * ((u + 5 * v) * std::fabs(want_e) + ks * (1 + v) * dpos + eta),
                where, e);
    }
  }
  // Gradients, row by row ("sorted" / "atomic" row sums).
  const auto check_table = [&](const ref::Matrix& want_t, const std::vector<T>& got, double out_scale,
                               bool by_position) {
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
      const double seg =
          by_position && c.indexing == PositionIndexing::slot ? static_cast<double>(k.batch) : m;
      const double depth = std::min(m, static_cast<double>(kernels::kEmbeddingSortChunk)) +
                           std::ceil(seg / kernels::kEmbeddingSortChunk);
      for (std::int64_t col = 0; col < h; ++col) {
        const auto idx = static_cast<std::size_t>(r * h + col);
        const double wv = want_t(r, col), A = abs_sum[idx], have = m > 0 ? 1.0 : 0.0;
        const double bound = k.options.deterministic_backward
                                 ? u * std::fabs(wv) + eta + (depth + 4) * v * A
                                 : u * std::fabs(wv) + m * (u * A + eta) + 5 * v * A;
        t.bwd.add(as_double(got[idx]), wv, have * bound, where, idx);
      }
    }
  };
  check_table(want.d_token_table, dt1, s, false);
  if (learned) check_table(want.d_position_table, dp1, 1.0, true);
}

template <class T>
void run_all(std::uint64_t seed) {
  Tallies t(DTypeTraits<T>::name);
  for (const Case& k : make_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 5)))
    check_case<T>(k, t);
  for (const Tally* tally : {&t.fwd, &t.bwd, &t.determinism, &t.steady}) {
    const CheckResult r = tally->result();
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
}

TEST(EmbeddingLayerGpu, MatchesTheReferenceInEveryDtype) {
  SEQBENCH_REQUIRE_GPU();
  run_all<float>(20261123);
  run_all<__half>(20261123);
  run_all<__nv_bfloat16>(20261123);
}

TEST(EmbeddingLayerGpu, BatchAboveTheMaximaIsRefusedWithBothNumbers) {
  SEQBENCH_REQUIRE_GPU();
  EmbeddingLayerConfig c;
  c.vocab_size = 10;
  c.embedding_dim = 8;
  c.max_batch_tokens = 32;
  c.max_seq_len = 8;
  c.dtype = DType::f32;
  DeviceBuffer<float> table(80), y(8 * 40), d_table(80);
  DeviceBuffer<std::int32_t> tokens(40);
  CudaAllocator cuda;
  CountingAllocator counter(cuda);
  EmbeddingLayer layer(c, {table.data(), nullptr}, {d_table.data(), nullptr}, counter);
  try {
    layer.forward(y.data(), tokens.data(), 5, 8, 1, 0, nullptr);
    ADD_FAILURE() << "a batch of 5 x 8 tokens ran on a layer planned for 32";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("5 x 8 = 40"), std::string::npos) << what;
    EXPECT_NE(what.find("max_batch_tokens 32"), std::string::npos) << what;
  }
  EXPECT_EQ(counter.stats().allocations, 0u);
}

}  // namespace
}  // namespace seqbench::layers
