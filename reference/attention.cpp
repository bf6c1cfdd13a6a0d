#include "reference/attention.h"

#include <cmath>

#include "core/error.h"
#include "reference/dropout.h"

namespace seqbench::ref {

namespace {
void require_qkv(const Matrix& q, const Matrix& k, const Matrix& v, const AttentionShape& shape,
                 const char* what) {
  const Index bh = shape.batch * shape.heads;
  SEQBENCH_REQUIRE(q.rows() == bh * shape.q_len, what << ": q has " << q.rows()
                                                      << " rows, expected batch*heads*q_len "
                                                      << bh * shape.q_len);
  SEQBENCH_REQUIRE(k.rows() == bh * shape.k_len && v.rows() == bh * shape.k_len,
                   what << ": k/v have " << k.rows() << "/" << v.rows()
                        << " rows, expected batch*heads*k_len " << bh * shape.k_len);
  SEQBENCH_REQUIRE(k.cols() == q.cols(), what << ": k has head dim " << k.cols() << ", q has " << q.cols());
}

// Dropout on P when a mask is given; the identity otherwise (and then p must be 0, or the caller
// forgot the mask).
Matrix drop_probs(const Matrix& probs, double p, const KeepMask* keep, const char* what) {
  if (keep != nullptr) return dropout_forward(probs, *keep, p);
  SEQBENCH_REQUIRE(p == 0.0, what << ": dropout_p " << p << " needs a probability keep mask");
  return probs;
}

Matrix drop_probs_backward(const Matrix& dprobs, double p, const KeepMask* keep) {
  return keep != nullptr ? dropout_backward(dprobs, *keep, p) : dprobs;
}
}  // namespace

AttentionForward attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                                   const AttentionShape& shape, const AttentionConfig& config,
                                   const KeepMask* prob_keep) {
  require_qkv(q, k, v, shape, "attention_forward");
  const Index lq = shape.q_len;
  const Index lk = shape.k_len;
  Matrix scores(shape.rows(), lk);
  for (Index bh = 0; bh < shape.batch * shape.heads; ++bh) {
    scores.middleRows(bh * lq, lq) = q.middleRows(bh * lq, lq) * k.middleRows(bh * lk, lk).transpose();
  }
  AttentionForward out;
  out.probs = attention_softmax_forward(scores, shape, config.scale, config.mask);
  const Matrix dropped = drop_probs(out.probs, config.dropout_p, prob_keep, "attention_forward");
  out.out.resize(shape.rows(), v.cols());
  for (Index bh = 0; bh < shape.batch * shape.heads; ++bh) {
    out.out.middleRows(bh * lq, lq) = dropped.middleRows(bh * lq, lq) * v.middleRows(bh * lk, lk);
  }
  return out;
}

AttentionGrads attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                                  const AttentionShape& shape, const AttentionConfig& config,
                                  const Matrix& probs, const KeepMask* prob_keep) {
  require_qkv(q, k, v, shape, "attention_backward");
  SEQBENCH_REQUIRE(dout.rows() == q.rows() && dout.cols() == v.cols(),
                   "attention_backward: dout is " << dout.rows() << "x" << dout.cols() << ", expected "
                                                  << q.rows() << "x" << v.cols());
  SEQBENCH_REQUIRE(probs.rows() == shape.rows() && probs.cols() == shape.k_len,
                   "attention_backward: probs are " << probs.rows() << "x" << probs.cols() << ", expected "
                                                    << shape.rows() << "x" << shape.k_len);
  const Index lq = shape.q_len;
  const Index lk = shape.k_len;
  const Matrix dropped = drop_probs(probs, config.dropout_p, prob_keep, "attention_backward");
  AttentionGrads grads;
  grads.dv.resize(v.rows(), v.cols());
  Matrix ddropped(shape.rows(), lk);
  for (Index bh = 0; bh < shape.batch * shape.heads; ++bh) {
    const auto dout_bh = dout.middleRows(bh * lq, lq);
    grads.dv.middleRows(bh * lk, lk) = dropped.middleRows(bh * lq, lq).transpose() * dout_bh;
    ddropped.middleRows(bh * lq, lq) = dout_bh * v.middleRows(bh * lk, lk).transpose();
  }
  const Matrix dscores = attention_softmax_backward(
      drop_probs_backward(ddropped, config.dropout_p, prob_keep), probs, config.scale);
  grads.dq.resize(q.rows(), q.cols());
  grads.dk.resize(k.rows(), k.cols());
  for (Index bh = 0; bh < shape.batch * shape.heads; ++bh) {
    const auto ds_bh = dscores.middleRows(bh * lq, lq);
    grads.dq.middleRows(bh * lq, lq) = ds_bh * k.middleRows(bh * lk, lk);
    grads.dk.middleRows(bh * lk, lk) = ds_bh.transpose() * q.middleRows(bh * lq, lq);
  }
  return grads;
}

