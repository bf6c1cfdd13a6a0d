// The Transformer input embedding as LightSeq2 fuses it (issue #3): token lookup, scaling,
// position embedding and dropout in one kernel; its backward as the scatter-add of the dropout
// gradient into the token (and learned position) table, in two variants (float atomics as the
// paper does, and a deterministic sort + fixed-order segmented reduction); and the unfused
// PyTorch-eager-like baseline. Semantics: exactly reference/embedding.h (restated here, since
// kernels/ never include reference/):
//
//   e[b,l] = token_table[tok] · scale + pos[position(b,l)]   (tok = tokens[b,l] != padding_idx)
//   e[b,l] = 0                                               (tok == padding_idx)
//   y      = dropout(e), mask element (b·L + l)·H + h of the Philox stream (seed, offset)
//            (= make_dropout_mask(B·L, H, p, seed, offset), kernels/dropout.h)
//
// position(b,l) = position_offset + (slot: l | nonpad_count: non-padding tokens in row b before
// slot l). Sinusoidal positions are computed in the forward kernel (float, with a two-float
// angle: see launch_embedding_fwd), as ref::sinusoidal_positions defines them (all sines, then all cosines;
// odd H leaves the last column zero; half = 1 has the single frequency 1); learned positions read a
// [num_positions, H] table that gets a gradient. nonpad_count positions come from a pre-pass (the kernel of
// launch_embedding_positions: one block per row scans it, 1024 slots a step) into int32 [B·L] caller
// workspace (B·L·4 bytes, read B·L·4 + written B·L·4 extra traffic), wherever a position is used: the
// forward always, the backwards only for learned positions (sinusoidal ones get no gradient, so their
// backward never computes a position); slot indexing needs neither (position = offset + l).
//
// Padding gives an all-zero output row (whatever the table holds and whatever the mask) and sends
// no gradient. Token ids outside [0, vocab) cannot be checked on the host without a copy: the
// forward writes a row of quiet NaNs for such a token (so the loss turns NaN and the error cannot
// pass silently) and both backwards skip it (it has no table row); it still counts as a
// non-padding token for nonpad_count.
//
// Types: T ∈ {float, __half, __nv_bfloat16}; float arithmetic, one rounding to T per output
// (the atomic backward excepted: see there). Token ids are int32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/stream_fork.h"
#include "kernels/dropout.h"

