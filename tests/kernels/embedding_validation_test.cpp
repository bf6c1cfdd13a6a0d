// The embedding family on the CPU: the sorted backward's workspace layout and every launcher's
// argument validation (fake non-null pointers: launchers validate before any CUDA call; each
// expectation checks the message, since without a GPU a call that slipped through would still
// throw at the launch). embedding_bwd_sorted_workspace_bytes itself asks CUB and needs a device:
// the GPU test covers it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/embedding.h"
#include "tests/common/expect_error.h"

namespace seqbench::kernels {
namespace {

using seqbench::testing::expect_error;

template <class T>
T* fake(std::uintptr_t slot) {
  return reinterpret_cast<T*>(slot << 32);
}

// `ptr` moved by `bytes` (a misaligned tensor).
template <class T>
T* shifted(T* ptr, std::uintptr_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(ptr) + bytes);
}

EmbeddingShape shape_of(std::int64_t b, std::int64_t l, std::int64_t h, std::int64_t vocab,
                        std::int64_t pos = 0) {
  return EmbeddingShape{b, l, h, vocab, pos};
}

EmbeddingConfig learned_config() {
  EmbeddingConfig c;
  c.positions = PositionEncoding::learned;
  c.padding_idx = 0;
  c.dropout = {0.1f, 1, 2};
  return c;
}

TEST(EmbeddingSortLayout, FourArraysPerTableThenThePartialsThenTheBitmapsThenTheSortStorage) {
  // 1000 pairs: 4000-byte arrays rounded up to 4096; 32 windows of 32 entries, 2 partial rows
  // each of 100 floats: 25600 bytes (a multiple of 256); a 5000-row table: 157 bitmap words,
  // 628 bytes rounded up to 768.
  EXPECT_EQ(kEmbeddingSortChunk, 32);
  const EmbeddingSortLayout one = embedding_sort_layout(1000, 100, 5000, false, 0, 777);
  EXPECT_EQ(one.token_keys_in, 0u);
  EXPECT_EQ(one.token_values_in, 4096u);
  EXPECT_EQ(one.token_values_out, 3u * 4096u);
  EXPECT_EQ(one.partial, 4u * 4096u);
  EXPECT_EQ(one.partial_bytes, 2u * 32u * 100u * 4u);
  EXPECT_EQ(one.token_touched, 4u * 4096u + 25600u);
  EXPECT_EQ(one.touched_bytes, 157u * 4u);
  EXPECT_EQ(one.sort_temp, 4u * 4096u + 25600u + 768u);
  EXPECT_EQ(one.total, 4u * 4096u + 25600u + 768u + 1024u);
  // Learned, 3 columns, 10 tokens and 33 positions: one token word, then two position words.
  const EmbeddingSortLayout two = embedding_sort_layout(1000, 3, 10, true, 33, 0);
  EXPECT_EQ(two.position_keys_in, 4u * 4096u);
  EXPECT_EQ(two.position_values_out, 7u * 4096u);
  EXPECT_EQ(two.positions, 8u * 4096u);
  EXPECT_EQ(two.partial, 9u * 4096u);
  EXPECT_EQ(two.partial_bytes, 2u * 32u * 3u * 4u);  // 768 bytes, a multiple of 256
  EXPECT_EQ(two.token_touched, 9u * 4096u + 768u);
  EXPECT_EQ(two.position_touched, two.token_touched + 4u);
  EXPECT_EQ(two.touched_bytes, 3u * 4u);
  EXPECT_EQ(two.total, 9u * 4096u + 768u + 256u);
  // 33 pairs: 2 windows (the second holds 1 entry).
  EXPECT_EQ(embedding_sort_layout(33, 5, 7, false, 0, 0).partial_bytes, 2u * 2u * 5u * 4u);
  // No pairs: no workspace at all (the launcher then zeroes the tables with memsets).
  EXPECT_EQ(embedding_sort_layout(0, 7, 64, true, 1, 0).total, 0u);
  for (const std::int64_t n : {1, 3, 31, 32, 33, 63, 64, 65, 16384}) {
    for (const std::int64_t h : {1, 3, 8, 1023}) {
      for (const std::int64_t rows : {1, 31, 32, 33, 32000}) {
        const EmbeddingSortLayout l = embedding_sort_layout(n, h, rows, true, rows + 1, 5);
        for (const std::size_t at :
             {l.token_keys_in, l.token_values_in, l.token_keys_out, l.token_values_out, l.position_keys_in,
              l.position_values_in, l.position_keys_out, l.position_values_out, l.positions, l.partial,
              l.token_touched, l.sort_temp}) {
          EXPECT_EQ(at % 256, 0u) << n;
        }
        EXPECT_GE(l.token_values_in - l.token_keys_in, static_cast<std::size_t>(n) * 4);
        const auto windows = static_cast<std::size_t>((n + 31) / 32);
        EXPECT_EQ(l.partial_bytes, 2 * windows * static_cast<std::size_t>(h) * 4) << n << " " << h;
        EXPECT_GE(l.partial - l.positions, static_cast<std::size_t>(n) * 4);
        EXPECT_GE(l.token_touched - l.partial, l.partial_bytes);
        // A bit for every row of each table, the position words right after the token words.
        EXPECT_EQ(l.position_touched - l.token_touched, static_cast<std::size_t>((rows + 31) / 32) * 4)
            << rows;
        EXPECT_EQ(l.touched_bytes, static_cast<std::size_t>((rows + 31) / 32 + (rows + 32) / 32) * 4) << rows;
        EXPECT_GE(l.sort_temp - l.token_touched, l.touched_bytes);
        EXPECT_GE(l.total, l.sort_temp + 5);
      }
    }
  }
  expect_error([] { embedding_sort_layout(-1, 8, 1, false, 0, 0); }, "embedding_sort_layout: tokens -1");
  expect_error([] { embedding_sort_layout(8, 0, 1, false, 0, 0); },
               "embedding_sort_layout: hidden 0 outside [1, ");
  expect_error([] { embedding_sort_layout(8, 8, 0, false, 0, 0); },
               "embedding_sort_layout: vocab 0 outside [1, ");
  expect_error([] { embedding_sort_layout(8, 8, 4, false, 3, 0); },
               "embedding_sort_layout: num_positions 3 outside [0, 2147483646] (0 unless learned)");
}

TEST(EmbeddingSortLayout, KeyBitsCoverTheSentinel) {
  EXPECT_EQ(embedding_sort_key_bits(0), 1);
  EXPECT_EQ(embedding_sort_key_bits(1), 1);
  EXPECT_EQ(embedding_sort_key_bits(2), 2);
  EXPECT_EQ(embedding_sort_key_bits(32000), 15);
  EXPECT_EQ(embedding_sort_key_bits(32768), 16);
  EXPECT_EQ(embedding_sort_key_bits(50257), 16);
}

TEST(EmbeddingArgs, RejectBadShapesAndConfigs) {
  const EmbeddingConfig ok;
  expect_error([&] { require_embedding_args(shape_of(-1, 4, 8, 10), ok, "op"); },
               "op: batch -1 x len 4 is negative");
  expect_error([&] { require_embedding_args(shape_of(2, 4, 0, 10), ok, "op"); }, "op: hidden 0 must be >= 1");
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 0), ok, "op"); }, "op: vocab 0 outside [1, ");
  expect_error([&] { require_embedding_args(shape_of(1 << 20, 1 << 12, 8, 10), ok, "op"); },
               "tokens > 2147483647");
  EmbeddingConfig c = ok;
  c.padding_idx = 10;
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); },
               "padding_idx 10 outside [-1, vocab 10)");
  c.padding_idx = -2;
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); }, "padding_idx -2 outside");
  c = ok;
  c.scale = std::numeric_limits<float>::infinity();
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); }, "scale inf is not finite");
  c.scale = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); }, "is not finite");
  for (const float p : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    c = ok;
    c.dropout.p = p;
    expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); },
                 "op: dropout probability p = ");
  }
  c = ok;
  c.position_offset = -1;
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); },
               "position_offset -1 must be >= 0");
  c.position_offset = (1 << 24) - 3;
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10), c, "op"); },
               "position_offset + len = 16777217 > 16777216");
  c = learned_config();
  c.position_offset = 3;
  expect_error([&] { require_embedding_args(shape_of(2, 4, 8, 10, 6), c, "op"); },
               "num_positions 6 outside [position_offset + len = 7, ");
  EXPECT_NO_THROW(require_embedding_args(shape_of(2, 4, 8, 10, 7), c, "op"));
  c.indexing = PositionIndexing::nonpad_count;
  EXPECT_NO_THROW(require_embedding_args(shape_of(2, 4, 8, 10, 7), c, "op"));
  EXPECT_NO_THROW(require_embedding_args(shape_of(0, 0, 1, 1), ok, "op"));
}