Matrix split_heads(const Matrix& x, Index batch, Index len, Index heads) {
  SEQBENCH_REQUIRE(heads > 0 && x.cols() % heads == 0,
                   "split_heads: hidden " << x.cols() << " is not a multiple of heads " << heads);
  SEQBENCH_REQUIRE(x.rows() == batch * len,
                   "split_heads: " << x.rows() << " rows, expected batch*len " << batch * len);
  const Index d = x.cols() / heads;
  Matrix out(batch * heads * len, d);
  for (Index b = 0; b < batch; ++b) {
    for (Index h = 0; h < heads; ++h) {
      out.middleRows((b * heads + h) * len, len) = x.block(b * len, h * d, len, d);
    }
  }
  return out;
}

Matrix merge_heads(const Matrix& x, Index batch, Index len, Index heads) {
  SEQBENCH_REQUIRE(heads > 0 && x.rows() == batch * heads * len,
                   "merge_heads: " << x.rows() << " rows, expected batch*heads*len " << batch * heads * len);
  const Index d = x.cols();
  Matrix out(batch * len, heads * d);
  for (Index b = 0; b < batch; ++b) {
    for (Index h = 0; h < heads; ++h) {
      out.block(b * len, h * d, len, d) = x.middleRows((b * heads + h) * len, len);
    }
  }
  return out;
}

namespace {
struct MhaDims {
  AttentionShape attn;
  AttentionConfig config;
};

MhaDims mha_dims(const Matrix& query, const Matrix& key_value, const MhaParams& params, const MhaShape& shape,
                 const MhaConfig& config, const char* what) {
  const Index hidden = query.cols();
  SEQBENCH_REQUIRE(shape.heads > 0 && hidden % shape.heads == 0,
                   what << ": hidden " << hidden << " is not a multiple of heads " << shape.heads);
  SEQBENCH_REQUIRE(key_value.cols() == hidden,
                   what << ": key_value has hidden " << key_value.cols() << ", query has " << hidden);
  for (const Linear* proj : {&params.q_proj, &params.k_proj, &params.v_proj, &params.out_proj}) {
    SEQBENCH_REQUIRE(proj->weight.rows() == hidden && proj->weight.cols() == hidden,
                     what << ": projection weight is " << proj->weight.rows() << "x" << proj->weight.cols()
                          << ", expected hidden x hidden " << hidden << "x" << hidden);
  }
  MhaDims dims;
  dims.attn = {shape.batch, shape.heads, shape.q_len, shape.k_len};
  const Index head_dim = hidden / shape.heads;  // exact: heads divides hidden (checked above)
  dims.config.scale = config.scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  dims.config.mask = config.mask;
  dims.config.dropout_p = config.dropout_p;
  return dims;
}
}  // namespace

MhaForward mha_forward(const Matrix& query, const Matrix& key_value, const MhaParams& params,
                       const MhaShape& shape, const MhaConfig& config, const KeepMask* prob_keep) {
  const MhaDims dims = mha_dims(query, key_value, params, shape, config, "mha_forward");
  MhaForward out;
  out.q = split_heads(linear_forward(query, params.q_proj), shape.batch, shape.q_len, shape.heads);
  out.k = split_heads(linear_forward(key_value, params.k_proj), shape.batch, shape.k_len, shape.heads);
  out.v = split_heads(linear_forward(key_value, params.v_proj), shape.batch, shape.k_len, shape.heads);
  out.attn = attention_forward(out.q, out.k, out.v, dims.attn, dims.config, prob_keep);
  out.context = merge_heads(out.attn.out, shape.batch, shape.q_len, shape.heads);
  out.out = linear_forward(out.context, params.out_proj);
  return out;
}

MhaGrads mha_backward(const Matrix& dout, const Matrix& query, const Matrix& key_value,
                      const MhaParams& params, const MhaShape& shape, const MhaConfig& config,
                      const MhaForward& forward, const KeepMask* prob_keep) {
  const MhaDims dims = mha_dims(query, key_value, params, shape, config, "mha_backward");
  MhaGrads grads;
  const LinearGrads out_grads = linear_backward(dout, forward.context, params.out_proj);
  const AttentionGrads attn_grads =
      attention_backward(split_heads(out_grads.dx, shape.batch, shape.q_len, shape.heads), forward.q,
                         forward.k, forward.v, dims.attn, dims.config, forward.attn.probs, prob_keep);
  const LinearGrads q_grads = linear_backward(
      merge_heads(attn_grads.dq, shape.batch, shape.q_len, shape.heads), query, params.q_proj);
  const LinearGrads k_grads = linear_backward(
      merge_heads(attn_grads.dk, shape.batch, shape.k_len, shape.heads), key_value, params.k_proj);
  const LinearGrads v_grads = linear_backward(
      merge_heads(attn_grads.dv, shape.batch, shape.k_len, shape.heads), key_value, params.v_proj);
  grads.d_query = q_grads.dx;
  grads.d_key_value = k_grads.dx + v_grads.dx;
  grads.d_params = {q_grads.dlayer, k_grads.dlayer, v_grads.dlayer, out_grads.dlayer};
  return grads;
}

}  // namespace seqbench::ref
