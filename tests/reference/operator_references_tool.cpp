// operator_references_tool: reference/'s operator functions (double) on cases read as JSON on
// stdin, their outputs written as JSON on stdout, so that
// tests/reference/operator_references_torch_test.py can hold them against PyTorch in float64: the
// references are documented as PyTorch's semantics, and every kernel test trusts them.
//
//   in:  {"cases": [{"op": "layernorm", "x": [[..]], "gamma": [..], "beta": [..], "eps": .., "dy": [[..]]}
//                   {"op": "softmax", "x": [[..]], "batch": .., "heads": .., "q_len": .., "k_len": ..,
//                    "scale": .., "causal": .., "causal_offset": .., "key_lengths": [..], "dy": [[..]]}
//                   {"op": "cross_entropy", "logits": [[..]], "targets": [..], "smoothing": ..,
//                    "convention": "paper" | "fairseq", "ignore_index": null | int, "grad_loss": [..]}
//                   {"op": "attention", "q": [[..]], "k": [[..]], "v": [[..]], the softmax's shape, "scale",
//                    mask fields, "dout": [[..]]}
//                   {"op": "bias_act", "x": [[..]], "bias": [..], "activation": "relu" | "gelu_erf" |
//                    "gelu_tanh", "dy": [[..]]}]}
//   out: {"cases": [{output name: matrix, vector or number, ...}]}
// Doubles are written with 17 significant digits (nlohmann's round trip). Exit 1 with a one-line
// error on input it cannot read.
#include <cstdint>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "reference/bias_act_dropout.h"
#include "reference/cross_entropy.h"
#include "reference/layernorm.h"
#include "reference/softmax.h"

namespace {

using nlohmann::json;
using seqbench::ref::Matrix;
using seqbench::ref::Vector;

Matrix to_matrix(const json& rows) {
  const auto r = static_cast<Eigen::Index>(rows.size());
  const auto c = static_cast<Eigen::Index>(r ? rows.at(0).size() : 0);
  Matrix m(r, c);
  for (Eigen::Index i = 0; i < r; ++i) {
    if (static_cast<Eigen::Index>(rows.at(i).size()) != c) throw std::runtime_error("ragged matrix");
    for (Eigen::Index j = 0; j < c; ++j) m(i, j) = rows.at(i).at(j).get<double>();
  }
  return m;
}

Vector to_vector(const json& values) {
  Vector v(static_cast<Eigen::Index>(values.size()));
  for (Eigen::Index i = 0; i < v.size(); ++i) v(i) = values.at(i).get<double>();
  return v;
}

json of(const Matrix& m) {
  json rows = json::array();
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    std::vector<double> row(m.cols());
    for (Eigen::Index j = 0; j < m.cols(); ++j) row[j] = m(i, j);
    rows.push_back(row);
  }
  return rows;
}

json of(const Vector& v) {
  return std::vector<double>(v.data(), v.data() + v.size());
}

json layernorm(const json& c) {
  const Matrix x = to_matrix(c.at("x"));
  const Vector gamma = to_vector(c.at("gamma")), beta = to_vector(c.at("beta"));
  const auto fwd = seqbench::ref::layernorm_forward(x, gamma, beta, c.at("eps").get<double>());
  const auto bwd = seqbench::ref::layernorm_backward(to_matrix(c.at("dy")), x, gamma, fwd.mean, fwd.rstd);
  return {{"y", of(fwd.y)},   {"mean", of(fwd.mean)},     {"rstd", of(fwd.rstd)},
          {"dx", of(bwd.dx)}, {"dgamma", of(bwd.dgamma)}, {"dbeta", of(bwd.dbeta)}};
}

seqbench::ref::AttentionShape attention_shape(const json& c) {
  seqbench::ref::AttentionShape shape;
  shape.batch = c.at("batch").get<Eigen::Index>();
  shape.heads = c.at("heads").get<Eigen::Index>();
  shape.q_len = c.at("q_len").get<Eigen::Index>();
  shape.k_len = c.at("k_len").get<Eigen::Index>();
  return shape;
}

seqbench::ref::AttentionMask attention_mask(const json& c, const seqbench::ref::AttentionShape& shape) {
  seqbench::ref::AttentionMask mask;
  mask.causal = c.at("causal").get<bool>();
  mask.causal_offset = c.at("causal_offset").get<Eigen::Index>();
  for (const json& l : c.at("key_lengths")) mask.key_lengths.push_back(l.get<Eigen::Index>());
  seqbench::ref::validate_attention_mask(mask, shape);
  return mask;
}