// An enum value outside PositionEncoding or PositionIndexing (a cast, a corrupt config) is refused
// by every entry point: the workspace sizing read `positions == sinusoidal` and the launch
// `positions == learned`, so the value 2 sized no workspace and then wrote the sinusoid
// frequencies through it (a segfault under simt).
TEST(EmbeddingArgs, RejectPositionEnumsOutsideTheirValues) {
  EmbeddingConfig c;
  c.positions = static_cast<PositionEncoding>(2);
  const EmbeddingShape s = shape_of(1, 4, 8, 10);
  expect_error([&] { require_embedding_args(s, c, "op"); },
               "op: unknown position encoding 2 (expected sinusoidal or learned)");
  expect_error([&] { (void)embedding_fwd_workspace_bytes(s, c); },
               "embedding_fwd_workspace_bytes: unknown position encoding 2");
  expect_error([&] { (void)embedding_bwd_atomic_workspace_bytes(s, c, false); },
               "unknown position encoding 2");
  float* y = fake<float>(1);
  expect_error(
      [&] {
        launch_embedding_fwd<float>(y, fake<std::int32_t>(2), fake<float>(3), fake<float>(4), s, c, nullptr,
                                    0, nullptr);
      },
      "unknown position encoding 2");
  c = EmbeddingConfig{};
  c.indexing = static_cast<PositionIndexing>(-1);
  expect_error([&] { require_embedding_args(s, c, "op"); },
               "op: unknown position indexing -1 (expected slot or nonpad_count)");
}

