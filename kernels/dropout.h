// Dropout with a counter-based generator (Philox): fused forward and backward, the bit-packed
// keep mask, and the unfused PyTorch-eager-like baseline.
//
// Semantics (reference/dropout.h, exactly): element i of a tensor of n elements is kept when
// philox_keep(seed, offset, i, p) holds, i.e. when the 16-bit dropout draw #i of the Philox stream
// (seed, offset), as a uniform draw·2^-16, is >= p (core/philox.h: p is resolved to 2^-16, an
// element drops with probability dropout_drop_probability(p) = ceil(p·2^16)/2^16); kept elements
// are scaled by 1/(1-p) (computed in float), dropped ones are 0, and p = 1 gives zeros, never NaN. The flat
// C-order element index is the draw index, so the same (seed, offset) gives the same mask on the CPU
// reference, in every kernel here, for every dtype and for every pointer alignment.
//
// Saving the mask for backward. Three ways, with their memory per element:
//   unfused baseline   1 byte   uint8 mask tensor (what PyTorch eager keeps)
//   bit-packed         1/8 byte the forward writes 1 bit per element; backward reads it
//   regenerate         0 bytes  backward redraws the mask from (seed, offset); costs one Philox
//                               call per 8 elements in 16-bit (per 4 in fp32, which uses half a
//                               call's draws) in backward instead of a mask read
// kernels/NOTES-dropout-bias.md has the byte counts and the timing trade-off.
//
// Bit-packed layout: an array of little-endian uint32 words; bit j of word w is the keep bit of
// element 32·w + j (equivalently: bit i%8 of byte i/8). Bits past n in the last word are 0.
// dropout_mask_bytes(n) = 4·ceil(n/32) bytes; the buffer must be 4-byte aligned.
//
// Types: T ∈ {float, __half, __nv_bfloat16}; arithmetic in float, one rounding to T per output.
// Outputs must not overlap inputs (checked): the kernels read through __restrict__ pointers. The
// one exception is launch_dropout_bwd_regenerate's dx == dy (in place), which has its own instance.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace seqbench::kernels {

// One dropout application: the drop probability and the Philox stream that decides the mask.
struct DropoutConfig {
  float p = 0.0f;  // drop probability, 0 <= p <= 1
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;  // separates streams under one seed (one per layer and step)
};

// Bytes of the bit-packed keep mask of n elements: 4·ceil(n/32) (whole uint32 words).
constexpr std::size_t dropout_mask_bytes(std::size_t n) {
  return (n / 32 + (n % 32 != 0 ? 1 : 0)) * 4;
}

// ---------------------------------------------------------------------------------------------
// Fused.
//
// launch_dropout_fwd<T>(y, x, n, config, mask, mask_bytes, stream)
//   What: y[i] = keep(i) ? x[i] / (1-p) : 0 for i < n; when `mask` is not null, also writes the
//   bit-packed keep mask (all dropout_mask_bytes(n) bytes, padding bits 0). With mask = null
//   nothing but y is written and backward must regenerate (launch_dropout_bwd_regenerate).
//   Shapes: x, y: n elements, any alignment; mask: mask_bytes >= dropout_mask_bytes(n), 4-byte
//   aligned (ignored when null).
//   Thread mapping: one thread per vector of K = 16/sizeof(T) consecutive elements (4 fp32 or 8
//   fp16/bf16): one Packed<T> load and store when x and y are 16-byte aligned, else K scalar
//   accesses; the thread draws its K keep bits with one Philox call (one call = 8 draws of 16 bits
//   = 8 consecutive elements, of which an fp32 vector uses half). The 32/K lanes of a warp that cover one
//   32-element mask word OR their bits together with xor-shuffles, and the first of them stores the word. 256
//   threads a block, ceil(n/K/256) blocks. The tail vector (n % K elements) is written element by element.
//   Limits: 0 <= p <= 1 (NaN rejected); n may be 0 (nothing is launched); x, y non-null when n > 0.
//
// launch_dropout_bwd<T>(dx, dy, n, p, mask, mask_bytes, stream)
//   What: dx[i] = bit(mask, i) ? dy[i] / (1-p) : 0, with the mask a forward wrote. Same mapping:
//   each thread reads its K bits from the word its vector falls in (K divides 32).
//   Limits: as the forward; mask non-null, 4-byte aligned, mask_bytes >= dropout_mask_bytes(n).
//
// launch_dropout_bwd_regenerate<T>(dx, dy, n, config, stream)
//   What: dx[i] = keep(i) ? dy[i] / (1-p) : 0 with keep redrawn from config's (seed, offset):
//   the same kernel as the forward without a mask. 0 bytes of saved state.
//   In place: dx may be dy itself (dx == dy; a partial overlap is refused), bitwise the
//   out-of-place result. The attention backward uses it so that the dropped probabilities'
//   gradient and the probabilities' gradient share one [B·N·Lq, Lk] buffer.
template <class T>
void launch_dropout_fwd(T* y, const T* x, std::size_t n, const DropoutConfig& config, void* mask,
                        std::size_t mask_bytes, cudaStream_t stream);

template <class T>
void launch_dropout_bwd(T* dx, const T* dy, std::size_t n, float p, const void* mask, std::size_t mask_bytes,
                        cudaStream_t stream);

template <class T>
void launch_dropout_bwd_regenerate(T* dx, const T* dy, std::size_t n, const DropoutConfig& config,
                                   cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Unfused baseline, one op per kernel as PyTorch eager runs it (a bernoulli mask tensor, then a
// multiply). Backward is launch_dropout_apply_u8 again, on dy with the saved uint8 mask.
//
// launch_dropout_mask_u8(mask, n, config, stream)
//   What: mask[i] = keep(i) ? 1 : 0 (uint8), the same bits as the fused kernels.
//   Thread mapping: one thread per Philox call, i.e. per 8 consecutive elements, stored as two
//   32-bit words when the mask is 4-byte aligned and the 8 elements are in range, else bytewise.
//   Limits: 0 <= p <= 1; mask non-null when n > 0.
//
// launch_dropout_apply_u8<T>(y, x, mask, n, p, stream)
//   What: y[i] = mask[i] ? x[i] / (1-p) : 0.
//   Thread mapping: as launch_dropout_fwd (one vector of K elements a thread, Packed<T> when x and
//   y are 16-byte aligned and the mask K-byte aligned).
//   Limits: 0 <= p <= 1; pointers non-null when n > 0; y overlaps neither x nor mask.
void launch_dropout_mask_u8(std::uint8_t* mask, std::size_t n, const DropoutConfig& config,
                            cudaStream_t stream);

template <class T>
void launch_dropout_apply_u8(T* y, const T* x, const std::uint8_t* mask, std::size_t n, float p,
                             cudaStream_t stream);

}  // namespace seqbench::kernels
