// The Transformer input embedding (Vaswani et al. 2017 §3.4 and §3.5) as LightSeq2 fuses it: token
// lookup, scaling, position embedding and dropout in one kernel.
//
//   e[b,l] = token_table[tokens[b,l]] · scale + pos[position(b,l)]     (tokens[b,l] != pad)
//   e[b,l] = 0                                                         (tokens[b,l] == pad)
//   y      = dropout(e)
//
// position(b, l) is position_offset plus one of two indexings:
//   slot            l, padded slots included (Hugging Face BERT/GPT-2 position_ids = arange(L));
//   nonpad_count    the number of non-padding tokens before slot l in row b (fairseq
//                   utils.make_positions, and LightSeq's get_tokens_position kernel).
// fairseq's make_positions is exactly nonpad_count with position_offset = padding_idx + 1, for
// left- and right-padded rows alike; LightSeq's training kernel is nonpad_count with offset 0, and
// its incremental decoding of step t adds t. For right-padded rows the two indexings agree.
//
// Padding: a token equal to padding_idx yields an all-zero row and sends no gradient to either
// table, so the padding row of the token table keeps a zero gradient (nn.Embedding(padding_idx)).
// fairseq gets the same zero output because that row is initialized to zero and never updated, and
// LightSeq writes zeros for padding tokens; here it is zero whatever the table holds.
#pragma once

#include <cstdint>

#include "reference/tensor.h"

namespace seqbench::ref {

enum class PositionEncoding {
  sinusoidal,  // fixed table from sinusoidal_positions(); no gradient
  learned,     // a trained [num_positions, H] table that receives a gradient
};

enum class PositionIndexing { slot, nonpad_count };

struct EmbeddingConfig {
  double scale = 1.0;             // sqrt(H) in the Transformer (fairseq embed_scale); 1 disables
  std::int32_t padding_idx = -1;  // negative: no padding token
  PositionEncoding positions = PositionEncoding::sinusoidal;
  PositionIndexing indexing = PositionIndexing::slot;
  Index position_offset = 0;  // >= 0
  double dropout_p = 0.0;
};

// The tensor2tensor / fairseq sinusoidal table (fairseq SinusoidalPositionalEmbedding.get_embedding,
// without its padding row): with half = H/2 (floor) and k < half,
//   table[pos, k]        = sin(pos · exp(-k · ln(10000) / (half - 1)))
//   table[pos, half + k] = cos(pos · exp(-k · ln(10000) / (half - 1)))
// i.e. all sines first, then all cosines (not interleaved as in Vaswani et al.'s formula). An odd
// H leaves the last column zero, as fairseq does. For half = 1 the single frequency is 1 (fairseq
// divides by zero there).
Matrix sinusoidal_positions(Index num_positions, Index hidden);

using PositionMatrix = Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// position(b, l) for every token, [B, L] (padding tokens included; their entry is unused).
PositionMatrix embedding_positions(const TokenMatrix& tokens, const EmbeddingConfig& config);

// tokens: [B, L], ids in [0, vocab) (padding_idx included); token_table: [vocab, H];
// position_table: [num_positions, H] for learned positions (every position of a non-padding token
// must be < num_positions), ignored for sinusoidal ones; keep: [B·L, H]. Returns [B·L, H], row
// b·L + l.
Matrix embedding_forward(const TokenMatrix& tokens, const Matrix& token_table, const Matrix& position_table,
                         const EmbeddingConfig& config, const KeepMask& keep);

struct EmbeddingGrads {
  Matrix d_token_table;     // [vocab, H]; the padding row stays zero
  Matrix d_position_table;  // [num_positions, H] for learned positions, empty (0x0) for sinusoidal
};

// Scatter-add of dropout_backward(dy) into the rows the forward read: scale · g to the token row,
// g to the position row. The tables are read for their shapes only.
EmbeddingGrads embedding_backward(const Matrix& dy, const TokenMatrix& tokens, const Matrix& token_table,
                                  const Matrix& position_table, const EmbeddingConfig& config,
                                  const KeepMask& keep);

}  // namespace seqbench::ref
