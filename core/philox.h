// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3" (SC'11), written once for host and device.
//
// A draw is a pure function of (seed, offset, index), so a CPU test and a CUDA kernel that agree
// on those three get the same bits, and a backward pass can regenerate a forward's dropout mask
// instead of storing it. The stream convention, fixed for the whole project:
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (index/4 low, index/4 high, offset low, offset high)
//   draw #index = word (index % 4) of philox4x32_10(counter, key)
// `offset` separates independent streams under one seed (one per layer and step, say). Dropout
// draws 16 bits an element instead, eight to a call (counter = index/8: "Dropout's draws" below).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"  // SEQBENCH_HD

namespace seqbench {

struct PhiloxWords {
  std::uint32_t w[4];
};

namespace philox_detail {
constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

// The same 64-bit product on both sides; on the device __umulhi and a 32-bit multiply give it in
// two instructions (a 64-bit multiply costs about a quarter more instructions per Philox call).
SEQBENCH_HD inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  lo = a * b;
#else
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
#endif
}
}  // namespace philox_detail

// Ten rounds of Philox4x32 on one counter under one key.
SEQBENCH_HD inline PhiloxWords philox4x32_10(PhiloxWords counter, std::uint32_t key0, std::uint32_t key1) {
  using namespace philox_detail;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, counter.w[0], hi0, lo0);
    mulhilo(kMul1, counter.w[2], hi1, lo1);
    counter = PhiloxWords{{hi1 ^ counter.w[1] ^ key0, lo1, hi0 ^ counter.w[3] ^ key1, lo0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// The four consecutive draws index = 4*group .. 4*group+3 of stream (seed, offset).
SEQBENCH_HD inline PhiloxWords philox_group(std::uint64_t seed, std::uint64_t offset, std::uint64_t group) {
  const PhiloxWords counter{{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32),
                             static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)}};
  return philox4x32_10(counter, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Word j (0..3) of a group. A select chain rather than words.w[j]: on the device an array indexed
// by a value known only at run time is placed in local memory (a 16-byte stack frame, a store of
// all four words and a load, per group), where selects stay in registers. Same value.
SEQBENCH_HD inline std::uint32_t philox_word(const PhiloxWords& words, unsigned j) {
  return j == 0 ? words.w[0] : j == 1 ? words.w[1] : j == 2 ? words.w[2] : words.w[3];
}

// Draw #index of stream (seed, offset) as 32 random bits.
SEQBENCH_HD inline std::uint32_t philox_bits(std::uint64_t seed, std::uint64_t offset, std::uint64_t index) {
  return philox_word(philox_group(seed, offset, index >> 2), static_cast<unsigned>(index & 3));
}

// Maps 32 random bits to a float uniform on [0, 1) with 24 bits of resolution (exact in float).
// For uniforms that are not dropout's (test data, the drift study's noise).
SEQBENCH_HD inline float bits_to_unit_float(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Draw #index of stream (seed, offset) as a float uniform on [0, 1).
SEQBENCH_HD inline float philox_uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t index) {
  return bits_to_unit_float(philox_bits(seed, offset, index));
}

// ---------------------------------------------------------------------------------------------
// Dropout's draws: 16 bits each, eight to a Philox call.
//   dropout draw #index = bits 16·(index & 1) .. 16·(index & 1) + 15 (the low half first) of word
//                         (index >> 1) & 3 of philox_group(seed, offset, index >> 3)
// Why 16 bits and not a whole word: Philox4x32-10 is about 40 instructions a call on the device (10 rounds
// of 2 IMAD.WIDE.U32 and 2 LOP3), 10 an element at 4 draws a call, the largest single cost of a
// 16-bit dropout kernel's element (kernels/NOTES-dropout-bias.md, "Sixteen-bit draws"). Eight
// draws a call halve it. What it costs: the drop probability is resolved to 2^-16 instead of
// 2^-24, i.e. an element is dropped with probability dropout_drop_probability(p) =
// ceil(p·2^16)/2^16, within 2^-16 above p (0.1 -> 0.100006). Kept elements are still scaled by
// 1/(1-p), as nn.Dropout does, so E[y] = x·(1 - p_drop)/(1 - p), low by less than 2^-16/(1 - p)
// relative (the bound is 1.7e-5 at p = 0.1; the bias there is 6.8e-6). FlashAttention-2 compares
// 8-bit draws against an 8-bit threshold (its p_dropout_in_uint8_t).
SEQBENCH_HD inline std::uint32_t dropout_draw(const PhiloxWords& words, unsigned j) {  // j = index & 7
  const std::uint32_t word = philox_word(words, j >> 1);
  return (j & 1u) != 0 ? word >> 16 : word & 0xffffu;
}

SEQBENCH_HD inline std::uint32_t philox_dropout_draw(std::uint64_t seed, std::uint64_t offset,
                                                     std::uint64_t index) {
  return dropout_draw(philox_group(seed, offset, index >> 3), static_cast<unsigned>(index & 7));
}

// Dropout draw #index as a uniform on [0, 1): draw · 2^-16, exact in float.
SEQBENCH_HD inline float dropout_uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t index) {
  return static_cast<float>(philox_dropout_draw(seed, offset, index)) * (1.0f / 65536.0f);
}

// The test dropout_uniform >= p as an integer test on the same draw. The uniform is draw · 2^-16
// exactly, and p · 2^16 is exact for every float p in (0, 1] (a power-of-two scale of a float
// stays a float there), so  u >= p  <=>  draw >= ceil(p · 2^16).  A launcher computes the
// threshold once on the host (draw_threshold) and its kernel tests each draw with one integer
// compare. p <= 0 passes every draw (threshold 0); p >= 1 and NaN pass none (2^16, above the
// largest draw), as u >= p is false for them. Bitwise the same decisions: test
// Philox.IntegerThresholdDecidesAsTheFloatTest.
struct DrawThreshold {
  std::uint32_t min_draw = 1u << 16;  // default: no draw passes, so a forgotten one shows
};

SEQBENCH_HD inline DrawThreshold draw_threshold(float p) {
  if (p <= 0.0f) return DrawThreshold{0};
  if (!(p < 1.0f)) return DrawThreshold{1u << 16};  // p >= 1 or NaN
  return DrawThreshold{static_cast<std::uint32_t>(ceilf(p * 65536.0f))};
}

SEQBENCH_HD inline bool draw_passes(std::uint32_t draw, DrawThreshold threshold) {
  return draw >= threshold.min_draw;
}

// The probability with which dropout(p) drops an element: ceil(p · 2^16) / 2^16 for p in [0, 1]
// (see "Dropout's draws" above). What a keep-rate check compares against.
inline double dropout_drop_probability(float p) {
  return static_cast<double>(draw_threshold(p).min_draw) / 65536.0;
}

// Dropout's keep decision, shared by the CPU reference and the kernels: keep when u >= p, so
// that p = 0 keeps everything and p = 1 drops everything.
SEQBENCH_HD inline bool philox_keep(std::uint64_t seed, std::uint64_t offset, std::uint64_t index,
                                    float drop_prob) {
  return dropout_uniform(seed, offset, index) >= drop_prob;
}

}  // namespace seqbench
