#include "reference/embedding.h"

#include <cmath>

#include "core/error.h"
#include "reference/dropout.h"

namespace seqbench::ref {

namespace {
bool is_padding(std::int32_t token, const EmbeddingConfig& config) {
  return config.padding_idx >= 0 && token == config.padding_idx;
}

// Validates every argument the forward and the backward share and returns the token positions.
PositionMatrix require_args(const TokenMatrix& tokens, const Matrix& token_table,
                            const Matrix& position_table, const EmbeddingConfig& config, const char* what) {
  SEQBENCH_REQUIRE(config.position_offset >= 0,
                   what << ": position_offset " << config.position_offset << " must be >= 0");
  const Index vocab = token_table.rows();
  PositionMatrix positions = embedding_positions(tokens, config);
  const bool learned = config.positions == PositionEncoding::learned;
  if (learned) {
    SEQBENCH_REQUIRE(position_table.cols() == token_table.cols(),
                     what << ": position table has hidden " << position_table.cols() << ", token table "
                          << token_table.cols());
  }
  for (Index b = 0; b < tokens.rows(); ++b) {
    for (Index l = 0; l < tokens.cols(); ++l) {
      const std::int32_t token = tokens(b, l);
      SEQBENCH_REQUIRE(token >= 0 && token < vocab, what << ": token " << token << " at [" << b << ", " << l
                                                         << "] outside [0, vocab " << vocab << ")");
      SEQBENCH_REQUIRE(!learned || is_padding(token, config) || positions(b, l) < position_table.rows(),
                       what << ": position " << positions(b, l) << " of token [" << b << ", " << l
                            << "] >= num_positions " << position_table.rows());
    }
  }
  return positions;
}
}  // namespace

Matrix sinusoidal_positions(Index num_positions, Index hidden) {
  SEQBENCH_REQUIRE(num_positions >= 0 && hidden >= 1,
                   "sinusoidal_positions: " << num_positions << " positions x hidden " << hidden
                                            << " (need positions >= 0, hidden >= 1)");
  const Index half = hidden / 2;
  const double log_step = half > 1 ? std::log(10000.0) / static_cast<double>(half - 1) : 0.0;
  Matrix table = Matrix::Zero(num_positions, hidden);
  for (Index pos = 0; pos < num_positions; ++pos) {
    for (Index k = 0; k < half; ++k) {
      const double angle = static_cast<double>(pos) * std::exp(-static_cast<double>(k) * log_step);
      table(pos, k) = std::sin(angle);
      table(pos, half + k) = std::cos(angle);
    }
  }
  return table;
}

PositionMatrix embedding_positions(const TokenMatrix& tokens, const EmbeddingConfig& config) {
  PositionMatrix positions(tokens.rows(), tokens.cols());
  for (Index b = 0; b < tokens.rows(); ++b) {
    Index nonpad_before = 0;
    for (Index l = 0; l < tokens.cols(); ++l) {
      const Index index = config.indexing == PositionIndexing::slot ? l : nonpad_before;
      positions(b, l) = index + config.position_offset;
      if (!is_padding(tokens(b, l), config)) ++nonpad_before;
    }
  }
  return positions;
}

Matrix embedding_forward(const TokenMatrix& tokens, const Matrix& token_table, const Matrix& position_table,
                         const EmbeddingConfig& config, const KeepMask& keep) {
  const PositionMatrix positions =
      require_args(tokens, token_table, position_table, config, "embedding_forward");
  const Index len = tokens.cols();
  const Index hidden = token_table.cols();
  const Matrix sinusoids = config.positions == PositionEncoding::sinusoidal
                               ? sinusoidal_positions(len + config.position_offset, hidden)
                               : Matrix();
  const Matrix& position_rows = config.positions == PositionEncoding::sinusoidal ? sinusoids : position_table;
  Matrix e = Matrix::Zero(tokens.rows() * len, hidden);
  for (Index b = 0; b < tokens.rows(); ++b) {
    for (Index l = 0; l < len; ++l) {
      const std::int32_t token = tokens(b, l);
      if (is_padding(token, config)) continue;
      e.row(b * len + l) = token_table.row(token) * config.scale + position_rows.row(positions(b, l));
    }
  }
  return dropout_forward(e, keep, config.dropout_p);
}

EmbeddingGrads embedding_backward(const Matrix& dy, const TokenMatrix& tokens, const Matrix& token_table,
                                  const Matrix& position_table, const EmbeddingConfig& config,
                                  const KeepMask& keep) {
  const PositionMatrix positions =
      require_args(tokens, token_table, position_table, config, "embedding_backward");
  const Index len = tokens.cols();
  SEQBENCH_REQUIRE(dy.rows() == tokens.rows() * len && dy.cols() == token_table.cols(),
                   "embedding_backward: dy is " << dy.rows() << "x" << dy.cols() << ", expected "
                                                << tokens.rows() * len << "x" << token_table.cols());
  const Matrix de = dropout_backward(dy, keep, config.dropout_p);
  const bool learned = config.positions == PositionEncoding::learned;
  EmbeddingGrads grads;
  grads.d_token_table = Matrix::Zero(token_table.rows(), token_table.cols());
  grads.d_position_table = learned ? Matrix::Zero(position_table.rows(), position_table.cols()) : Matrix();
  for (Index b = 0; b < tokens.rows(); ++b) {
    for (Index l = 0; l < len; ++l) {
      const std::int32_t token = tokens(b, l);
      if (is_padding(token, config)) continue;
      grads.d_token_table.row(token) += config.scale * de.row(b * len + l);
      if (learned) grads.d_position_table.row(positions(b, l)) += de.row(b * len + l);
    }
  }
  return grads;
}

}  // namespace seqbench::ref
