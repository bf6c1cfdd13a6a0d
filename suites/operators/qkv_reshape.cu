// Operator-suite experiments and GPU checks for the QKV bias + split / merge family
// (kernels/qkv_reshape.h, LightSeq2 §IV-A).
//
// Experiments: Transformer-base and -big self-attention shapes, tokens = B·L ∈ {4096, 16384} with
// L ∈ {64, 256}, (H, heads) ∈ {(512, 8), (1024, 16)}, fp32 and bf16; three passes:
//   qkv_split_fwd  P = 3: heads = split(projected + bias); minimal bytes s·(2n + 3H), n = 3·tokens·H
//   qkv_split_bwd  P = 3: d_projected = merge(d_heads), dbias; minimal bytes s·(2n + 3H)
//   merge_heads    P = 1: the attention context [B, N, L, d] -> [tokens, H]; s·2n, n = tokens·H
// Baseline "unfused" (PyTorch eager: bias add + one strided copy per projection; strided copies
// + column sum; one strided copy), variant "fused". Largest: 16384 x 3072 = 50M elements.
//
// Checks: every launcher, fused and unfused, against reference/attention.h split_heads /
// merge_heads on 60 shapes (odd H, odd d, L = 1, B = 1, P = 1, 2, 3, half with misaligned
// element offsets that force the scalar path) x 3 dtypes; outputs and workspace poisoned, guards
// checked after every output; the permutations bitwise; the fused kernels run twice, bitwise
// equal; the unfused baseline bitwise equal to the fused kernels (same float operations in the
// same order).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "kernels/bias_act_dropout.h"
#include "kernels/qkv_reshape.h"
#include "reference/attention.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"

namespace seqbench::operators {
namespace {

using kernels::HeadsShape;
using kernels::StridedCopy4;
using namespace check_util;

constexpr std::uint64_t kBenchSeed = 20240921;

// ---------------------------------------------------------------------------------------------
// The unfused baseline, as PyTorch eager runs it. Projection p's column block of projected
// [rows, P·H], viewed as [B, L, N, d], transposed to [B, N, L, d] (kernels::heads_strided_copy: the
// copy walks (b, h, l, j)).

std::int64_t block_elements(const HeadsShape& s) {
  return s.rows() * s.hidden;
}  // one projection

// Forward: tmp = projected + bias (one kernel), then `.transpose(1, 2).contiguous()` per projection.
template <class T>
void unfused_split_fwd(T* heads_out, T* tmp, const T* projected, const T* bias, const HeadsShape& s,
                       cudaStream_t stream) {
  kernels::launch_bias_add<T>(tmp, projected, bias, s.rows(), s.cols(), stream);
  const StridedCopy4 copy = kernels::heads_strided_copy(s, true);
  for (std::int64_t p = 0; p < s.projections; ++p)
    kernels::launch_strided_copy<T>(heads_out + p * block_elements(s), tmp + p * s.hidden, copy, stream);
}

// The merge: one strided copy per projection into its column block.
template <class T>
void unfused_merge(T* projected, const T* heads_in, const HeadsShape& s, cudaStream_t stream) {
  const StridedCopy4 copy = kernels::heads_strided_copy(s, false);
  for (std::int64_t p = 0; p < s.projections; ++p)
    kernels::launch_strided_copy<T>(projected + p * s.hidden, heads_in + p * block_elements(s), copy, stream);
}

// Backward: the merge, then the column sum for dbias.
template <class T>
void unfused_split_bwd(T* d_projected, T* dbias, const T* d_heads, const HeadsShape& s, void* workspace,
                       std::size_t workspace_bytes, cudaStream_t stream) {
  unfused_merge<T>(d_projected, d_heads, s, stream);
  kernels::launch_column_sum<T>(dbias, d_projected, s.rows(), s.cols(), workspace, workspace_bytes, stream);
}

// ---------------------------------------------------------------------------------------------
// Experiments.

enum class Pass { split_fwd, split_bwd, merge };

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::split_fwd:
      return "qkv_split_fwd";
    case Pass::split_bwd:
      return "qkv_split_bwd";
    case Pass::merge:
      return "merge_heads";
  }
  return "?";
}

