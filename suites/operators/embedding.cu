// Operator-suite experiments and GPU checks for the embedding family (kernels/embedding.h,
// LightSeq2's embedding layer, issue #3).
//
// Experiments: B·L tokens ∈ {4096, 16384} ({4096} quick) x H ∈ {512, 1024} ({512} quick), vocab
// 32000 (and GPT-2's 50257 with learned positions), fp32 and bf16. Forward: "unfused" (make_positions,
// gather, scale, position gather, add, masked_fill, u8 dropout) vs "fused". Backward: "unfused"
// (u8 dropout backward, scale, memset + index_add_ atomics) vs "atomic" and "sorted" (the
// deterministic one). Tokens are uniform over the vocabulary with 10% padding, and for bf16
// sinusoidal also Zipf(1.1)-distributed (",zipf": frequent tokens, as in real text).
// Minimal bytes (the operation's inputs read once and its outputs written once, as the layers suite
// counts them: suites/layers/embedding.cu), with N = B·L tokens, C of them not padding, D_tok the
// distinct non-padding token ids, D_pos the distinct positions they sit at (learned only), s =
// sizeof(T): forward N·4 (tokens) + D_tok·H·s (each needed table row read once: a repeated token
// reads its row again from L2, not from DRAM; padded slots read nothing) (+ D_pos·H·s learned
// position rows) + N·H·s written; backward N·4 + C·H·s (dy of the non-padding slots: padded ones
// send no gradient and are not read) + vocab·H·s (+ num_positions·H·s) for the gradient tables,
// which the operation writes whole (both variants and the baseline zero them first). params carry
// nonpad_tokens, distinct_token_rows, distinct_position_rows and zero_fill_bytes (the tables' rows
// that get no gradient, (vocab - D_tok)·H·s + (num_positions - D_pos)·H·s), so that a reader who
// counts only the rows with a gradient can subtract them. Not counted (variant costs above the
// minimum): the sorted backward reads dy once per table (twice with learned positions), its
// key/sort arrays and chunk partials; the nonpad_count positions pre-pass (B·L·8: the forward, and
// the backwards of learned positions only); the fused forward's sinusoid table (L·H·4 written
// once, then read from L2 by every sentence: kernels/embedding.h).
//
// Checks, against reference/embedding.h in double with ref::make_dropout_mask, over >= 50 random
// shapes per dtype (odd H included, random padding, both encodings and indexings, p ∈ {0, 0.1,
// random, 1}, misaligned tensors for half the cases): fused forward, sorted and atomic backward,
// the unfused forward and backward; outputs and workspace poisoned, guards checked, bitwise
// repeatability of the forward and the sorted backward.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/stream_fork.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/spin_wait.cuh"
#include "reference/dropout.h"
#include "reference/embedding.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using kernels::EmbeddingConfig;
using kernels::EmbeddingShape;
using kernels::PositionEncoding;
using kernels::PositionIndexing;
using namespace check_util;

constexpr float kBenchP = 0.1f;
constexpr std::uint64_t kBenchSeed = 20240919;

// The checks' hold of a fork's side stream (check_case): one thread spinning this long, many
// times the forked launches' main branch at the checked shapes (at most a few thousand tokens).
constexpr unsigned long long kSideHoldNs = 500'000;
__global__ void hold_kernel(unsigned long long ns) {
  kernels::spin_for_ns(ns);
}
constexpr std::uint64_t kBenchOffset = 13;

// Tokens: uniform over [0, vocab), a `pad_share` of them the padding id (when there is one).
std::vector<std::int32_t> random_tokens(std::int64_t n, std::int64_t vocab, std::int32_t padding_idx,
                                        double pad_share, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  for (auto& t : tokens) {
    const bool pad = padding_idx >= 0 && static_cast<double>(rng() % 1000) < 1000.0 * pad_share;
    t = pad ? padding_idx : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));
  }
  return tokens;
}

// Tokens with Zipf-distributed frequencies (P(rank r) ∝ 1/(r+1)^exponent over the vocab - 1
// non-padding ids, the ranks assigned to ids by a Fisher-Yates shuffle), a `pad_share` of them
// the padding id: the few frequent tokens of real text, whose rows collect thousands of
// gradient contributions. Deterministic from the seed (mt19937_64 and our own shuffle and
// inverse-CDF draw; no std:: distribution, whose output is implementation-defined).
std::vector<std::int32_t> zipf_tokens(std::int64_t n, std::int64_t vocab, std::int32_t padding_idx,
                                      double pad_share, double exponent, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> ids;
  for (std::int64_t id = 0; id < vocab; ++id) {
    if (id != padding_idx) ids.push_back(static_cast<std::int32_t>(id));
  }
  for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
  std::vector<double> cdf(ids.size());
  double total = 0.0;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    total += std::pow(static_cast<double>(r + 1), -exponent);
    cdf[r] = total;
  }
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  for (auto& t : tokens) {
    const bool pad = padding_idx >= 0 && static_cast<double>(rng() % 1000) < 1000.0 * pad_share;
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    const auto r = static_cast<std::size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    t = pad ? padding_idx : ids[std::min(r, ids.size() - 1)];
  }
  return tokens;
}

constexpr double kZipfExponent = 1.1;