TEST(EmbeddingLaunchers, ValidateBeforeAnythingElse) {
  const EmbeddingShape s = shape_of(2, 4, 8, 10, 4);
  const EmbeddingConfig c = learned_config();
  float* y = fake<float>(1);
  const std::int32_t* tokens = fake<std::int32_t>(2);
  const float *table = fake<float>(3), *pos = fake<float>(4);
  expect_error(
      [&] {
        launch_embedding_fwd<float>(y, tokens, table, pos, shape_of(2, 4, 0, 10, 4), c, nullptr, 0, nullptr);
      },
      "embedding_fwd: hidden 0");
  expect_error([&] { launch_embedding_fwd<float>(nullptr, tokens, table, pos, s, c, nullptr, 0, nullptr); },
               "embedding_fwd: y is null");
  expect_error([&] { launch_embedding_fwd<float>(y, nullptr, table, pos, s, c, nullptr, 0, nullptr); },
               "tokens is null");
  expect_error([&] { launch_embedding_fwd<float>(y, tokens, nullptr, pos, s, c, nullptr, 0, nullptr); },
               "token_table is null");
  expect_error([&] { launch_embedding_fwd<float>(y, tokens, table, nullptr, s, c, nullptr, 0, nullptr); },
               "position_table is null");
  expect_error(
      [&] {
        launch_embedding_fwd<float>(y, tokens, reinterpret_cast<const float*>(y) + 10, pos, s, c, nullptr, 0,
                                    nullptr);
      },
      "output y overlaps input token_table");
  expect_error(
      [&] {
        launch_embedding_fwd<float>(y, reinterpret_cast<const std::int32_t*>(y) + 3, table, pos, s, c,
                                    nullptr, 0, nullptr);
      },
      "output y overlaps input tokens");
  // Empty batches launch nothing; sinusoidal positions need no table.
  EXPECT_NO_THROW(launch_embedding_fwd<__half>(nullptr, nullptr, nullptr, nullptr, shape_of(0, 4, 8, 10, 4),
                                               c, nullptr, 0, nullptr));
  // nonpad_count positions need B·L·4 bytes of workspace (the positions pre-pass); the forward
  // also the sinusoid frequencies, floor(H/2) float2 after the positions rounded up to 256 bytes.
  EmbeddingConfig nonpad = c;
  nonpad.indexing = PositionIndexing::nonpad_count;
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(s, nonpad), 8u * 4u);
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(s, c), 0u);
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(shape_of(0, 4, 8, 10, 4), nonpad), 0u);
  // A forked atomic backward adds the token rows' bitmap, ceil(vocab/32) words, after the positions
  // rounded up to 256 bytes; nothing for an empty batch.
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(s, nonpad, true), 256u + 4u);
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(s, c, true), 4u);
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(shape_of(1, 4, 8, 33, 4), c, true), 8u);
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(shape_of(0, 4, 8, 10, 4), nonpad, true), 0u);
  EXPECT_EQ(embedding_fwd_workspace_bytes(s, c), 0u);         // learned, slot
  EXPECT_EQ(embedding_fwd_workspace_bytes(s, nonpad), 256u);  // learned, nonpad_count
  // Sinusoids with B >= 2: the L·H float table (whose kernel computes the frequencies itself);
  // otherwise the floor(H/2) frequencies as float2.
  EmbeddingConfig sinus;
  EXPECT_EQ(embedding_fwd_workspace_bytes(s, sinus), 4u * 8u * 4u);                 // L = 4, H = 8
  EXPECT_EQ(embedding_fwd_workspace_bytes(shape_of(1, 4, 8, 10), sinus), 4u * 8u);  // one sentence: no table
  EXPECT_EQ(embedding_fwd_workspace_bytes(shape_of(2, 4, 1, 10), sinus), 0u);       // H = 1: all zero
  EXPECT_EQ(embedding_fwd_workspace_bytes(shape_of(2, 4, 1001, 10), sinus), 4u * 1001u * 4u);
  // The table's cap, 8 MiB: 2048 x 1024 floats is at it, one more row is past it.
  EXPECT_TRUE(embedding_fwd_uses_sinusoid_table(shape_of(2, 2048, 1024, 10), sinus));
  EXPECT_EQ(embedding_fwd_workspace_bytes(shape_of(2, 2048, 1024, 10), sinus), 8u << 20);
  EXPECT_FALSE(embedding_fwd_uses_sinusoid_table(shape_of(2, 2049, 1024, 10), sinus));
  EXPECT_EQ(embedding_fwd_workspace_bytes(shape_of(2, 2049, 1024, 10), sinus), 4096u);
  EXPECT_FALSE(embedding_fwd_uses_sinusoid_table(shape_of(1, 4, 8, 10), sinus));
  EXPECT_FALSE(embedding_fwd_uses_sinusoid_table(s, c));  // learned
  sinus.indexing = PositionIndexing::nonpad_count;
  EXPECT_EQ(embedding_fwd_workspace_bytes(shape_of(100, 3, 7, 10), sinus), 1280u + 3u * 7u * 4u);
  // The atomic backward computes positions only for a learned table's gradient: none for sinusoids.
  EXPECT_EQ(embedding_bwd_atomic_workspace_bytes(shape_of(100, 3, 7, 10), sinus), 0u);
  expect_error([&] { launch_embedding_fwd<float>(y, tokens, table, pos, s, nonpad, nullptr, 0, nullptr); },
               "embedding_fwd: workspace of 0 bytes, needs 256");
  expect_error([&] { launch_embedding_fwd<float>(y, tokens, table, pos, s, nonpad, nullptr, 256, nullptr); },
               "embedding_fwd: workspace is null");
  expect_error([&] { launch_embedding_fwd<float>(y, tokens, table, pos, s, nonpad, y + 2, 256, nullptr); },
               "embedding_fwd: output y overlaps input workspace");
  expect_error(
      [&] { launch_embedding_fwd<float>(y, tokens, table, pos, s, nonpad, fake<char>(9) + 4, 256, nullptr); },
      "embedding_fwd: workspace is not 8-byte aligned");
  expect_error([&] { launch_embedding_fwd<float>(y, tokens, table, pos, s, sinus, nullptr, 16, nullptr); },
               "embedding_fwd: workspace of 16 bytes, needs 384");  // 256 + 4 x 8 floats
  expect_error(
      [&] {
        launch_embedding_bwd_atomic<float>(y, fake<float>(11), fake<float>(10), tokens, s, nonpad, nullptr, 0,
                                           nullptr);
      },
      "embedding_bwd_atomic: workspace of 0 bytes, needs 32");
  // The pre-pass kernels write the workspace before the tables and dy are read.
  expect_error(
      [&] {
        launch_embedding_fwd<float>(y, tokens, table, pos, s, nonpad, const_cast<float*>(table), 256,
                                    nullptr);
      },
      "embedding_fwd: output workspace overlaps input token_table");
  expect_error(
      [&] {
        launch_embedding_fwd<float>(y, tokens, table, pos, s, nonpad, const_cast<float*>(pos), 256, nullptr);
      },
      "embedding_fwd: output workspace overlaps input position_table");
  expect_error(
      [&] {
        launch_embedding_bwd_atomic<float>(y, fake<float>(11), fake<float>(10), tokens, s, nonpad,
                                           fake<float>(10), 32, nullptr);
      },
      "embedding_bwd_atomic: output workspace overlaps input dy");

  __nv_bfloat16* dt = fake<__nv_bfloat16>(5);
  __nv_bfloat16* dp = fake<__nv_bfloat16>(6);
  const __nv_bfloat16* dy = fake<__nv_bfloat16>(7);
  expect_error(
      [&] { launch_embedding_bwd_atomic<__nv_bfloat16>(nullptr, dp, dy, tokens, s, c, nullptr, 0, nullptr); },
      "embedding_bwd_atomic: d_token_table is null");
  expect_error(
      [&] { launch_embedding_bwd_atomic<__nv_bfloat16>(dt, nullptr, dy, tokens, s, c, nullptr, 0, nullptr); },
      "d_position_table is null");
  expect_error(
      [&] { launch_embedding_bwd_atomic<__nv_bfloat16>(dt, dp, nullptr, tokens, s, c, nullptr, 0, nullptr); },
      "dy is null");
  expect_error(
      [&] { launch_embedding_bwd_atomic<__nv_bfloat16>(dt, dt + 40, dy, tokens, s, c, nullptr, 0, nullptr); },
      "output d_position_table overlaps input d_token_table");
  expect_error(
      [&] { launch_embedding_bwd_atomic<__nv_bfloat16>(dt, dp, dt + 8, tokens, s, c, nullptr, 0, nullptr); },
      "output d_token_table overlaps input dy");
  void* ws = fake<void>(8);
  expect_error(
      [&] {
        launch_embedding_bwd_sorted<__nv_bfloat16>(dt, dp, dy, tokens, s, c, nullptr, 1 << 20, nullptr);
      },
      "embedding_bwd_sorted: workspace is null");
  expect_error(
      [&] { launch_embedding_bwd_sorted<__nv_bfloat16>(dt, dp, dy, tokens, s, c, ws, 100, nullptr); },
      "workspace of 100 bytes, needs at least " +
          std::to_string(embedding_sort_layout(8, 8, 10, true, 4, 0).total));
  expect_error(
      [&] {
        launch_embedding_bwd_sorted<__nv_bfloat16>(dt, dp, dy, tokens, s, c, static_cast<char*>(ws) + 4,
                                                   1 << 20, nullptr);
      },
      "workspace is not 256-byte aligned");
  expect_error(
      [&] { launch_embedding_bwd_sorted<__nv_bfloat16>(dt, dp, dy, tokens, s, c, dt, 1 << 20, nullptr); },
      "output d_token_table overlaps input workspace");
  EmbeddingConfig bad = c;
  bad.padding_idx = 11;
  expect_error(
      [&] { launch_embedding_bwd_sorted<__nv_bfloat16>(dt, dp, dy, tokens, s, bad, ws, 1 << 20, nullptr); },
      "embedding_bwd_sorted: padding_idx 11");
  // A fork: a created side stream (not a default one) other than the launch's, two distinct events
  // (checked before the workspace: the handles below are never used).
  const auto stream = reinterpret_cast<cudaStream_t>(fake<void>(20));
  const auto side = reinterpret_cast<cudaStream_t>(fake<void>(21));
  const auto e1 = reinterpret_cast<cudaEvent_t>(fake<void>(22));
  const auto e2 = reinterpret_cast<cudaEvent_t>(fake<void>(23));
  const auto with_fork = [&](StreamFork fork) {
    return [&, fork] {
      launch_embedding_bwd_sorted<__nv_bfloat16>(dt, dp, dy, tokens, s, c, ws, 1 << 20, stream, &fork);
    };
  };
  const auto atomic_with_fork = [&](StreamFork fork, std::size_t ws_bytes) {
    return [&, fork, ws_bytes] {
      launch_embedding_bwd_atomic<__nv_bfloat16>(dt, dp, dy, tokens, s, c, ws, ws_bytes, stream, &fork);
    };
  };
  // The atomic backward checks its fork the same way, and a forked one needs the bitmap's bytes
  // even where the unforked one needs no workspace (learned positions, slot indexing: c).
  expect_error(atomic_with_fork({stream, e1, e2}, 1 << 20),
               "embedding_bwd_atomic: fork.side is the launch's own stream");
  expect_error(atomic_with_fork({side, e1, e1}, 1 << 20),
               "embedding_bwd_atomic: fork.forked and fork.joined are the same event");
  expect_error(atomic_with_fork({side, e1, e2}, 0), "embedding_bwd_atomic: workspace of 0 bytes, needs 4");
  expect_error(atomic_with_fork({side, e1, e1}, 0),
               "fork.forked and fork.joined are the same event");  // first
  expect_error(with_fork({nullptr, e1, e2}),
               "embedding_bwd_sorted: fork.side is a default stream (the legacy one)");
  expect_error(with_fork({cudaStreamLegacy, e1, e2}), "fork.side is a default stream (the legacy one)");
  expect_error(with_fork({cudaStreamPerThread, e1, e2}),
               "fork.side is a default stream (the per-thread one)");
  expect_error(with_fork({stream, e1, e2}), "embedding_bwd_sorted: fork.side is the launch's own stream");
  expect_error(with_fork({side, nullptr, e2}), "embedding_bwd_sorted: fork.forked is a null event");
  expect_error(with_fork({side, e1, nullptr}), "embedding_bwd_sorted: fork.joined is a null event");
  expect_error(with_fork({side, e1, e1}),
               "embedding_bwd_sorted: fork.forked and fork.joined are the same event");
}