template <class T>
struct BenchState {
  HeadsShape shape;
  std::size_t n;
  DeviceBuffer<T> in, bias, out, tmp, dbias;
  DeviceBuffer<unsigned char> workspace;
  BenchState(const HeadsShape& s, Pass pass)
      : shape(s),
        n(static_cast<std::size_t>(s.elements())),
        in(random_values<T>(n, kBenchSeed + 1, -1.0f, 1.0f)),  // projected, d_heads or the context
        bias(pass == Pass::split_fwd
                 ? random_values<T>(static_cast<std::size_t>(s.cols()), kBenchSeed + 2, -1.0f, 1.0f)
                 : std::vector<T>{}),
        out(n),
        tmp(pass == Pass::split_fwd ? n : 0),
        dbias(pass == Pass::split_bwd ? static_cast<std::size_t>(s.cols()) : 0),
        workspace(pass == Pass::split_bwd ? kernels::qkv_bias_split_bwd_workspace_bytes(s) : 0) {}
};

template <class T>
ExperimentSpec qkv_reshape_experiment(Pass pass, std::int64_t tokens, std::int64_t len, std::int64_t hidden,
                                      std::int64_t heads) {
  // The name states the tokens: a count that is not whole sequences would time fewer (or none).
  SEQBENCH_REQUIRE(
      len >= 1 && tokens >= len && tokens % len == 0,
      "qkv_reshape experiment: tokens " << tokens << " is not a positive multiple of the length " << len);
  HeadsShape s;
  s.batch = tokens / len;
  s.len = len;
  s.heads = heads;
  s.hidden = hidden;
  s.projections = pass == Pass::merge ? 1 : 3;
  const std::string dtype = DTypeTraits<T>::name;
  ExperimentSpec e;
  e.name = std::string(pass_name(pass)) + "/" + dtype + "/tokens=" + std::to_string(tokens) +
           ",L=" + std::to_string(len) + ",H=" + std::to_string(hidden) + ",heads=" + std::to_string(heads) +
           ",P=" + std::to_string(s.projections);
  e.params = {{"tokens", tokens},
              {"batch", s.batch},
              {"seq_len", len},
              {"hidden", hidden},
              {"heads", heads},
              {"head_dim", s.head_dim()},
              {"projections", s.projections},
              {"elements", s.elements()},
              {"dtype", dtype},
              {"op", pass_name(pass)},
              {"direction", pass == Pass::split_bwd ? "bwd" : "fwd"}};
  e.baseline = "unfused";
  const double sz = sizeof(T), n = static_cast<double>(s.elements()), c = static_cast<double>(s.cols());
  // Each input read once, each output written once: the split reads projected and the bias and
  // writes the heads; its backward reads d_heads and writes d_projected and dbias; the merge
  // reads and writes n elements.
  const double bytes = pass == Pass::merge ? sz * 2 * n : sz * (2 * n + c);
  // FLOPs: the split adds the bias to each element, its backward sums each element into dbias;
  // the merge only moves.
  const double flops = pass == Pass::merge ? 0.0 : n;
  e.variants = {{"unfused", bytes, flops}, {"fused", bytes, flops}};
  e.dump_variant = "fused";
  e.prepare = [s, pass] {
    auto st = std::make_shared<BenchState<T>>(s, pass);
    PreparedExperiment p;
    switch (pass) {
      case Pass::split_fwd:
        p.variants.push_back([st](cudaStream_t stream) {
          unfused_split_fwd<T>(st->out.data(), st->tmp.data(), st->in.data(), st->bias.data(), st->shape,
                               stream);
        });
        p.variants.push_back([st](cudaStream_t stream) {
          kernels::launch_qkv_bias_split_fwd<T>(st->out.data(), st->in.data(), st->bias.data(), st->shape,
                                                stream);
        });
        break;
      case Pass::split_bwd:
        p.variants.push_back([st](cudaStream_t stream) {
          unfused_split_bwd<T>(st->out.data(), st->dbias.data(), st->in.data(), st->shape,
                               st->workspace.data(), st->workspace.size(), stream);
        });
        p.variants.push_back([st](cudaStream_t stream) {
          kernels::launch_qkv_bias_split_bwd<T>(st->out.data(), st->dbias.data(), st->in.data(), st->shape,
                                                st->workspace.data(), st->workspace.size(), stream);
        });
        break;
      case Pass::merge:
        p.variants.push_back([st](cudaStream_t stream) {
          unfused_merge<T>(st->out.data(), st->in.data(), st->shape, stream);
        });
        p.variants.push_back([st](cudaStream_t stream) {
          kernels::launch_merge_heads<T>(st->out.data(), st->in.data(), st->shape, stream);
        });
        break;
    }
    // For `seqbench dump`: the inputs and what the fused variant wrote (suites/pytorch's parity).
    // projected [rows, P·H] (packed: the experiments use projected_ld = 0), heads [P, B, N, L, d].
    p.dump = [st, pass] {
      const HeadsShape& sh = st->shape;
      const std::vector<std::int64_t> projected = {sh.rows(), sh.cols()},
                                      heads = {sh.projections, sh.batch, sh.heads, sh.len, sh.head_dim()},
                                      columns = {sh.cols()};
      std::vector<DumpArray> a;
      switch (pass) {
        case Pass::split_fwd:
          a.push_back(dump_array("projected", "input", st->in, projected));
          a.push_back(dump_array("bias", "input", st->bias, columns));
          a.push_back(dump_array("heads", "output", st->out, heads));
          break;
        case Pass::split_bwd:
          a.push_back(dump_array("d_heads", "input", st->in, heads));
          a.push_back(dump_array("d_projected", "output", st->out, projected));
          a.push_back(dump_array("dbias", "output", st->dbias, columns));
          break;
        case Pass::merge:
          a.push_back(dump_array("heads", "input", st->in, heads));
          a.push_back(dump_array("projected", "output", st->out, projected));
          break;
      }
      return a;
    };
    p.state = st;
    return p;
  };
  return e;
}