namespace seqbench::kernels {

enum class PositionEncoding { sinusoidal, learned };
enum class PositionIndexing { slot, nonpad_count };

struct EmbeddingShape {
  std::int64_t batch = 0;          // B >= 0
  std::int64_t len = 0;            // L >= 0; B·L <= 2^31 - 1
  std::int64_t hidden = 0;         // H >= 1
  std::int64_t vocab = 0;          // >= 1, <= 2^31 - 2
  std::int64_t num_positions = 0;  // learned only: >= position_offset + L, <= 2^31 - 2
  std::int64_t tokens() const { return batch * len; }
};

struct EmbeddingConfig {
  float scale = 1.0f;             // finite; sqrt(H) in the Transformer
  std::int32_t padding_idx = -1;  // -1: no padding token; else in [0, vocab)
  PositionEncoding positions = PositionEncoding::sinusoidal;
  PositionIndexing indexing = PositionIndexing::slot;
  std::int64_t position_offset = 0;  // >= 0; sinusoidal: offset + L <= 2^24 (exact float positions;
                                     // the angle is formed in two floats, see launch_embedding_fwd)
  DropoutConfig dropout;
};

// Validates shape and config (everything but pointers); throws seqbench::Error naming the value
// and the limit. Every launcher below calls it first.
void require_embedding_args(const EmbeddingShape& shape, const EmbeddingConfig& config, const char* op);

// ---------------------------------------------------------------------------------------------
// Fused forward.
//
// launch_embedding_fwd<T>(y, tokens, token_table, position_table, shape, config, workspace,
//                         workspace_bytes, stream)
//   What: y [B·L, H] as above. position_table [num_positions, H] is read for learned positions
//   only (may be null for sinusoidal ones).
//   Thread mapping: flat over the B·L tokens, warp w of block x takes token 8x + w (grid
//   ceil(B·L/8) blocks of 8 warps; no idle warps whatever L), after one pre-pass launch that
//   writes what the lookup reads from the workspace: the nonpad_count positions (a block per row)
//   and, in other blocks of the same grid, the sinusoid table or frequencies below (two
//   independent few-µs jobs that overlap there, rather than two kernels back to back; learned
//   positions with slot indexing need no pre-pass). The warp walks its row in vectors of
//   K = 16/sizeof(T) columns, lane j taking vectors j, j+32, ...: one Packed<T> load of the token
//   row (and position row), one Philox call, one Packed<T> store when H % K == 0 and y and the
//   tables are 16-byte aligned, else K guarded scalar accesses (any H, tails included). A lane
//   issues the loads of up to 4 vectors (columns c, c + 32·K, c + 64·K, c + 96·K) before using
//   any. Sinusoids: the pre-pass computes the floor(H/2) frequencies in double into the workspace
//   as two floats (hi + lo); the value of (position, column) is a two-float angle
//   position·(hi + lo), a two-constant reduction by 2π and one sinf or cosf of the reduced
//   argument (|r| < 8, the fast path): absolute error
//   <= 16·u_f32 at any position < 2^24 (no sincosf pairing: a lane's columns are contiguous, sin
//   and cos of one frequency sit half a row apart). That is ~60 instructions a value, more than a
//   memory-bound element can afford (~85 with the dropout's Philox, against ~40 at the copy rate
//   of an H100 in 16-bit types), and every sentence of a batch repeats the same L·H values. So when
//   embedding_fwd_uses_sinusoid_table (B >= 2, H >= 2, L·H floats <= 8 MiB) the pre-pass
//   writes them once into a float [L, H] table in the workspace (positions position_offset ..
//   position_offset + L - 1; a thread per column computing its own frequency, so this path keeps
//   no frequency array; no divisions) and the lookup reads its rows like a learned table's
//   (K/4 16-byte float loads per vector: two for 16-bit T, one for fp32): the same floats, so the output is
//   bitwise that of the computed path, which runs otherwise (one sentence, or a table that would not stay in
//   L2). Minimal traffic: B·L·4 (tokens) + B·L·H·sizeof(T) gathered token rows (+ the same for learned
//   position rows) + B·L·H·sizeof(T) written.
//   (+ B·L·8 for the nonpad_count positions pre-pass; for sinusoids, either L·H·4 written once and
//   read by every sentence from L2 (the table), or floor(H/2)·8 written once and read by every
//   token from L1/L2 (the frequencies)).
//   Limits: require_embedding_args; y, tokens, token_table (and position_table when learned)
//   non-null and aligned to their element when B·L > 0; y overlaps no input; workspace of
//   embedding_fwd_workspace_bytes, 8-byte aligned, overlapping neither y nor tokens.
template <class T>
void launch_embedding_fwd(T* y, const std::int32_t* tokens, const T* token_table, const T* position_table,
                          const EmbeddingShape& shape, const EmbeddingConfig& config, void* workspace,
                          std::size_t workspace_bytes, cudaStream_t stream);

// The fused forward's workspace (8-byte aligned; null allowed when 0): the nonpad_count
// positions (B·L int32, rounded up to 256 bytes; none for slot indexing), then for sinusoidal
// positions either the sinusoid table (L·H floats, when embedding_fwd_uses_sinusoid_table) or
// the per-column frequencies as two floats (floor(H/2)·8 bytes). With a sinusoid table the lookup
// takes its vector path (16-byte loads and stores for every tensor) only when the workspace is
// 16-byte aligned; at 8 it takes the element path, the same bits. Host only.
std::size_t embedding_fwd_workspace_bytes(const EmbeddingShape& shape, const EmbeddingConfig& config);

// Whether the forward of this shape builds the per-launch sinusoid table: sinusoidal positions,
// H >= 2, B >= 2 and L·H·4 <= kEmbeddingSinusoidTableMaxBytes. Host only.
inline constexpr std::size_t kEmbeddingSinusoidTableMaxBytes = std::size_t{8} << 20;
bool embedding_fwd_uses_sinusoid_table(const EmbeddingShape& shape, const EmbeddingConfig& config);

// The largest embedding_fwd_workspace_bytes over every shape with B·L <= max_tokens and
// L <= max_len (batch and len of `dims` ignored; its hidden, vocab and num_positions used), for a
// caller that plans one workspace for all its batches. The size is not monotone in L (the table
// stops above its cap), so this is not the size at any one shape. Requires
// 1 <= max_len <= max_tokens. Host only.
std::size_t embedding_fwd_workspace_bytes_upto(std::int64_t max_tokens, std::int64_t max_len,
                                               EmbeddingShape dims, const EmbeddingConfig& config);

// The atomic backward's workspace: B·L·4 bytes (the nonpad_count positions) for learned positions with
// nonpad_count indexing, 0 otherwise (slot positions need no pre-pass, and sinusoidal positions
// receive no gradient); `forked` (a launch given a StreamFork) adds the token table's row bitmap,
// ceil(vocab/32)·4 bytes after the positions rounded up to 256. 0 when B·L == 0. Where it is 0 the
// workspace may be null. Host only.
std::size_t embedding_bwd_atomic_workspace_bytes(const EmbeddingShape& shape, const EmbeddingConfig& config,
                                                 bool forked = false);

// ---------------------------------------------------------------------------------------------
// Backward. Both variants OVERWRITE the whole gradient tables (the caller needs not zero them):
// d_token_table [vocab, H] (the padding row and rows of unused tokens become 0) and, for learned
// positions, d_position_table [num_positions, H]:
//   g = dy ⊙ keep / (1-p)        (the mask redrawn from config.dropout: nothing saved)
//   d_token_table[tok]  += scale · g[b·L + l]      d_position_table[position] += g[b·L + l]
// over the non-padding tokens with ids in [0, vocab).
//
// launch_embedding_bwd_atomic<T>(d_token_table, d_position_table, dy, tokens, shape, config,
//                                workspace, workspace_bytes, stream, fork = nullptr)
//   (workspace: embedding_bwd_atomic_workspace_bytes(shape, config, fork != nullptr))
//   As LightSeq2: cudaMemsetAsync of both tables, then the forward's mapping (a warp per token,
//   up to 4 dy vectors a lane loaded before the first atomic) atomically adds scale·g into the token row and
//   g into the position row, in T: a whole aligned 16-byte vector with one vector reduction a lane on sm_90
//   (red.global.add.v4.f32 / .noftz.v4.f16x2 / .noftz.v4.bf16x2, kernels/vector_atomic.cuh; float, or
//   __half2 / __nv_bfloat162 pair atomics below sm_90), else scalar atomics. NOT bitwise deterministic:
//   the order of the adds to one row depends on scheduling; and
//   for fp16/bf16 every add rounds to T (as PyTorch's index_add_ in that dtype), so a row used m times
//   carries up to (m-1)·u_T relative summation error. Traffic: tables zeroed (vocab·H +
//   num_positions·H)·sizeof(T) written, B·L·4 + B·L·H·sizeof(T) read, B·L·H (x2 learned) read-modify-writes
//   in L2.
//   With a `fork` (core/stream_fork.h; the layer and the operator suite pass one) the token table
//   is not memset: a kernel marks the rows that get a gradient in a bitmap in the workspace (a
//   thread per token, one integer OR a warp a word), then the side stream zeroes the other rows
//   (at most one block an SM, evict-first 16-byte stores on the vector path) while the launch's
//   stream zeroes the marked rows (plain stores, so that they are in L2 for the adds) and runs the
//   adds; the launch's stream waits on fork->joined before the launcher returns, or throws. The
//   position table (small) is still memset. The same arithmetic; each token row is zeroed once
//   (no fill followed by read-modify-writes of rows the fill evicted from L2).
//
// launch_embedding_bwd_sorted<T>(d_token_table, d_position_table, dy, tokens, shape, config,
//                                workspace, workspace_bytes, stream, fork = nullptr)
//   Deterministic, no float atomics (the scheme of PyTorch's embedding_backward_cuda_kernel, with
//   chunks fixed by the sorted order):
//   (1) cudaMemsetAsync clears a bitmap of each table's rows (vocab/8 and num_positions/8 bytes),
//       not the tables: every table row is written exactly once below, by its segment or with zeros;
//   (2) a key kernel (a thread per token) writes the pairs (token id, b·L + l), padding and
//       invalid tokens keyed past the table (a sentinel) so they sort last and are ignored, and
//       sets the bit of each row that gets a gradient (an integer atomicOr: the same bitmap in any order);
//       cub::DeviceRadixSort::SortPairs sorts them (stable: equal keys keep increasing b·L + l;
//       the pairs are distinct, so the result does not depend on the algorithm);
//   (3) the sorted array is cut into windows of kEmbeddingSortChunk = 32 entries; one warp per
//       window (grid x: windows/8 blocks of 8 warps; grid y: column tiles of 32·K columns, lane j
//       holding columns 32·K·tile + j·K .. +K-1) loads the window's keys and values with one
//       coalesced access, then sums each piece (the entries of one key inside the window) in
//       entry order in float, loading 4 dy vectors before adding them. A piece that is a whole
//       segment (the common case: a token used a few times) is scaled, rounded once to T and
//       written to its row; a piece of a segment that crosses a window boundary is written as a
//       float partial row (at most 2 per window: slot 2k for the piece that starts window k,
//       2k + 1 for the one that leaves it). The same launch's later blocks (after the reducing
//       ones, in a 1D grid) write zeros to the rows whose bit is clear, a warp per row, 4 rows a
//       warp (16-byte stores on the vector path);
//   (4) a merge kernel (same grid) adds each crossing segment's partials in window order, scales
//       and rounds once. A token used m times is summed by ceil(m/32) + 1 warps in parallel
//       instead of serially; float summation depth <= min(m, 32) + ceil(m/32).
//   Both orders depend on the tokens and the constant 32 only: bitwise reproducible on any GPU.
//   With a `fork` (core/stream_fork.h; the layer and the operator suite pass one), the token
//   table's zero rows are written by a kernel of their own on fork->side once (2)'s key kernel has
//   marked the bitmap (at most one block an SM, 8 warps, a warp per row; 16-byte stores on the
//   vector path), beside (2)'s sort, (3)-(4) and the position table's work, whose latency it hides;
//   (3) then launches no zero blocks for the token table, and the launch's stream waits on
//   fork->joined before the launcher returns, or throws. The same bits as without a fork (the
//   branches write disjoint rows). The fork is checked with require_stream_fork before any CUDA call.
//   Learned positions: with nonpad_count indexing the positions pre-pass (into the workspace),
//   a second key kernel output and sort; with slot
//   indexing no sort at all: position offset + l receives the entries b·L + l in increasing b,
//   so one elementwise kernel writes that order directly (keys offset + l, padding entries
//   marked skip; rows offset .. offset + L - 1 marked) and (3)-(4) run on it.
//   Traffic: each table written once, (vocab + num_positions)·H·sizeof(T): D·H·sizeof(T) for the
//   D distinct rows with a gradient, zeros for the others; B·L·4 tokens read; dy read once per
//   table: B·L·H·sizeof(T) (x2 with learned positions: the two reductions are separate passes);
//   per table a few B·L·4-byte arrays (keys/values, the sort's passes) and the bitmap (rows/8,
//   cleared, set, read); float partials written and read back only for
//   segments crossing a window boundary: at most 2·ceil(B·L/32)·H·4 bytes (~B·L·H/4), in
//   practice about H·4 bytes per frequent token per 32 uses.
//   Workspace: embedding_bwd_sorted_workspace_bytes(shape, config) bytes, 256-byte aligned:
//   the key/value arrays, the partials (2·ceil(B·L/32)·H floats), the row bitmaps and CUB's storage. That
//   function asks CUB for its temporary storage, which needs the CUDA device the launch runs on
//   (it throws without one); embedding_sort_layout() is the host-only part of the arithmetic.
//
// Limits (both): require_embedding_args; d_token_table non-null; d_position_table non-null for
// learned positions; dy and tokens non-null when B·L > 0; no output overlaps an input, the other
// output or the workspace.
template <class T>
void launch_embedding_bwd_atomic(T* d_token_table, T* d_position_table, const T* dy,
                                 const std::int32_t* tokens, const EmbeddingShape& shape,
                                 const EmbeddingConfig& config, void* workspace, std::size_t workspace_bytes,
                                 cudaStream_t stream, const StreamFork* fork = nullptr);

// Entries per window of the sorted backward's chunked reduction (fixed: it defines the order).
inline constexpr int kEmbeddingSortChunk = 32;

// Byte offsets inside the sorted backward's workspace: four int32 arrays of `tokens` elements
// (keys and values, in and out) per table (slot-indexed learned positions use only the "out"
// pair) and, when learned, one more for the nonpad_count positions, the float partial rows
// [2·ceil(tokens/32), hidden], the row bitmaps (ceil(vocab/32) uint32 words, then, when learned,
// ceil(num_positions/32), back to back: one memset clears both), then the CUB temporary storage;
// every part but the position bitmap starts at a multiple of 256 bytes.
struct EmbeddingSortLayout {
  std::size_t token_keys_in = 0, token_values_in = 0, token_keys_out = 0, token_values_out = 0;
  std::size_t position_keys_in = 0, position_values_in = 0, position_keys_out = 0, position_values_out = 0;
  std::size_t positions = 0;  // learned: the nonpad_count positions pre-pass (B·L int32)
  std::size_t partial = 0, partial_bytes = 0;
  std::size_t token_touched = 0, position_touched = 0, touched_bytes = 0;  // both bitmaps
  std::size_t sort_temp = 0, sort_temp_bytes = 0;
  std::size_t total = 0;
};

// Host only: the layout for B·L = tokens pairs of rows of `hidden` columns, a token table of
// `vocab` rows, position arrays and a position bitmap of `num_positions` rows when `learned`
// (num_positions 0 otherwise), and `sort_temp_bytes` of CUB temporary storage.
EmbeddingSortLayout embedding_sort_layout(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab,
                                          bool learned, std::int64_t num_positions,
                                          std::size_t sort_temp_bytes);

// The number of key bits the sort looks at for keys in [0, sentinel]: bit_width(sentinel).
int embedding_sort_key_bits(std::int64_t sentinel);

std::size_t embedding_bwd_sorted_workspace_bytes(const EmbeddingShape& shape, const EmbeddingConfig& config);

template <class T>
void launch_embedding_bwd_sorted(T* d_token_table, T* d_position_table, const T* dy,
                                 const std::int32_t* tokens, const EmbeddingShape& shape,
                                 const EmbeddingConfig& config, void* workspace, std::size_t workspace_bytes,
                                 cudaStream_t stream, const StreamFork* fork = nullptr);

// ---------------------------------------------------------------------------------------------
// Unfused baseline, one op per kernel as PyTorch eager runs fairseq's TransformerEncoder
// embedding: positions = make_positions (a cumsum over the non-padding mask; here
// launch_embedding_positions), x = embed_tokens(tokens) (launch_gather_rows), x = scale · x
// (launch_scale), p = embed_positions(positions) (launch_gather_rows on the learned table, or on
// a precomputed sinusoidal table [offset + L, H] for sinusoidal positions), x = x + p
// (launch_residual_add, kernels/bias_dropout_residual.h), x = x.masked_fill(padding, 0)
// (launch_zero_padding_rows), y = dropout(x) (launch_dropout_mask_u8 + launch_dropout_apply_u8,
// keeping the uint8 mask). Backward: g = launch_dropout_apply_u8(dy, mask), the scale's backward
// launch_scale(g, scale), then the embedding backward as index_add_: cudaMemsetAsync of the
// table and launch_scatter_add_rows (float/T atomics; PyTorch's embedding_dense_backward sorts
// instead, this is the eager op sequence of LightSeq2's baseline); likewise g into the learned
// position table. Each baseline kernel is as good as the eager op's: the row ops take a warp per
// row (no per-element 64-bit divides) and move 16-byte vectors when H % K == 0 and the tensors are
// 16-byte aligned; scale is a vectorized elementwise loop; scatter_add_rows does one T atomic per
// element (as index_add_).
//
// launch_embedding_positions(positions, tokens, shape, config, stream)
//   positions[b·L + l] = position(b, l) for every token, padding included (int32).
// launch_gather_rows<T>(y, table, table_rows, index, n, hidden, stream)
//   y[i, :] = table[index[i], :] for i < n; an index outside [0, table_rows) gives a NaN row.
// launch_scale<T>(y, x, count, scale, stream): y = scale · x (count elements).
// launch_zero_padding_rows<T>(y, x, tokens, n, hidden, padding_idx, stream)
//   y[i, :] = tokens[i] == padding_idx ? 0 : x[i, :] (padding_idx -1: a copy).
// launch_scatter_add_rows<T>(grad, grad_rows, src, index, tokens, padding_idx, n, hidden, stream)
//   grad[index[i], :] += src[i, :] (atomics in T) for every i < n with tokens[i] != padding_idx
//   and index[i] in [0, grad_rows); the caller zeroes grad first.
void launch_embedding_positions(std::int32_t* positions, const std::int32_t* tokens,
                                const EmbeddingShape& shape, const EmbeddingConfig& config,
                                cudaStream_t stream);

template <class T>
void launch_gather_rows(T* y, const T* table, std::int64_t table_rows, const std::int32_t* index,
                        std::int64_t n, std::int64_t hidden, cudaStream_t stream);

template <class T>
void launch_scale(T* y, const T* x, std::size_t count, float scale, cudaStream_t stream);

template <class T>
void launch_zero_padding_rows(T* y, const T* x, const std::int32_t* tokens, std::int64_t n,
                              std::int64_t hidden, std::int32_t padding_idx, cudaStream_t stream);

template <class T>
void launch_scatter_add_rows(T* grad, std::int64_t grad_rows, const T* src, const std::int32_t* index,
                             const std::int32_t* tokens, std::int32_t padding_idx, std::int64_t n,
                             std::int64_t hidden, cudaStream_t stream);

}  // namespace seqbench::kernels