TEST(EmbeddingLaunchers, RejectTensorsNotAlignedToTheirElement) {
  const EmbeddingShape s = shape_of(2, 4, 8, 10, 4);
  const EmbeddingConfig c = learned_config();
  const std::int32_t* tokens = fake<std::int32_t>(2);
  float* y = fake<float>(1);
  const float *table = fake<float>(3), *pos = fake<float>(4);
  expect_error(
      [&] { launch_embedding_fwd<float>(shifted(y, 2), tokens, table, pos, s, c, nullptr, 0, nullptr); },
      "embedding_fwd: y (0x100000002) is not aligned to 4 bytes");
  expect_error(
      [&] { launch_embedding_fwd<float>(y, shifted(tokens, 1), table, pos, s, c, nullptr, 0, nullptr); },
      "embedding_fwd: tokens (0x200000001) is not aligned to 4 bytes");
  expect_error(
      [&] { launch_embedding_fwd<float>(y, tokens, shifted(table, 3), pos, s, c, nullptr, 0, nullptr); },
      "embedding_fwd: token_table (0x300000003) is not aligned to 4 bytes");
  expect_error(
      [&] { launch_embedding_fwd<float>(y, tokens, table, shifted(pos, 2), s, c, nullptr, 0, nullptr); },
      "embedding_fwd: position_table (0x400000002) is not aligned to 4 bytes");
  __half* dt = fake<__half>(5);
  __half* dp = fake<__half>(6);
  const __half* dy = fake<__half>(7);
  expect_error(
      [&] { launch_embedding_bwd_atomic<__half>(shifted(dt, 1), dp, dy, tokens, s, c, nullptr, 0, nullptr); },
      "embedding_bwd_atomic: d_token_table (0x500000001) is not aligned to 2 bytes");
  expect_error(
      [&] { launch_embedding_bwd_atomic<__half>(dt, shifted(dp, 1), dy, tokens, s, c, nullptr, 0, nullptr); },
      "embedding_bwd_atomic: d_position_table (0x600000001) is not aligned to 2 bytes");
  expect_error(
      [&] { launch_embedding_bwd_atomic<__half>(dt, dp, shifted(dy, 1), tokens, s, c, nullptr, 0, nullptr); },
      "embedding_bwd_atomic: dy (0x700000001) is not aligned to 2 bytes");
  void* ws = fake<void>(8);
  expect_error(
      [&] {
        launch_embedding_bwd_sorted<__half>(dt, dp, shifted(dy, 1), tokens, s, c, ws, 1 << 20, nullptr);
      },
      "embedding_bwd_sorted: dy (0x700000001) is not aligned to 2 bytes");
  expect_error(
      [&] {
        launch_embedding_bwd_sorted<__half>(dt, dp, dy, shifted(tokens, 2), s, c, ws, 1 << 20, nullptr);
      },
      "embedding_bwd_sorted: tokens (0x200000002) is not aligned to 4 bytes");
  // The baseline kernels.
  expect_error([&] { launch_gather_rows<float>(y, shifted(table, 1), 3, tokens, 4, 8, nullptr); },
               "gather_rows: table (0x300000001) is not aligned to 4 bytes");
  expect_error([&] { launch_gather_rows<float>(y, table, 3, shifted(tokens, 2), 4, 8, nullptr); },
               "gather_rows: index (0x200000002) is not aligned to 4 bytes");
  expect_error([&] { launch_scale<__half>(shifted(dt, 1), dy, 8, 2.0f, nullptr); },
               "scale: y (0x500000001) is not aligned to 2 bytes");
  expect_error([&] { launch_zero_padding_rows<float>(y, shifted(table, 2), tokens, 4, 8, 0, nullptr); },
               "zero_padding_rows: x (0x300000002) is not aligned to 4 bytes");
  expect_error(
      [&] { launch_scatter_add_rows<float>(shifted(y, 1), 3, table, tokens, tokens, 0, 4, 8, nullptr); },
      "scatter_add_rows: grad (0x100000001) is not aligned to 4 bytes");
  expect_error(
      [&] {
        launch_embedding_positions(shifted(fake<std::int32_t>(9), 2), tokens, shape_of(2, 4, 8, 10),
                                   EmbeddingConfig{}, nullptr);
      },
      "embedding_positions: positions (0x900000002) is not aligned to 4 bytes");
}

