#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/byte_range.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "kernels/qkv_reshape.h"
#include "layers/cross_kv.h"
#include "layers/gemm_shapes.h"

namespace seqbench::layers {

namespace {

struct CrossKvIds {
  TensorId enc = kNoTensor, d_enc = kNoTensor;
  TensorId kv_all = kNoTensor, d_kv_all = kNoTensor, split_ws = kNoTensor;
  std::vector<TensorId> heads, d_heads;
  int forward_steps = 0;
};

void require_layers(const LayerConfig& config, int layers, const char* where) {
  config.validate();
  const std::int64_t cols = std::int64_t{2} * config.hidden;
  SEQBENCH_REQUIRE(layers >= 1, where << ": layers " << layers << " must be at least 1");
  SEQBENCH_REQUIRE(layers <= std::numeric_limits<std::int32_t>::max() / cols,
                   where << ": layers·2H = " << layers << "·" << cols << " exceeds "
                         << std::numeric_limits<std::int32_t>::max() << " (one GEMM's columns)");
}

std::string layer_name(const char* stem, int layer) {
  return std::string(stem) + "." + std::to_string(layer);
}

CrossKvIds record_cross_kv(PlanBuilder& plan, int layers, const CrossAttentionKVOptions& o) {
  CrossKvIds id;
  const std::size_t T = plan.tokens(), H = plan.hidden(), C = static_cast<std::size_t>(layers) * 2 * H;
  id.enc = plan.external("encoder_out");
  id.d_enc = plan.external("d_encoder_out");
  if (o.gemm == nullptr) plan.plan_gemm_workspace(o.gemm_workspace_bytes);
  id.kv_all = plan.act("kv_all", T * C);
  plan.gemm_op("kv_gemm", {id.enc}, {id.kv_all});
  for (int l = 0; l < layers; ++l) id.heads.push_back(plan.act(layer_name("kv_heads", l), 2 * T * H));
  plan.op("kv_bias_split", {id.kv_all}, id.heads);
  id.forward_steps = plan.steps();
  // The gap between this object's forward and backward, where the decoder layers read the heads
  // (forward_kv, backward_kv) and write the gradient heads (backward_kv): one step with no work of
  // its own, announced first by backward(), so that the heads stay live across the gap and the
  // gradient heads are live from it on (on one stream, everything the layers enqueue lies before
  // the backward's kernels).
  for (int l = 0; l < layers; ++l) id.d_heads.push_back(plan.act(layer_name("d_kv_heads", l), 2 * T * H));
  plan.op("decoder_layers", id.heads, id.d_heads);
  id.d_kv_all = plan.act("d_kv_all", T * C);
  id.split_ws = plan.bytes("kv_bias_split_bwd_ws", plan.qkv_bias_split_bwd_ws(2));
  plan.op("kv_bias_split_bwd", id.d_heads, {id.d_kv_all, id.split_ws});
  plan.gemm_op("kv_gemm_bwd", {id.d_kv_all, id.enc}, {id.d_enc});
  return id;
}

}  // namespace

std::vector<ParameterShape> cross_kv_parameter_shapes(const LayerConfig& config, int layers) {
  require_layers(config, layers, "cross_kv_parameter_shapes");
  const std::size_t H = static_cast<std::size_t>(config.hidden), C = static_cast<std::size_t>(layers) * 2 * H;
  return {{"kv_weight_all", C, H}, {"kv_bias_all", 1, C}};
}

std::vector<TensorLifetime> cross_kv_lifetimes(const LayerConfig& config, int layers,
                                               const CrossAttentionKVOptions& options,
                                               std::vector<std::string>* ops, int* forward_ops) {
  require_layers(config, layers, "cross_kv_lifetimes");
  PlanBuilder plan(config, options.prefix);
  const CrossKvIds ids = record_cross_kv(plan, layers, options);
  if (ops != nullptr) *ops = plan.recorder().ops();
  if (forward_ops != nullptr) *forward_ops = ids.forward_steps;
  return plan.recorder().lifetimes();
}

// ---------------------------------------------------------------------------------------------

struct CrossAttentionKV::Impl {
  CrossKvIds ids;
  std::unique_ptr<PlannedLayer> planned;
  bool have_forward = false;
  bool heads_valid = false;  // false once a backward may have reused the heads' bytes
  std::uint64_t forwards = 0;
  std::vector<std::uint64_t> written;  // per layer: the forward_count its d_kv_heads was written for
  std::size_t batch = 0, src_len = 0;
  const void* enc = nullptr;