// ---------------------------------------------------------------------------------------------
// Checks.
//
// Where every element goes, from the reference itself: split_heads / merge_heads of matrices of
// flat indices (exact in double) give, for each output element, the flat index of the input
// element it must hold. The pure moves are then checked bitwise against the input bits.
struct HeadsMaps {
  std::vector<std::int64_t> split;  // heads index -> projected index
  std::vector<std::int64_t> merge;  // projected index -> heads index
};

HeadsMaps heads_maps(const HeadsShape& s) {
  const ref::Index rows = s.rows(), cols = s.cols(), H = s.hidden, block = rows * H;
  HeadsMaps maps;
  ref::Matrix proj_index(rows, cols);
  for (ref::Index i = 0; i < proj_index.size(); ++i) proj_index.data()[i] = static_cast<double>(i);
  ref::Matrix heads_index(s.projections * s.batch * s.heads * s.len, s.head_dim());
  for (ref::Index i = 0; i < heads_index.size(); ++i) heads_index.data()[i] = static_cast<double>(i);
  ref::Matrix merged(rows, cols);
  for (ref::Index p = 0; p < s.projections; ++p) {
    const ref::Matrix columns = proj_index.middleCols(p * H, H);
    const ref::Matrix split = ref::split_heads(columns, s.batch, s.len, s.heads);
    for (ref::Index i = 0; i < split.size(); ++i)
      maps.split.push_back(static_cast<std::int64_t>(split.data()[i]));
    const ref::Matrix heads_rows = heads_index.middleRows(p * (block / s.head_dim()), block / s.head_dim());
    merged.middleCols(p * H, H) = ref::merge_heads(heads_rows, s.batch, s.len, s.heads);
  }
  maps.merge.resize(static_cast<std::size_t>(merged.size()));
  for (ref::Index i = 0; i < merged.size(); ++i)
    maps.merge[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(merged.data()[i]);
  return maps;
}

struct QkvCase {
  HeadsShape shape;
  std::uint64_t seed = 0;
  std::size_t off_in = 0, off_bias = 0, off_out = 0, off_out2 = 0;  // element offsets
  std::string describe() const {
    std::ostringstream os;
    os << "B=" << shape.batch << " L=" << shape.len << " heads=" << shape.heads << " H=" << shape.hidden
       << " d=" << shape.head_dim() << " P=" << shape.projections << " seed=" << seed
       << " element offsets in/bias/out/out2=" << off_in << "/" << off_bias << "/" << off_out << "/"
       << off_out2;
    return os.str();
  }
};

// The issue's odd hiddens (1, 3, 127, 1000, 1023, 4097) with heads dividing them, odd d, L = 1,
// B = 1, Transformer head sizes, tall shapes with many row blocks for the bias gradient, then
// random shapes (half with d % 8 == 0, the vector path when aligned) up to 60 cases. P cycles
// through 3, 1, 2; half the cases put every tensor at a random element offset (0..8).
std::vector<QkvCase> qkv_cases(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  struct Fixed {
    std::int64_t batch, len, heads, hidden;
  };
  std::vector<Fixed> shapes = {
      {1, 1, 1, 1},    {1, 1, 1, 3},     {2, 3, 3, 3},     {3, 5, 1, 127},    {1, 7, 127, 127},
      {2, 9, 8, 1000}, {3, 4, 40, 1000}, {1, 1, 3, 1023},  {5, 3, 31, 1023},  {1, 2, 17, 4097},
      {2, 1, 1, 4097}, {1, 33, 8, 512},  {3, 17, 12, 768}, {2, 64, 16, 1024}, {7, 5, 2, 64},
      {4, 3, 3, 24},   {1, 100, 4, 16},  {9, 1, 5, 40},    {2, 11, 6, 6},     {3, 31, 7, 63},
      {1, 257, 2, 8},  {17, 13, 1, 8},   {64, 40, 2, 16},  {5, 700, 1, 24},   {1, 3000, 3, 9},
      {33, 1, 4, 256}, {2, 2, 2, 2},     {3, 7, 5, 5},
  };
  constexpr std::int64_t kMaxElements = 300'000;
  while (shapes.size() < 60) {
    const std::int64_t heads = 1 + static_cast<std::int64_t>(rng() % 16);
    const std::int64_t d = rng() % 2 == 0 ? 8 * static_cast<std::int64_t>(1 + rng() % 16)
                                          : static_cast<std::int64_t>(1 + rng() % 130);
    const std::int64_t batch = 1 + static_cast<std::int64_t>(rng() % 8);
    const std::int64_t len_limits[] = {4, 70, 600};
    std::int64_t len =
        1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(len_limits[rng() % 3]));
    len = std::max<std::int64_t>(1, std::min(len, kMaxElements / (3 * batch * heads * d)));
    shapes.push_back({batch, len, heads, heads * d});
  }
  std::vector<QkvCase> cases;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    QkvCase c;
    c.shape.batch = shapes[i].batch;
    c.shape.len = shapes[i].len;
    c.shape.heads = shapes[i].heads;
    c.shape.hidden = shapes[i].hidden;
    c.shape.projections = static_cast<std::int64_t>(3 - i % 3);
    c.seed = rng();
    if (rng() % 2 == 1) {
      c.off_in = rng() % 9;
      c.off_bias = rng() % 9;
      c.off_out = rng() % 9;
      c.off_out2 = rng() % 9;
    }
    cases.push_back(c);
  }
  return cases;
}