ref::EmbeddingConfig to_ref(const EmbeddingConfig& c) {
  ref::EmbeddingConfig r;
  r.scale = static_cast<double>(c.scale);
  r.padding_idx = c.padding_idx;
  r.positions = c.positions == PositionEncoding::learned ? ref::PositionEncoding::learned
                                                         : ref::PositionEncoding::sinusoidal;
  r.indexing = c.indexing == PositionIndexing::slot ? ref::PositionIndexing::slot
                                                    : ref::PositionIndexing::nonpad_count;
  r.position_offset = static_cast<ref::Index>(c.position_offset);
  r.dropout_p = static_cast<double>(c.dropout.p);
  return r;
}

// The position table the unfused baseline gathers from: the learned one, or the sinusoidal one
// precomputed on the host (as fairseq does) and rounded to T.
template <class T>
std::vector<T> sinusoid_table(std::int64_t rows, std::int64_t hidden) {
  const ref::Matrix m = ref::sinusoidal_positions(rows, hidden);
  std::vector<T> out(static_cast<std::size_t>(rows * hidden));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = from_float<T>(static_cast<float>(m.data()[i]));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Experiments.

template <class T>
struct BenchState {
  EmbeddingShape shape;
  EmbeddingConfig config;
  std::int64_t n = 0, pos_rows = 0;
  DeviceBuffer<std::int32_t> tokens, positions;
  DeviceBuffer<T> token_table, position_table, out, tmp, tmp2, tmp3, d_tok, d_pos;
  DeviceBuffer<std::uint8_t> mask;
  DeviceBuffer<unsigned char> workspace, positions_ws;  // sorted backward; fused fwd / atomic bwd
  std::optional<OwnedStreamFork> fork;                  // both backwards: their zero fill's side stream
};

template <class T>
ExperimentSpec embedding_experiment(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab,
                                    bool learned, bool backward, bool zipf = false) {
  const std::string dtype = DTypeTraits<T>::name;
  constexpr std::int64_t kLen = 512;
  // The name states the tokens: a count that is not whole sentences would time fewer (or none).
  SEQBENCH_REQUIRE(
      tokens >= kLen && tokens % kLen == 0,
      "embedding experiment: tokens " << tokens << " is not a positive multiple of the length " << kLen);
  EmbeddingShape shape{tokens / kLen, kLen, hidden, vocab, learned ? kLen : 0};
  EmbeddingConfig config;
  config.scale = std::sqrt(static_cast<float>(hidden));
  config.padding_idx = 1;
  config.positions = learned ? PositionEncoding::learned : PositionEncoding::sinusoidal;
  config.indexing = learned ? PositionIndexing::slot : PositionIndexing::nonpad_count;
  config.dropout = {kBenchP, kBenchSeed, kBenchOffset};
  const std::vector<std::int32_t> host_tokens =
      zipf ? zipf_tokens(tokens, vocab, config.padding_idx, 0.1, kZipfExponent, kBenchSeed)
           : random_tokens(tokens, vocab, config.padding_idx, 0.1, kBenchSeed);

  ExperimentSpec e;
  e.name = std::string(backward ? "embedding_bwd/" : "embedding_fwd/") + dtype +
           "/tokens=" + std::to_string(tokens) + ",H=" + std::to_string(hidden) +
           ",vocab=" + std::to_string(vocab) + (learned ? ",learned" : ",sinusoidal") + (zipf ? ",zipf" : "");
  const double s = sizeof(T), n = static_cast<double>(tokens), h = static_cast<double>(hidden);
  std::set<std::int32_t> rows_tok;
  std::set<std::int64_t> rows_pos;
  std::int64_t nonpad = 0;
  for (std::size_t i = 0; i < host_tokens.size(); ++i) {
    if (host_tokens[i] == config.padding_idx) continue;
    ++nonpad;
    rows_tok.insert(host_tokens[i]);
    rows_pos.insert(static_cast<std::int64_t>(i) % kLen);  // slot indexing, offset 0
  }
  const double c = static_cast<double>(nonpad), d_tok = static_cast<double>(rows_tok.size()),
               d_pos = learned ? static_cast<double>(rows_pos.size()) : 0.0;
  const double table_rows = static_cast<double>(vocab) + (learned ? static_cast<double>(kLen) : 0.0);
  const double bytes =
      backward ? n * 4 + c * h * s + table_rows * h * s : n * 4 + (d_tok + d_pos) * h * s + n * h * s;
  const double zero_fill = backward ? (table_rows - d_tok - d_pos) * h * s : 0.0;
  e.params = {{"tokens", tokens},
              {"batch", shape.batch},
              {"seq_len", kLen},
              {"hidden", hidden},
              {"elements", tokens * hidden},
              {"vocab", vocab},
              {"dtype", dtype},
              {"positions", learned ? "learned/slot" : "sinusoidal/nonpad_count"},
              {"padding_share", 0.1},
              {"token_distribution", zipf ? "zipf(1.1)" : "uniform"},
              {"p", std::round(kBenchP * 1e6) / 1e6},
              // What an outside oracle needs to recompute the output (suites/pytorch's parity).
              {"padding_idx", config.padding_idx},
              {"scale", config.scale},
              {"position_offset", config.position_offset},
              {"num_positions", shape.num_positions},
              {"nonpad_tokens", nonpad},
              {"distinct_token_rows", rows_tok.size()},
              {"distinct_position_rows", learned ? rows_pos.size() : 0},
              {"zero_fill_bytes", zero_fill},
              {"direction", backward ? "bwd" : "fwd"}};
  e.baseline = "unfused";
  if (backward) {
    e.variants = {{"unfused", bytes, 0}, {"atomic", bytes, 0}, {"sorted", bytes, 0}};
  } else {
    e.variants = {{"unfused", bytes, 0}, {"fused", bytes, 0}};
  }
  // The deterministic backward (one rounding to T per table row); the atomic one adds in T.
  e.dump_variant = backward ? "sorted" : "fused";
  e.prepare = [shape, config, host_tokens, backward] {
    auto st = std::make_shared<BenchState<T>>();
    st->shape = shape;
    st->config = config;
    st->n = shape.tokens();
    const auto n = static_cast<std::size_t>(st->n), h = static_cast<std::size_t>(shape.hidden);
    const bool learned = config.positions == PositionEncoding::learned;
    st->pos_rows = learned ? shape.num_positions : config.position_offset + shape.len;
    st->tokens = DeviceBuffer<std::int32_t>(host_tokens);
    st->positions = DeviceBuffer<std::int32_t>(n);
    // Only what the direction's variants use: the runner may hold up to kMaxCallsPerSample copies,
    // and a vocab x hidden table is the largest buffer here.
    if (!backward) {
      st->token_table = DeviceBuffer<T>(static_cast<std::size_t>(shape.vocab) * h);
      fill(st->token_table, kBenchSeed + 1, -1.0f, 1.0f);
      st->position_table = learned ? DeviceBuffer<T>(static_cast<std::size_t>(st->pos_rows) * h)
                                   : DeviceBuffer<T>(sinusoid_table<T>(st->pos_rows, shape.hidden));
      if (learned) fill(st->position_table, kBenchSeed + 2, -1.0f, 1.0f);
      st->tmp3 = DeviceBuffer<T>(n * h);
    } else {
      st->d_tok = DeviceBuffer<T>(static_cast<std::size_t>(shape.vocab) * h);
      st->d_pos = DeviceBuffer<T>(learned ? static_cast<std::size_t>(shape.num_positions) * h : 0);
      st->workspace =
          DeviceBuffer<unsigned char>(kernels::embedding_bwd_sorted_workspace_bytes(shape, config));
      st->fork.emplace();
    }
    st->out = DeviceBuffer<T>(n * h);  // y, or dy for backward
    if (backward) fill(st->out, kBenchSeed + 3, -1.0f, 1.0f);
    st->tmp = DeviceBuffer<T>(n * h);
    st->tmp2 = DeviceBuffer<T>(n * h);
    st->mask = DeviceBuffer<std::uint8_t>(n * h);
    st->positions_ws = DeviceBuffer<unsigned char>(
        std::max(kernels::embedding_fwd_workspace_bytes(shape, config),
                 kernels::embedding_bwd_atomic_workspace_bytes(shape, config, true)));
    // The forward's saved state for the unfused backward: positions and the u8 mask.
    kernels::launch_embedding_positions(st->positions.data(), st->tokens.data(), shape, config, nullptr);
    kernels::launch_dropout_mask_u8(st->mask.data(), n * h, config.dropout, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    PreparedExperiment p;
    const float pr = config.dropout.p;
    if (!backward) {
      p.variants.push_back([st, pr](cudaStream_t s) {
        const auto& sh = st->shape;
        const std::int64_t n = st->n, nh = n * sh.hidden;
        kernels::launch_embedding_positions(st->positions.data(), st->tokens.data(), sh, st->config, s);
        kernels::launch_gather_rows(st->tmp.data(), st->token_table.data(), sh.vocab, st->tokens.data(), n,
                                    sh.hidden, s);
        kernels::launch_scale(st->tmp2.data(), st->tmp.data(), static_cast<std::size_t>(nh), st->config.scale,
                              s);
        kernels::launch_gather_rows(st->tmp.data(), st->position_table.data(), st->pos_rows,
                                    st->positions.data(), n, sh.hidden, s);
        kernels::launch_residual_add(st->tmp3.data(), st->tmp2.data(), st->tmp.data(), n, sh.hidden, s);
        kernels::launch_zero_padding_rows(st->tmp2.data(), st->tmp3.data(), st->tokens.data(), n, sh.hidden,
                                          st->config.padding_idx, s);
        kernels::launch_dropout_mask_u8(st->mask.data(), static_cast<std::size_t>(nh), st->config.dropout, s);
        kernels::launch_dropout_apply_u8(st->out.data(), st->tmp2.data(), st->mask.data(),
                                         static_cast<std::size_t>(nh), pr, s);
      });
      p.variants.push_back([st](cudaStream_t s) {
        kernels::launch_embedding_fwd(st->out.data(), st->tokens.data(), st->token_table.data(),
                                      st->position_table.data(), st->shape, st->config,
                                      st->positions_ws.data(), st->positions_ws.size(), s);
      });
    } else {
      p.variants.push_back([st, pr](cudaStream_t s) {
        const auto& sh = st->shape;
        const std::int64_t n = st->n, nh = n * sh.hidden;
        const bool learned = st->config.positions == PositionEncoding::learned;
        kernels::launch_dropout_apply_u8(st->tmp.data(), st->out.data(), st->mask.data(),
                                         static_cast<std::size_t>(nh), pr, s);
        kernels::launch_scale(st->tmp2.data(), st->tmp.data(), static_cast<std::size_t>(nh), st->config.scale,
                              s);
        SEQBENCH_CUDA_CHECK(cudaMemsetAsync(st->d_tok.data(), 0, st->d_tok.bytes(), s));
        kernels::launch_scatter_add_rows(st->d_tok.data(), sh.vocab, st->tmp2.data(), st->tokens.data(),
                                         st->tokens.data(), st->config.padding_idx, n, sh.hidden, s);
        if (learned) {
          SEQBENCH_CUDA_CHECK(cudaMemsetAsync(st->d_pos.data(), 0, st->d_pos.bytes(), s));
          kernels::launch_scatter_add_rows(st->d_pos.data(), sh.num_positions, st->tmp.data(),
                                           st->positions.data(), st->tokens.data(), st->config.padding_idx, n,
                                           sh.hidden, s);
        }
      });
      p.variants.push_back([st](cudaStream_t s) {
        kernels::launch_embedding_bwd_atomic(
            st->d_tok.data(), st->d_pos.data(), st->out.data(), st->tokens.data(), st->shape, st->config,
            st->positions_ws.data(), st->positions_ws.size(), s, &st->fork->get());
      });
      p.variants.push_back([st](cudaStream_t s) {
        kernels::launch_embedding_bwd_sorted(st->d_tok.data(), st->d_pos.data(), st->out.data(),
                                             st->tokens.data(), st->shape, st->config, st->workspace.data(),
                                             st->workspace.size(), s, &st->fork->get());
      });
    }
    // For `seqbench dump`: the inputs, the keep mask and what the dumped variant wrote (suites/pytorch's
    // parity). st->mask holds launch_dropout_mask_u8 of the config's stream over the B·L·H flat
    // indices (prepare() wrote it; the unfused forward rewrites the same bits), bit for bit the mask
    // the fused forward and both fused backwards redraw. Sinusoidal positions are not an input of
    // the fused kernels (they compute them); the oracle computes them from params too. Learned
    // positions: the table (forward) and its gradient (backward).
    p.dump = [st, backward] {
      const auto& sh = st->shape;
      const bool learned = st->config.positions == PositionEncoding::learned;
      const std::vector<std::int64_t> ids = {sh.batch, sh.len}, rows = {st->n, sh.hidden},
                                      table = {sh.vocab, sh.hidden},
                                      positions = {sh.num_positions, sh.hidden};
      std::vector<DumpArray> a;
      a.push_back(dump_array("tokens", "input", st->tokens, ids));
      a.push_back(dump_array("keep", "input", st->mask, rows));
      if (!backward) {
        a.push_back(dump_array("token_table", "input", st->token_table, table));
        if (learned) a.push_back(dump_array("position_table", "input", st->position_table, positions));
        a.push_back(dump_array("y", "output", st->out, rows));
      } else {
        a.push_back(dump_array("dy", "input", st->out, rows));
        a.push_back(dump_array("d_token_table", "output", st->d_tok, table));
        if (learned) a.push_back(dump_array("d_position_table", "output", st->d_pos, positions));
      }
      return a;
    };
    p.state = st;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Tolerances. Inputs are T values, exact in double; u = unit_roundoff(T), v = unit_roundoff(f32),
// η = underflow_error(T), ks = 1/(1-p) (2v in float), keep ∈ {0, 1} (every bound is multiplied by
// keep and by "not padding": dropped elements and padding rows must be exactly 0).
//   Sinusoid (kernels/embedding.cu): f = 10000^(-k/(half-1)) in double (exp2 of k·log2_step: 1 ulp,
//   plus log2_step's and the product's roundings through |k·log2_step| <= 13.3: <= 2^-48.6 relative),
//   stored as floats hi + lo: |f - hi - lo| <= 2^-24·|lo| <= 2^-48·f. Position P < 2^24 exact.
//   θ_hi = P·hi, e = fma(P, hi, -θ_hi) exact (TwoProduct), θ_lo = fma(P, lo, e): |e| <= ulp(θ_hi)/2
//   <= 1/2 and |P·lo| <= 1, so |θ_lo| <= 1.5 and its rounding <= v; the lo and double-f errors
//   contribute P·f·(2^-48 + 2^-48.6) <= 2v (P·f < 2^24). n = rint(θ_hi·fl(1/2π)) (the quotient <= 2^21.4
//   carries
//   <= 2v relative error, so n may miss the nearest integer by 1: only |r| matters), |n| < 2^21.4;
//   |θ_hi - n·2π| <= (1/2 + 0.32)·2π < 5.2 and |n|·|2π - C1| <= 2^21.4·2^-22.4 < 0.5, so
//   |r1| < 5.7; r1 = fma(-n, C1, θ_hi) is exact (θ_hi and n·C1 are multiples of 2^-21 = ulp(C1)
//   when θ_hi >= 4, of 2^-22 when θ_hi < 4 (n <= 1), and |r1| < 8 fits 24 bits);
//   r2 = fma(-n, C2, r1): rounding <= ulp(4)/2 = 4v, plus |n|·|2π - C1 - C2| <= 2^21.4·2^-47 < v;
//   r = r2 + θ_lo (|r| < 7.2): rounding 4v. So |Δr| <= v + 2v + 4v + v + 4v = 12v, and sinf/cosf
//   (2 ulp of a value <= 1: <= 4v) with |sin'| <= 1: |Δpos| <= 16v (first order), at every
//   position (the plain-float angle of the previous kernel allowed 24v·P + 4v).
//   fused y   : keep·[(u + 5v)|y| + ks(1 + v)·|Δpos| + η]   (fma v, ks 2v, multiply v, 1 v slack,
//               rounding to T u|y| + η)
//   unfused y : keep·[(u + 4v)|y| + ks·((u + v)(|s·t| + |e| + |pos|) + 3η) + η]   (s·t rounded
//               to T, the position table rounded to T (sinusoids: via float, u + v), the add
//               rounded to T, then as dropout_apply_u8)
//   Row sums (A = |out_scale|·Σ_i |g_i| over the m tokens of the row, g = dy·keep·ks exact):
//   sorted    : u|want| + η + (D + 4)·v·A, D = min(m, 32) + ceil(s/32) bounds the float
//               summation depth of the fixed order (Higham §4.2): each piece (a segment's entries
//               inside one window of 32 sorted entries) is a chain of <= min(m, 32) terms started
//               from 0 (<= min(m, 32) - 1 rounded adds); the segment's s consecutive sorted entries
//               touch P <= floor((s-1)/32) + 2 <= ceil(s/32) + 1 windows, whose partials are
//               chained (P - 1 adds); s = m for token rows and nonpad_count positions, s = B for
//               slot-indexed positions (their segments keep the padding entries, skipped: adds
//               nothing). 3v for g, 1v scale
//   atomic    : u|want| + m·(u·A + η) + 5v·A   (each of the m adds rounds to T; exact for fp32's
//               u = v up to the order)
//   unfused   : u|want| + (m + 2)·u·A + m·(2 + |s|)·η + 5v·A   (per token, g stored in T, then
//               s·g stored in T, then m T atomics; g's subnormal error η is scaled by s with it:
//               a bound of (m + 2)·η let an f16 g near 6e-6 with s = 50 fail by 1.9x)
// An empty row (m = 0) must be exactly 0.
const char* kRule =
    "per element bounds derived in suites/operators/embedding.cu: u_T + eta_T per rounding to T, u_f32 per "
    "float "
    "op, 16 u_f32 absolute for the in-kernel sinusoid (two-float angle), (min(m, 32) + ceil(s/32)) u_f32 for "
    "the "
    "sorted row sums (s = segment length in sorted order), "
    "m u_T for T atomics, the unfused g's eta_T times |scale| (rounded before the scale); dropped elements, "
    "padding rows and unused gradient rows exact";

struct Tallies {
  Tally fwd, bwd_sorted, bwd_atomic, determinism, unfused_fwd, unfused_bwd;
  Tallies(const std::string& prefix, const std::string& suffix)
      : fwd(prefix + "fwd" + suffix, kRule),
        bwd_sorted(prefix + "bwd_sorted" + suffix, kRule),
        bwd_atomic(prefix + "bwd_atomic" + suffix, kRule),
        determinism(prefix + "determinism" + suffix,
                    "bitwise: a second fused forward and sorted backward on the same inputs (outputs and "
                    "workspace re-poisoned) reproduce y, d_token_table and d_position_table exactly"),
        unfused_fwd(prefix + "unfused_fwd" + suffix, kRule),
        unfused_bwd(prefix + "unfused_bwd" + suffix, kRule) {}
  std::vector<CheckResult> results() const {
    return {fwd.result(),         bwd_sorted.result(),  bwd_atomic.result(),
            determinism.result(), unfused_fwd.result(), unfused_bwd.result()};
  }
};

struct Case {
  EmbeddingShape shape;
  EmbeddingConfig config;
  double pad_share = 0.0;
  std::size_t off_table = 0, off_pos = 0, off_out = 0, off_dy = 0;  // element offsets
  std::string describe() const {
    std::ostringstream os;
    os << "B=" << shape.batch << " L=" << shape.len << " H=" << shape.hidden << " vocab=" << shape.vocab
       << " num_positions=" << shape.num_positions << " pad=" << config.padding_idx << " share=" << pad_share
       << (config.positions == PositionEncoding::learned ? " learned" : " sinusoidal")
       << (config.indexing == PositionIndexing::slot ? "/slot" : "/nonpad_count")
       << " offset=" << config.position_offset << " scale=" << config.scale << " p=" << config.dropout.p
       << " seed=" << config.dropout.seed << " element offsets table/pos/out/dy=" << off_table << "/"
       << off_pos << "/" << off_out << "/" << off_dy;
    return os.str();
  }
};

std::vector<Case> make_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t fixed_hidden[] = {1, 3, 127, 1000, 1023, 4097, 8, 64, 512, 1024, 2, 768};
  std::vector<Case> cases;
  for (int i = 0; i < 58; ++i) {
    Case c;
    const std::int64_t h = i < 12 ? fixed_hidden[i]
                                  : (rng() % 2 == 0 ? 8 * static_cast<std::int64_t>(1 + rng() % 256)
                                                    : static_cast<std::int64_t>(1 + rng() % 3000));
    c.shape.hidden = h;
    const std::int64_t max_tokens = std::max<std::int64_t>(1, 200'000 / h);
    c.shape.len = 1 + static_cast<std::int64_t>(
                          rng() % static_cast<std::uint64_t>(std::min<std::int64_t>(100, max_tokens)));
    c.shape.batch =
        1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(std::max<std::int64_t>(
                                                  1, std::min<std::int64_t>(9, max_tokens / c.shape.len))));
    // A third of the cases: short rows in a large batch, so slot-indexed position rows collect more than
    // 32 sorted entries (the windowed reduction's merge of partials) and L = 1 .. 4 tiles.
    if (i % 6 == 2 || i % 6 == 3) {
      c.shape.len = 1 + static_cast<std::int64_t>(rng() % 4);
      c.shape.batch = 1 + static_cast<std::int64_t>(
                              rng() % static_cast<std::uint64_t>(std::max<std::int64_t>(
                                          1, std::min<std::int64_t>(300, max_tokens / c.shape.len))));
    }
    // Small vocabularies make long segments (a row used many times); some large ones.
    const std::int64_t vocabs[] = {1, 2, 7, 50, 300, 5000};
    c.shape.vocab = vocabs[rng() % 6];
    c.config.padding_idx =
        rng() % 4 == 0 ? -1 : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.shape.vocab));
    c.pad_share = (rng() % 5) / 8.0;  // 0 .. 0.5
    c.config.positions = i % 2 == 0 ? PositionEncoding::learned : PositionEncoding::sinusoidal;
    c.config.indexing = (i / 2) % 2 == 0 ? PositionIndexing::nonpad_count : PositionIndexing::slot;
    c.config.position_offset = rng() % 3 == 0 ? 0 : static_cast<std::int64_t>(rng() % 40);
    if (c.config.positions == PositionEncoding::learned)
      c.shape.num_positions = c.config.position_offset + c.shape.len + static_cast<std::int64_t>(rng() % 5);
    const float scales[] = {1.0f, std::sqrt(static_cast<float>(h)), 0.5f, -1.25f};
    c.config.scale = scales[rng() % 4];
    const float probabilities[] = {0.0f, 0.1f, static_cast<float>(rng() % 1000) / 1000.0f, 1.0f};
    c.config.dropout = {probabilities[i % 4], rng(), rng() % 1000};
    if (rng() % 2 == 1) {
      c.off_table = rng() % 9;
      c.off_pos = rng() % 9;
      c.off_out = rng() % 9;
      c.off_dy = rng() % 9;
    }
    if (i >= 54) {
      // Sinusoids far from the origin (positions > 10^5; the host's sinusoid table bounds how far):
      // the two-float angle must keep 16 u_f32 there too.
      const std::int64_t narrow[] = {2, 7, 16, 15};
      c.shape.hidden = narrow[i - 54];
      c.config.positions = PositionEncoding::sinusoidal;
      c.shape.num_positions = 0;
      c.config.position_offset = 100000 + static_cast<std::int64_t>(rng() % 31000);
    }
    cases.push_back(c);
  }
  return cases;
}

template <class T>
void check_case(const Case& c, Tallies& t) {
  const DType dtype = DTypeTraits<T>::dtype;
  const double u = unit_roundoff(dtype), v = unit_roundoff(DType::f32), eta = underflow_error(dtype);
  const std::string where = c.describe();
  const EmbeddingShape& shape = c.shape;
  const EmbeddingConfig& config = c.config;
  const bool learned = config.positions == PositionEncoding::learned;
  const std::int64_t n = shape.tokens(), h = shape.hidden;
  const auto nh = static_cast<std::size_t>(n * h);
  const std::int64_t pos_rows = learned ? shape.num_positions : config.position_offset + shape.len;
  const std::uint64_t seed = config.dropout.seed;

  const std::vector<std::int32_t> tokens =
      random_tokens(n, shape.vocab, config.padding_idx, c.pad_share, seed + 1);
  const std::vector<T> table =
      random_values<T>(static_cast<std::size_t>(shape.vocab * h), seed + 2, -1.0f, 1.0f);
  const std::vector<T> pos_table =
      learned ? random_values<T>(static_cast<std::size_t>(pos_rows * h), seed + 3, -1.0f, 1.0f)
              : sinusoid_table<T>(pos_rows, h);
  const std::vector<T> dy = random_values<T>(nh, seed + 4, -1.0f, 1.0f);

  ref::TokenMatrix tok_m(shape.batch, shape.len);
  for (std::int64_t i = 0; i < n; ++i) tok_m.data()[i] = tokens[static_cast<std::size_t>(i)];
  const ref::Matrix table_m = to_matrix(table, shape.vocab, h);
  const ref::Matrix pos_m = learned ? to_matrix(pos_table, pos_rows, h) : ref::Matrix();
  const ref::Matrix dy_m = to_matrix(dy, n, h);
  const ref::EmbeddingConfig rc = to_ref(config);
  const ref::KeepMask keep = ref::make_dropout_mask(n, h, config.dropout.p, seed, config.dropout.offset);
  const ref::Matrix want_y = ref::embedding_forward(tok_m, table_m, pos_m, rc, keep);
  const ref::EmbeddingGrads want = ref::embedding_backward(dy_m, tok_m, table_m, pos_m, rc, keep);
  const ref::PositionMatrix positions = ref::embedding_positions(tok_m, rc);
  const ref::Matrix g = ref::dropout_backward(dy_m, keep, config.dropout.p);
  const double ks = ref::dropout_scale(config.dropout.p);
  const ref::Matrix sin_m = learned ? ref::Matrix() : ref::sinusoidal_positions(pos_rows, h);

  DeviceBuffer<std::int32_t> tokens_d(tokens);
  Guarded<T> table_d(table.size(), c.off_table), pos_d(pos_table.size(), c.off_pos), dy_d(nh, c.off_dy);
  table_d.upload(table);
  pos_d.upload(pos_table);
  dy_d.upload(dy);
  const std::size_t ws_bytes = kernels::embedding_bwd_sorted_workspace_bytes(shape, config);
  const std::size_t fwd_ws_bytes = kernels::embedding_fwd_workspace_bytes(shape, config);
  const std::size_t pos_ws_bytes = kernels::embedding_bwd_atomic_workspace_bytes(shape, config, true);
  const auto tok_elems = static_cast<std::size_t>(shape.vocab * h);
  const auto pos_elems = learned ? static_cast<std::size_t>(pos_rows * h) : 0;

  // Fused forward and sorted backward, twice: the backward as the suite times it (its zero fill
  // forked onto a side stream), then on one stream, which must give the same bits. Before each
  // forked launch the side stream is held (hold_side), so that on a GPU its zero fill runs after
  // the main branch, every time: a row that both branches write (a mark missing, a predicate
  // inverted) then loses its gradient to the zeros instead of depending on the race.
  std::vector<T> y1, dt1, dp1;
  const OwnedStreamFork fork;
  const auto hold_side = [&] {
    hold_kernel<<<1, 1, 0, fork.get().side>>>(kSideHoldNs);
    SEQBENCH_CUDA_CHECK_LAUNCH();
  };
  for (int run = 0; run < 2; ++run) {
    Guarded<T> y(nh, c.off_out), dt(tok_elems, c.off_out), dp(pos_elems, c.off_out);
    DeviceBuffer<unsigned char> ws(ws_bytes), fwd_ws(fwd_ws_bytes);
    ws.fill_bytes(0xFF);
    fwd_ws.fill_bytes(0xFF);
    kernels::launch_embedding_fwd<T>(y.data(), tokens_d.data(), table_d.data(),
                                     learned ? pos_d.data() : nullptr, shape, config, fwd_ws.data(),
                                     fwd_ws_bytes, nullptr);
    if (run == 0) hold_side();
    kernels::launch_embedding_bwd_sorted<T>(dt.data(), learned ? dp.data() : nullptr, dy_d.data(),
                                            tokens_d.data(), shape, config, ws.data(), ws_bytes, nullptr,
                                            run == 0 ? &fork.get() : nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    Tally& fwd_guard = run == 0 ? t.fwd : t.determinism;
    Tally& bwd_guard = run == 0 ? t.bwd_sorted : t.determinism;
    std::vector<T> gy = y.download(fwd_guard, where), gt = dt.download(bwd_guard, where),
                   gp = dp.download(bwd_guard, where);
    if (run == 1) {
      t.determinism.add_exact(same_bits(gy, y1), where, "second forward differs bitwise");
      t.determinism.add_exact(same_bits(gt, dt1), where,
                              "sorted d_token_table on one stream differs bitwise from the forked one");
      t.determinism.add_exact(same_bits(gp, dp1), where,
                              "sorted d_position_table on one stream differs bitwise from the forked one");
    } else {
      y1 = std::move(gy);
      dt1 = std::move(gt);
      dp1 = std::move(gp);
    }
  }

  // The atomic backward: as the suite times it (the untouched rows' zero fill forked onto the held
  // side stream), then on one stream (the launcher's default); both against the reference.
  std::vector<T> gta[2], gpa[2];
  for (int run = 0; run < 2; ++run) {
    Guarded<T> dta(tok_elems, c.off_out), dpa(pos_elems, c.off_dy);
    DeviceBuffer<unsigned char> pos_ws(pos_ws_bytes);
    pos_ws.fill_bytes(0xFF);
    if (run == 0) hold_side();
    kernels::launch_embedding_bwd_atomic<T>(dta.data(), learned ? dpa.data() : nullptr, dy_d.data(),
                                            tokens_d.data(), shape, config, pos_ws.data(), pos_ws_bytes,
                                            nullptr, run == 0 ? &fork.get() : nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    gta[run] = dta.download(t.bwd_atomic, where);
    gpa[run] = dpa.download(t.bwd_atomic, where);
  }

  // The unfused baseline, as the experiments run it.
  DeviceBuffer<std::int32_t> pos_idx(static_cast<std::size_t>(n));
  Guarded<T> a(nh, 0), b(nh, 1), sum(nh, 0), masked(nh, 3), yu(nh, c.off_out), gu(nh, 0), sgu(nh, 2);
  Guarded<T> dtu(tok_elems, c.off_out), dpu(pos_elems, 0);
  Guarded<std::uint8_t> mask(nh, 1);
  if (n > 0) {
    kernels::launch_embedding_positions(pos_idx.data(), tokens_d.data(), shape, config, nullptr);
    kernels::launch_gather_rows<T>(a.data(), table_d.data(), shape.vocab, tokens_d.data(), n, h, nullptr);
    kernels::launch_scale<T>(b.data(), a.data(), nh, config.scale, nullptr);
    kernels::launch_gather_rows<T>(a.data(), pos_d.data(), pos_rows, pos_idx.data(), n, h, nullptr);
    kernels::launch_residual_add<T>(sum.data(), b.data(), a.data(), n, h, nullptr);
    kernels::launch_zero_padding_rows<T>(masked.data(), sum.data(), tokens_d.data(), n, h, config.padding_idx,
                                         nullptr);
    kernels::launch_dropout_mask_u8(mask.data(), nh, config.dropout, nullptr);
    kernels::launch_dropout_apply_u8<T>(yu.data(), masked.data(), mask.data(), nh, config.dropout.p, nullptr);
    kernels::launch_dropout_apply_u8<T>(gu.data(), dy_d.data(), mask.data(), nh, config.dropout.p, nullptr);
    kernels::launch_scale<T>(sgu.data(), gu.data(), nh, config.scale, nullptr);
  }
  SEQBENCH_CUDA_CHECK(cudaMemset(dtu.data(), 0, tok_elems * sizeof(T)));
  if (learned) SEQBENCH_CUDA_CHECK(cudaMemset(dpu.data(), 0, pos_elems * sizeof(T)));
  if (n > 0) {
    kernels::launch_scatter_add_rows<T>(dtu.data(), shape.vocab, sgu.data(), tokens_d.data(), tokens_d.data(),
                                        config.padding_idx, n, h, nullptr);
    if (learned) {
      kernels::launch_scatter_add_rows<T>(dpu.data(), pos_rows, gu.data(), pos_idx.data(), tokens_d.data(),
                                          config.padding_idx, n, h, nullptr);
    }
  }
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> gyu = yu.download(t.unfused_fwd, where);
  const std::vector<T> gtu = dtu.download(t.unfused_bwd, where), gpu = dpu.download(t.unfused_bwd, where);

  // Forward, element by element.
  const double s = static_cast<double>(config.scale);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t tok = tokens[static_cast<std::size_t>(i)];
    const bool pad = config.padding_idx >= 0 && tok == config.padding_idx;
    const double dpos = learned ? 0.0 : 16 * v;
    for (std::int64_t col = 0; col < h; ++col) {
      const auto e_idx = static_cast<std::size_t>(i * h + col);
      const double k = pad || keep.data()[e_idx] == 0 ? 0.0 : 1.0;
      const double y = want_y.data()[e_idx];
      const double st = s * table_m(tok, col);
      const double pos = learned ? pos_m(positions.data()[i], col) : sin_m(positions.data()[i], col);
      const double e = st + pos;
      t.fwd.add(as_double(y1[e_idx]), y, k * ((u + 5 * v) * std::fabs(y) + ks * (1 + v) * dpos + eta), where,
                e_idx);
      t.unfused_fwd.add(
          as_double(gyu[e_idx]), y,
          k * ((u + 4 * v) * std::fabs(y) +
               ks * ((u + v) * (std::fabs(st) + std::fabs(e) + std::fabs(pos)) + 3 * eta) + eta),
          where, e_idx);
    }
  }

  // Backward, row by row: m and A per table row.
  const auto check_table = [&](const ref::Matrix& want_t, const std::vector<T>& sorted,
                               const std::vector<T>(&atomic)[2], const std::vector<T>& unfused,
                               double out_scale, bool by_position) {
    const ref::Index rows = want_t.rows();
    std::vector<double> count(static_cast<std::size_t>(rows), 0.0);
    std::vector<double> abs_sum(static_cast<std::size_t>(rows * h), 0.0);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int32_t tok = tokens[static_cast<std::size_t>(i)];
      if (config.padding_idx >= 0 && tok == config.padding_idx) continue;
      const std::int64_t r = by_position ? positions.data()[i] : tok;
      count[static_cast<std::size_t>(r)] += 1;
      for (std::int64_t col = 0; col < h; ++col)
        abs_sum[static_cast<std::size_t>(r * h + col)] += std::fabs(out_scale) * std::fabs(g(i, col));
    }
    for (ref::Index r = 0; r < rows; ++r) {
      const double m = count[static_cast<std::size_t>(r)];
      // Sorted entries of the row's segment: B for slot-indexed positions (padding kept, skipped).
      const double seg =
          by_position && config.indexing == PositionIndexing::slot ? static_cast<double>(shape.batch) : m;
      const double depth = std::min(m, static_cast<double>(kernels::kEmbeddingSortChunk)) +
                           std::ceil(seg / kernels::kEmbeddingSortChunk);
      for (std::int64_t col = 0; col < h; ++col) {
        const auto idx = static_cast<std::size_t>(r * h + col);
        const double w = want_t(r, col), A = abs_sum[idx];
        const double have = m > 0 ? 1.0 : 0.0;
        t.bwd_sorted.add(as_double(sorted[idx]), w, have * (u * std::fabs(w) + eta + (depth + 4) * v * A),
                         where, idx);
        for (const std::vector<T>& run : atomic)
          t.bwd_atomic.add(as_double(run[idx]), w, have * (u * std::fabs(w) + m * (u * A + eta) + 5 * v * A),
                           where, idx);
        t.unfused_bwd.add(
            as_double(unfused[idx]), w,
            have * (u * std::fabs(w) + (m + 2) * u * A + m * (2 + std::fabs(out_scale)) * eta + 5 * v * A),
            where, idx);
      }
    }
  };
  check_table(want.d_token_table, dt1, gta, gtu, s, false);
  if (learned) check_table(want.d_position_table, dp1, gpa, gpu, 1.0, true);
}

template <class T>
std::vector<CheckResult> checks_for(std::uint64_t seed) {
  Tallies t("operators/embedding/", std::string("/") + DTypeTraits<T>::name);
  for (const Case& c : make_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 11)))
    check_case<T>(c, t);
  return t.results();
}

}  // namespace

void add_embedding_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  const std::vector<std::int64_t> tokens = shapes<std::int64_t>(options, {512}, {4096}, {4096, 16384});
  const std::vector<std::int64_t> hidden = shapes<std::int64_t>(options, {512}, {512}, {512, 1024});
  for (const bool backward : {false, true}) {
    for (const std::int64_t n : tokens) {
      for (const std::int64_t h : hidden) {
        suite.experiments.push_back(embedding_experiment<float>(n, h, 32000, false, backward));
        suite.experiments.push_back(embedding_experiment<__nv_bfloat16>(n, h, 32000, false, backward));
        suite.experiments.push_back(embedding_experiment<__nv_bfloat16>(n, h, 50257, true, backward));
        // Zipf(1.1) tokens: frequent rows (the atomic backward serializes on them; the sorted one
        // splits them into 32-entry chunks).
        suite.experiments.push_back(embedding_experiment<__nv_bfloat16>(n, h, 32000, false, backward, true));
      }
    }
  }
}

std::vector<CheckResult> embedding_gpu_checks(std::uint64_t seed) {
  return checks_for_all_dtypes([&](auto tag) { return checks_for<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