  std::int64_t rows() const { return static_cast<std::int64_t>(batch * src_len); }

  kernels::HeadsShape shape(const LayerConfig& c, int layers) const {
    kernels::HeadsShape s;
    s.batch = static_cast<std::int64_t>(batch);
    s.len = static_cast<std::int64_t>(src_len);
    s.heads = c.heads;
    s.hidden = c.hidden;
    s.projections = 2;
    s.projected_ld = std::int64_t{2} * c.hidden * layers;  // layer i's [rows, 2H] column block of kv_all
    return s;
  }

  template <class T>
  void forward(const LayerConfig& c, int layers, const std::string& prefix, const T* enc_in, const T* w,
               const T* b, cudaStream_t stream) {
    LayerRun<T> r("CrossAttentionKV", prefix, planned->memory(), planned->ops(), 0, planned->gemm(), stream);
    const std::int64_t H = c.hidden, C = 2 * H * layers, R = rows();
    r.op("kv_gemm");
    T* kv_all = r.act(ids.kv_all, R * C);
    r.gemm(linear_forward(enc_in, w, kv_all, R, C, H));
    r.op("kv_bias_split");
    const kernels::HeadsShape s = shape(c, layers);
    for (int l = 0; l < layers; ++l) {
      T* heads = r.act(ids.heads[static_cast<std::size_t>(l)], 2 * R * H);
      kernels::launch_qkv_bias_split_fwd<T>(heads, kv_all + 2 * H * l, b + 2 * H * l, s, stream);
    }
    planned->require_ran("forward", 0, r.step());
  }