// Tolerances. Inputs are T values, exact in double; u = unit_roundoff(T), v = unit_roundoff(f32),
// η = underflow_error(T); u_s = u and η_s = η when T is f16 or bf16, 0 for f32 (storing a float
// as float rounds nothing).
//   split fwd (fused and unfused): got = fl_T(fl32(x + b)). The fp32 add gives (x + b)(1 + δ1),
//     |δ1| <= v (exact when the sum is subnormal: no η); the store multiplies by (1 + δ2),
//     |δ2| <= u_s, and adds |η2| <= η_s. So |got - (x + b)| <= v|x + b| + u_s(1 + v)|x + b| + η_s.
//   dbias (fused and unfused): the exact T values of the column summed in fp32 in the fixed
//     order of kernels/dropout_mask.h with depth D (bias_grad_sum_depth): |S - Σ| <= γ_D Σ|terms|,
//     γ_D = D v / (1 - D v) (Higham §4.2); then the store: |got - Σ| <= u_s|Σ| + (1 + u_s) γ_D Σ|terms| +
//     η_s.
//   d_projected, merge, split (fused and unfused): bitwise copies of the input element.
const char* kRule =
    "split fwd: |err| <= u_f32|x+b| + u_T(1+u_f32)|x+b| + eta_T (u_T = eta_T = 0 for f32); dbias: |err| <= "
    "u_T|sum| + (1+u_T) gamma_D sum|terms| + eta_T, D the fixed summation depth; moves bitwise "
    "(derivation in suites/operators/qkv_reshape.cu)";