json attention(const json& c) {
  const seqbench::ref::AttentionShape shape = attention_shape(c);
  seqbench::ref::AttentionConfig config;
  config.scale = c.at("scale").get<double>();
  config.mask = attention_mask(c, shape);
  const Matrix q = to_matrix(c.at("q")), k = to_matrix(c.at("k")), v = to_matrix(c.at("v"));
  const auto fwd = seqbench::ref::attention_forward(q, k, v, shape, config);
  const auto bwd =
      seqbench::ref::attention_backward(to_matrix(c.at("dout")), q, k, v, shape, config, fwd.probs);
  return {{"out", of(fwd.out)},
          {"probs", of(fwd.probs)},
          {"dq", of(bwd.dq)},
          {"dk", of(bwd.dk)},
          {"dv", of(bwd.dv)}};
}

json softmax(const json& c) {
  const seqbench::ref::AttentionShape shape = attention_shape(c);
  const seqbench::ref::AttentionMask mask = attention_mask(c, shape);
  const double scale = c.at("scale").get<double>();
  const Matrix y = seqbench::ref::attention_softmax_forward(to_matrix(c.at("x")), shape, scale, mask);
  return {{"y", of(y)},
          {"dx", of(seqbench::ref::attention_softmax_backward(to_matrix(c.at("dy")), y, scale))}};
}

json cross_entropy(const json& c) {
  const Matrix logits = to_matrix(c.at("logits"));
  const std::vector<std::int32_t> t = c.at("targets").get<std::vector<std::int32_t>>();
  const seqbench::ref::TargetVector targets =
      Eigen::Map<const seqbench::ref::TargetVector>(t.data(), static_cast<Eigen::Index>(t.size()));
  seqbench::ref::CrossEntropyConfig config;
  config.smoothing = c.at("smoothing").get<double>();
  const std::string convention = c.at("convention").get<std::string>();
  if (convention != "paper" && convention != "fairseq")
    throw std::runtime_error("unknown convention " + convention);
  config.convention = convention == "paper" ? seqbench::ref::SmoothingConvention::paper
                                            : seqbench::ref::SmoothingConvention::fairseq;
  if (!c.at("ignore_index").is_null()) config.ignore_index = c.at("ignore_index").get<std::int32_t>();
  const auto fwd = seqbench::ref::cross_entropy_forward(logits, targets, config);
  const Matrix dlogits =
      seqbench::ref::cross_entropy_backward(logits, targets, config, to_vector(c.at("grad_loss")));
  return {{"loss", of(fwd.loss)},
          {"nll", of(fwd.nll)},
          {"loss_sum", fwd.loss_sum},
          {"nll_sum", fwd.nll_sum},
          {"dlogits", of(dlogits)}};
}

json bias_act(const json& c) {
  const std::string name = c.at("activation").get<std::string>();
  seqbench::ref::Activation act;
  if (name == "relu") {
    act = seqbench::ref::Activation::relu;
  } else if (name == "gelu_erf") {
    act = seqbench::ref::Activation::gelu_erf;
  } else if (name == "gelu_tanh") {
    act = seqbench::ref::Activation::gelu_tanh;
  } else {
    throw std::runtime_error("unknown activation " + name);
  }
  const Matrix x = to_matrix(c.at("x"));
  const Vector bias = to_vector(c.at("bias"));
  const seqbench::ref::KeepMask keep = seqbench::ref::KeepMask::Ones(x.rows(), x.cols());  // p = 0
  const Matrix y = seqbench::ref::bias_act_dropout_forward(x, bias, keep, 0.0, act);
  const auto bwd = seqbench::ref::bias_act_dropout_backward(to_matrix(c.at("dy")), x, bias, keep, 0.0, act);
  return {{"y", of(y)}, {"dx", of(bwd.dx)}, {"dbias", of(bwd.dbias)}};
}

}  // namespace

int main() {
  try {
    const json in = json::parse(std::cin);
    json out = {{"cases", json::array()}};
    for (const json& c : in.at("cases")) {
      const std::string op = c.at("op").get<std::string>();
      if (op == "layernorm") {
        out["cases"].push_back(layernorm(c));
      } else if (op == "softmax") {
        out["cases"].push_back(softmax(c));
      } else if (op == "cross_entropy") {
        out["cases"].push_back(cross_entropy(c));
      } else if (op == "attention") {
        out["cases"].push_back(attention(c));
      } else if (op == "bias_act") {
        out["cases"].push_back(bias_act(c));
      } else {
        throw std::runtime_error("unknown op '" + op + "'");
      }
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "operator_references_tool: error: " << e.what() << "\n";
    return 1;
  }
}