  template <class T>
  void backward(const LayerConfig& c, int layers, const std::string& prefix, T* d_enc, const T* w, T* dw,
                T* db, cudaStream_t stream) {
    const int first = planned->forward_steps();
    LayerRun<T> r("CrossAttentionKV", prefix, planned->memory(), planned->ops(), first, planned->gemm(),
                  stream);
    const std::int64_t H = c.hidden, C = 2 * H * layers, R = rows();
    r.op("decoder_layers");  // the layers' part, done: the step that closes the heads' lifetimes
    r.op("kv_bias_split_bwd");
    T* d_kv_all = r.act(ids.d_kv_all, R * C);
    const kernels::HeadsShape s = shape(c, layers);
    const std::size_t need = kernels::qkv_bias_split_bwd_workspace_bytes(s);
    void* ws = r.workspace(ids.split_ws, need);
    // One workspace for every layer: each launch's partials are consumed by its own reduction
    // before the next launch (same stream) overwrites them.
    for (int l = 0; l < layers; ++l) {
      const T* d_heads = r.act(ids.d_heads[static_cast<std::size_t>(l)], 2 * R * H);
      kernels::launch_qkv_bias_split_bwd<T>(d_kv_all + 2 * H * l, db + 2 * H * l, d_heads, s, ws, need,
                                            stream);
    }
    r.op("kv_gemm_bwd");
    const T* enc_in = static_cast<const T*>(enc);
    r.gemm(linear_dx(d_kv_all, w, d_enc, R, C, H));
    r.gemm(linear_dw(d_kv_all, enc_in, dw, R, C, H));
    planned->require_ran("backward", first, r.step());
  }
};

CrossAttentionKV::CrossAttentionKV(const LayerConfig& config, int layers, const void* kv_weight_all,
                                   const void* kv_bias_all, void* d_kv_weight_all, void* d_kv_bias_all,
                                   DeviceAllocator& allocator, CrossAttentionKVOptions options)
    : config_(config),
      layers_(layers),
      options_(std::move(options)),
      w_(kv_weight_all),
      b_(kv_bias_all),
      dw_(d_kv_weight_all),
      db_(d_kv_bias_all) {
  require_layers(config_, layers_, "CrossAttentionKV");
  SEQBENCH_REQUIRE(w_ != nullptr && b_ != nullptr && dw_ != nullptr && db_ != nullptr,
                   "CrossAttentionKV: null parameter pointer(s):"
                       << (w_ == nullptr ? " kv_weight_all" : "") << (b_ == nullptr ? " kv_bias_all" : "")
                       << (dw_ == nullptr ? " d_kv_weight_all" : "")
                       << (db_ == nullptr ? " d_kv_bias_all" : ""));
  SEQBENCH_REQUIRE(!options_.prefix.empty(),
                   "CrossAttentionKV: options.prefix is empty (the planned tensors' names)");
  const std::size_t e = dtype_size(config_.dtype), C = static_cast<std::size_t>(layers_) * 2 * config_.hidden;
  const std::size_t wb = C * static_cast<std::size_t>(config_.hidden) * e, bb = C * e;
  SEQBENCH_REQUIRE(!bytes_overlap(dw_, wb, db_, bb) && !bytes_overlap(dw_, wb, w_, wb) &&
                       !bytes_overlap(dw_, wb, b_, bb) && !bytes_overlap(db_, bb, w_, wb) &&
                       !bytes_overlap(db_, bb, b_, bb),
                   "CrossAttentionKV: the gradients d_kv_weight_all ["
                       << C << ", " << config_.hidden << "] and d_kv_bias_all [" << C
                       << "] overlap each other or the weights");
  PlanBuilder plan(config_, options_.prefix);  // host only
  impl_ = std::make_unique<Impl>();
  impl_->ids = record_cross_kv(plan, layers_, options_);
  impl_->written.assign(static_cast<std::size_t>(layers_), 0);
  impl_->planned = std::make_unique<PlannedLayer>("CrossAttentionKV", plan, impl_->ids.forward_steps,
                                                  allocator, options_.gemm, options_.gemm_workspace_bytes);
}

CrossAttentionKV::~CrossAttentionKV() = default;

const MemoryManager& CrossAttentionKV::memory() const {
  return impl_->planned->memory();
}

std::size_t CrossAttentionKV::block_bytes() const {
  return memory().block_bytes();
}

void CrossAttentionKV::forward(const void* encoder_out, std::size_t batch_size, std::size_t source_len,
                               cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_kv_fwd");
  config_.check_batch(batch_size, source_len);
  SEQBENCH_REQUIRE(encoder_out != nullptr, "CrossAttentionKV::forward: encoder_out is null");
  Impl& m = *impl_;
  const std::size_t sb =
      batch_size * source_len * static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  m.planned->require_outside_block("forward", "encoder_out", encoder_out, sb);
  m.have_forward = false;
  m.heads_valid = false;
  ++m.forwards;  // every earlier gradient mark is now stale
  m.batch = batch_size;
  m.src_len = source_len;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    m.forward<T>(config_, layers_, options_.prefix, static_cast<const T*>(encoder_out),
                 static_cast<const T*>(w_), static_cast<const T*>(b_), stream);
  });
  m.planned->memory().set_step(-1);
  m.have_forward = true;
  m.heads_valid = true;
  m.enc = encoder_out;
}

const void* CrossAttentionKV::kv_heads(int layer) const {
  const Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward, "CrossAttentionKV::kv_heads: no forward() yet (the heads are its output)");
  SEQBENCH_REQUIRE(m.heads_valid,
                   "CrossAttentionKV::kv_heads: backward() has run since the last forward() "
                   "and its d_kv_all may hold the heads' bytes (call forward again)");
  SEQBENCH_REQUIRE(layer >= 0 && layer < layers_,
                   "CrossAttentionKV::kv_heads: layer " << layer << " is outside [0, " << layers_ << ")");
  const std::size_t bytes = 2 * static_cast<std::size_t>(m.rows()) *
                            static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  return m.planned->memory().get(m.ids.heads[static_cast<std::size_t>(layer)], bytes);
}