TEST(EmbeddingBaseline, ValidatesItsArguments) {
  float* y = fake<float>(1);
  const float* x = fake<float>(2);
  const std::int32_t* idx = fake<std::int32_t>(3);
  expect_error([&] { launch_gather_rows<float>(y, x, 0, idx, 4, 8, nullptr); }, "gather_rows: table_rows 0");
  expect_error([&] { launch_gather_rows<float>(y, nullptr, 3, idx, 4, 8, nullptr); },
               "gather_rows: table is null");
  expect_error([&] { launch_gather_rows<float>(y, x, 3, idx, 4, 0, nullptr); }, "gather_rows: hidden 0");
  expect_error([&] { launch_scale<float>(y, y + 3, 8, 2.0f, nullptr); }, "scale: output y overlaps input x");
  expect_error([&] { launch_zero_padding_rows<float>(y, x, idx, 4, 8, -3, nullptr); }, "padding_idx -3 < -1");
  expect_error([&] { launch_scatter_add_rows<float>(y, 3, x, idx, nullptr, 0, 4, 8, nullptr); },
               "scatter_add_rows: tokens is null");
  expect_error(
      [&] { launch_embedding_positions(nullptr, idx, shape_of(2, 4, 8, 10), EmbeddingConfig{}, nullptr); },
      "embedding_positions: positions is null");
  EXPECT_NO_THROW(launch_scale<__half>(nullptr, nullptr, 0, 1.0f, nullptr));
}