struct Tallies {
  Tally split_fwd, split_bwd_dprojected, split_bwd_dbias, merge, split, repeat, unfused_split_fwd,
      unfused_split_bwd_dprojected, unfused_split_bwd_dbias, unfused_merge;
  Tallies(const std::string& prefix, const std::string& suffix)
      : split_fwd(prefix + "split_fwd" + suffix, kRule),
        split_bwd_dprojected(prefix + "split_bwd_dprojected" + suffix, kRule),
        split_bwd_dbias(prefix + "split_bwd_dbias" + suffix, kRule),
        merge(prefix + "merge_heads" + suffix, kRule),
        split(prefix + "split_heads" + suffix, kRule),
        repeat(prefix + "determinism" + suffix,
               "bitwise: a second run of every fused launcher on the same inputs (outputs and workspace "
               "re-poisoned) reproduces every output exactly"),
        unfused_split_fwd(prefix + "unfused_split_fwd" + suffix,
                          std::string(kRule) + "; and bitwise equal to the fused split"),
        unfused_split_bwd_dprojected(prefix + "unfused_split_bwd_dprojected" + suffix, kRule),
        unfused_split_bwd_dbias(prefix + "unfused_split_bwd_dbias" + suffix,
                                std::string(kRule) + "; and bitwise equal to the fused dbias (same order)"),
        unfused_merge(prefix + "unfused_merge_heads" + suffix, kRule) {}
  std::vector<CheckResult> results() const {
    return {split_fwd.result(),
            split_bwd_dprojected.result(),
            split_bwd_dbias.result(),
            merge.result(),
            split.result(),
            repeat.result(),
            unfused_split_fwd.result(),
            unfused_split_bwd_dprojected.result(),
            unfused_split_bwd_dbias.result(),
            unfused_merge.result()};
  }
};

// got[o] holds exactly the bits of src[map[o]], for every o.
template <class T>
void expect_moved(Tally& t, const std::vector<T>& got, const std::vector<T>& src,
                  const std::vector<std::int64_t>& map, const std::string& where) {
  static const std::string kNothing;
  t.add_exact(got.size() == map.size(), where, "output has " + std::to_string(got.size()) + " elements");
  for (std::size_t o = 0; o < got.size() && o < map.size(); ++o) {
    const T& want = src[static_cast<std::size_t>(map[o])];
    if (std::memcmp(&got[o], &want, sizeof(T)) == 0) {
      t.add_exact(true, where, kNothing);
    } else {
      std::ostringstream os;
      os << "element " << o << " = " << as_double(got[o]) << ", want input element " << map[o] << " = "
         << as_double(want) << " bitwise";
      t.add_exact(false, where, os.str());
    }
  }
}

template <class T>
struct FusedRun {
  std::vector<T> split_fwd, d_projected, dbias, merge, split;
};