void* CrossAttentionKV::d_kv_heads(int layer) const {
  const Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "CrossAttentionKV::d_kv_heads: no forward() yet (the gradient heads have its shape)");
  SEQBENCH_REQUIRE(layer >= 0 && layer < layers_,
                   "CrossAttentionKV::d_kv_heads: layer " << layer << " is outside [0, " << layers_ << ")");
  const std::size_t bytes = 2 * static_cast<std::size_t>(m.rows()) *
                            static_cast<std::size_t>(config_.hidden) * dtype_size(config_.dtype);
  return m.planned->memory().get(m.ids.d_heads[static_cast<std::size_t>(layer)], bytes);
}

void CrossAttentionKV::mark_d_kv_heads_written(int layer) {
  Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "CrossAttentionKV::mark_d_kv_heads_written: no forward() yet (a gradient is for one)");
  SEQBENCH_REQUIRE(layer >= 0 && layer < layers_, "CrossAttentionKV::mark_d_kv_heads_written: layer "
                                                      << layer << " is outside [0, " << layers_ << ")");
  m.written[static_cast<std::size_t>(layer)] = m.forwards;
}

std::size_t CrossAttentionKV::batch_size() const {
  return impl_->batch;
}

std::size_t CrossAttentionKV::source_len() const {
  return impl_->src_len;
}

std::uint64_t CrossAttentionKV::forward_count() const {
  return impl_->forwards;
}

void CrossAttentionKV::backward(void* d_encoder_out, const void* encoder_out, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("cross_kv_bwd");
  Impl& m = *impl_;
  SEQBENCH_REQUIRE(m.have_forward,
                   "CrossAttentionKV::backward: no forward() to differentiate (call forward first)");
  SEQBENCH_REQUIRE(d_encoder_out != nullptr, "CrossAttentionKV::backward: d_encoder_out is null");
  SEQBENCH_REQUIRE(encoder_out == m.enc, "CrossAttentionKV::backward: encoder_out "
                                             << encoder_out << " is not the last forward's (" << m.enc
                                             << ")");
  const std::size_t e = dtype_size(config_.dtype), H = static_cast<std::size_t>(config_.hidden);
  const std::size_t sb = static_cast<std::size_t>(m.rows()) * H * e;
  const std::size_t C = static_cast<std::size_t>(layers_) * 2 * H, wb = C * H * e, bb = C * e;
  SEQBENCH_REQUIRE(
      !bytes_overlap(d_encoder_out, sb, encoder_out, sb) && !bytes_overlap(d_encoder_out, sb, w_, wb) &&
          !bytes_overlap(d_encoder_out, sb, b_, bb) && !bytes_overlap(d_encoder_out, sb, dw_, wb) &&
          !bytes_overlap(d_encoder_out, sb, db_, bb),
      "CrossAttentionKV::backward: d_encoder_out overlaps encoder_out or the K/V parameters or "
      "their gradients");
  SEQBENCH_REQUIRE(
      !bytes_overlap(dw_, wb, encoder_out, sb) && !bytes_overlap(db_, bb, encoder_out, sb),
      "CrossAttentionKV::backward: d_kv_weight_all or d_kv_bias_all overlaps encoder_out (read by "
      "the dW GEMM they are written with)");
  m.planned->require_outside_block("backward", "d_encoder_out", d_encoder_out, sb);
  std::ostringstream missing;
  int missing_count = 0;
  for (int l = 0; l < layers_; ++l)
    if (m.written[static_cast<std::size_t>(l)] != m.forwards) missing << (missing_count++ ? ", " : "") << l;
  SEQBENCH_REQUIRE(missing_count == 0, "CrossAttentionKV::backward: "
                                           << missing_count << " of " << layers_
                                           << " layers have not written their d_kv_heads since the last "
                                              "forward() (layers "
                                           << missing.str()
                                           << "): run each layer's backward_kv with this object first");
  // Before the run: its temporaries may take the heads' bytes, a throw part-way included.
  m.heads_valid = false;
  dispatch_dtype(config_.dtype, [&](auto tag) {
    using T = decltype(tag);
    m.backward<T>(config_, layers_, options_.prefix, static_cast<T*>(d_encoder_out),
                  static_cast<const T*>(w_), static_cast<T*>(dw_), static_cast<T*>(db_), stream);
  });
  m.planned->memory().set_step(-1);
}

}  // namespace seqbench::layers