TEST(EmbeddingValidation, WorkspaceUptoBoundsEveryAdmittedShape) {
  // embedding_fwd_workspace_bytes_upto is the largest workspace over every B·L <= max_tokens,
  // L <= max_len: brute force over small maxima, with hidden sizes around the table's cap (at
  // H = 2^20 only two rows fit 8 MiB, above 2^21 none).
  for (const std::int64_t h : {std::int64_t{1}, std::int64_t{2}, std::int64_t{7}, std::int64_t{1} << 20,
                               (std::int64_t{1} << 21) + 1}) {
    for (const auto positions : {PositionEncoding::sinusoidal, PositionEncoding::learned}) {
      for (const auto indexing : {PositionIndexing::slot, PositionIndexing::nonpad_count}) {
        EmbeddingConfig c;
        c.positions = positions;
        c.indexing = indexing;
        for (std::int64_t max_tokens = 1; max_tokens <= 12; ++max_tokens) {
          for (std::int64_t max_len = 1; max_len <= max_tokens; ++max_len) {
            const EmbeddingShape dims = shape_of(0, 0, h, 10, max_len);
            const std::size_t bound = embedding_fwd_workspace_bytes_upto(max_tokens, max_len, dims, c);
            std::size_t largest = 0;
            for (std::int64_t len = 1; len <= max_len; ++len) {
              for (std::int64_t batch = 1; batch * len <= max_tokens; ++batch) {
                const std::size_t need =
                    embedding_fwd_workspace_bytes(shape_of(batch, len, h, 10, max_len), c);
                ASSERT_LE(need, bound) << "H " << h << ", B " << batch << ", L " << len << ", max_tokens "
                                       << max_tokens << ", max_len " << max_len;
                largest = std::max(largest, need);
              }
            }
            ASSERT_EQ(bound, largest)
                << "H " << h << ", max_tokens " << max_tokens << ", max_len " << max_len;
          }
        }
      }
    }
  }
  expect_error(
      [] { (void)embedding_fwd_workspace_bytes_upto(4, 5, shape_of(0, 0, 8, 10), EmbeddingConfig{}); },
      "embedding_fwd_workspace_bytes_upto: max_len 5 and max_tokens 4 need 1 <= max_len <= max_tokens");
}

}  // namespace
}  // namespace seqbench::kernels