template <class T>
void check_case(const QkvCase& c, Tallies& t) {
  const DType dtype = DTypeTraits<T>::dtype;
  const bool narrow = dtype != DType::f32;
  const double v = unit_roundoff(DType::f32);
  const double u_s = narrow ? unit_roundoff(dtype) : 0.0, eta_s = narrow ? underflow_error(dtype) : 0.0;
  const HeadsShape& s = c.shape;
  const std::string where = c.describe();
  const std::size_t n = static_cast<std::size_t>(s.elements()), cols = static_cast<std::size_t>(s.cols());
  const HeadsMaps maps = heads_maps(s);

  const std::vector<T> x = random_values<T>(n, c.seed + 1, -2.0f, 2.0f);  // projected
  const std::vector<T> bias = random_values<T>(cols, c.seed + 2, -1.0f, 1.0f);
  const std::vector<T> dh = random_values<T>(n, c.seed + 3, -1.0f, 1.0f);   // d_heads
  const std::vector<T> ctx = random_values<T>(n, c.seed + 4, -1.0f, 1.0f);  // heads to merge
  const std::vector<T> dp = random_values<T>(n, c.seed + 5, -1.0f, 1.0f);   // projected to split
  Guarded<T> x_d(n, c.off_in), bias_d(cols, c.off_bias), dh_d(n, c.off_in), ctx_d(n, c.off_in),
      dp_d(n, c.off_in);
  x_d.upload(x);
  bias_d.upload(bias);
  dh_d.upload(dh);
  ctx_d.upload(ctx);
  dp_d.upload(dp);
  const std::size_t ws_bytes = kernels::qkv_bias_split_bwd_workspace_bytes(s);

  // The fused launchers, twice, on fresh poisoned outputs and workspace.
  FusedRun<T> first;
  for (int run = 0; run < 2; ++run) {
    Guarded<T> y(n, c.off_out), dproj(n, c.off_out2), dbias(cols, c.off_bias), merged(n, c.off_out),
        split(n, c.off_out2);
    DeviceBuffer<unsigned char> workspace(ws_bytes);
    workspace.fill_bytes(0xFF);
    kernels::launch_qkv_bias_split_fwd<T>(y.data(), x_d.data(), bias_d.data(), s, nullptr);
    kernels::launch_qkv_bias_split_bwd<T>(dproj.data(), dbias.data(), dh_d.data(), s, workspace.data(),
                                          ws_bytes, nullptr);
    kernels::launch_merge_heads<T>(merged.data(), ctx_d.data(), s, nullptr);
    kernels::launch_split_heads<T>(split.data(), dp_d.data(), s, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    FusedRun<T> got;
    got.split_fwd = y.download(run == 0 ? t.split_fwd : t.repeat, where);
    got.d_projected = dproj.download(run == 0 ? t.split_bwd_dprojected : t.repeat, where);
    got.dbias = dbias.download(run == 0 ? t.split_bwd_dbias : t.repeat, where);
    got.merge = merged.download(run == 0 ? t.merge : t.repeat, where);
    got.split = split.download(run == 0 ? t.split : t.repeat, where);
    if (run == 0) {
      first = std::move(got);
      continue;
    }
    t.repeat.add_exact(same_bits(got.split_fwd, first.split_fwd), where, "second split fwd differs bitwise");
    t.repeat.add_exact(same_bits(got.d_projected, first.d_projected), where,
                       "second d_projected differs bitwise");
    t.repeat.add_exact(same_bits(got.dbias, first.dbias), where, "second dbias differs bitwise");
    t.repeat.add_exact(same_bits(got.merge, first.merge), where, "second merge differs bitwise");
    t.repeat.add_exact(same_bits(got.split, first.split), where, "second split differs bitwise");
  }

  // The unfused baseline as the experiments run it.
  Guarded<T> tmp(n, c.off_out2), y_u(n, c.off_out), dproj_u(n, c.off_out2), dbias_u(cols, c.off_bias),
      merged_u(n, c.off_out);
  DeviceBuffer<unsigned char> workspace(ws_bytes);
  workspace.fill_bytes(0xFF);
  unfused_split_fwd<T>(y_u.data(), tmp.data(), x_d.data(), bias_d.data(), s, nullptr);
  unfused_split_bwd<T>(dproj_u.data(), dbias_u.data(), dh_d.data(), s, workspace.data(), ws_bytes, nullptr);
  unfused_merge<T>(merged_u.data(), ctx_d.data(), s, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> got_yu = y_u.download(t.unfused_split_fwd, where);
  const std::vector<T> got_dpu = dproj_u.download(t.unfused_split_bwd_dprojected, where);
  const std::vector<T> got_dbu = dbias_u.download(t.unfused_split_bwd_dbias, where);
  const std::vector<T> got_mu = merged_u.download(t.unfused_merge, where);

  // Split fwd against x + b in double, at the place the reference's split_heads puts it.
  for (std::size_t o = 0; o < n; ++o) {
    const auto src = static_cast<std::size_t>(maps.split[o]);
    const double z = as_double(x[src]) + as_double(bias[src % cols]);
    const double bound = v * std::fabs(z) + u_s * (1 + v) * std::fabs(z) + eta_s;
    t.split_fwd.add(as_double(first.split_fwd[o]), z, bound, where, o);
    t.unfused_split_fwd.add(as_double(got_yu[o]), z, bound, where, o);
  }
  t.unfused_split_fwd.add_exact(same_bits(got_yu, first.split_fwd), where,
                                "differs bitwise from the fused split");

  // The moves.
  expect_moved(t.split_bwd_dprojected, first.d_projected, dh, maps.merge, where);
  expect_moved(t.unfused_split_bwd_dprojected, got_dpu, dh, maps.merge, where);
  expect_moved(t.merge, first.merge, ctx, maps.merge, where);
  expect_moved(t.unfused_merge, got_mu, ctx, maps.merge, where);
  expect_moved(t.split, first.split, dp, maps.split, where);

  // dbias against the exact column sums of d_projected = merge(d_heads).
  const double D = bias_grad_sum_depth(s.rows(), s.cols());
  const double gamma = D * v / (1 - D * v);
  std::vector<double> sum(cols, 0.0), abs_sum(cols, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double value = as_double(dh[static_cast<std::size_t>(maps.merge[i])]);
    sum[i % cols] += value;  // multiples of 2^-24 in [-1, 1], < 2^19 of them: exact in double
    abs_sum[i % cols] += std::fabs(value);
  }
  for (std::size_t col = 0; col < cols; ++col) {
    const double bound = u_s * std::fabs(sum[col]) + (1 + u_s) * gamma * abs_sum[col] + eta_s;
    t.split_bwd_dbias.add(as_double(first.dbias[col]), sum[col], bound, where, col);
    t.unfused_split_bwd_dbias.add(as_double(got_dbu[col]), sum[col], bound, where, col);
  }
  t.unfused_split_bwd_dbias.add_exact(same_bits(got_dbu, first.dbias), where,
                                      "differs bitwise from the fused dbias");
}

template <class T>
std::vector<CheckResult> checks_for(std::uint64_t seed) {
  Tallies t("operators/qkv_reshape/", std::string("/") + DTypeTraits<T>::name);
  for (const QkvCase& c : qkv_cases(seed ^ (static_cast<std::uint64_t>(DTypeTraits<T>::dtype) + 11))) {
    check_case<T>(c, t);
  }
  return t.results();
}

}  // namespace

void add_qkv_reshape_experiments(SuiteSpec& suite, const SuiteOptions& options) {
  struct Model {
    std::int64_t hidden, heads;  // Transformer-base, Transformer-big
  };
  const std::vector<std::int64_t> tokens = shapes<std::int64_t>(options, {128}, {4096}, {4096, 16384});
  const std::vector<std::int64_t> lens = shapes<std::int64_t>(options, {64}, {64}, {64, 256});
  const std::vector<Model> models = shapes<Model>(options, {{512, 8}}, {{512, 8}}, {{512, 8}, {1024, 16}});
  for (const Pass pass : {Pass::split_fwd, Pass::split_bwd, Pass::merge}) {
    for (const std::int64_t t : tokens) {
      for (const std::int64_t len : lens) {
        for (const Model& m : models) {
          suite.experiments.push_back(qkv_reshape_experiment<float>(pass, t, len, m.hidden, m.heads));
          suite.experiments.push_back(qkv_reshape_experiment<__nv_bfloat16>(pass, t, len, m.hidden, m.heads));
        }
      }
    }
  }
}

std::vector<CheckResult> qkv_reshape_gpu_checks(std::uint64_t seed) {
  return checks_for_all_dtypes([&](auto tag) { return checks_for<decltype(tag)>(seed); });
}

}  // namespace seqbench::operators
