// EncoderStack: `layers` encoder layers (layers/encoder_layer.h, the same math and kernels) run as
// one stack, with every temporary of the whole stack planned into ONE block. This is LightSeq2's
// memory manager at the scale it is meant for (§IV-D): the dry run covers the stack's forward,
// layer 0 to layer n−1, then its backward, layer n−1 to layer 0, so a layer's backward
// temporaries reuse the bytes of activations that deeper layers have already released, and the
// temporaries of every layer's forward share one region. Separate EncoderLayers each hold a block
// sized for their own forward and backward; a stack of them holds n such blocks.
//
//   h_0 = x,  h_{i+1} = layer_i(h_i),  y = h_n;   backward: dh_n = dy, dh_i = layer_iᵀ(dh_{i+1}), dx = dh_0
//
// Planned tensors: layer i's are named "<prefix><i>.<name>" ("enc3.attn.probs"), exactly the
// names an EncoderLayer with prefix "<prefix><i>." gives them; the hidden states between layers
// are "<prefix><i>.out" (i < n−1, layer i's output, kept for layer i+1's backward) and their
// gradients "<prefix><i>.d_out"; the stack's GEMM workspace (without options.gemm) is
// "<prefix>.gemm_workspace", shared by every layer. Externals: "x", "y", "dy", "dx".
//
// Dropout: layer i draws streams base + kEncoderLayerDropoutOffsets·i + 0..3, so a stack gives
// bitwise the results of EncoderLayers chained by hand with those offsets (the GPU test checks
// exactly that). A training loop advances base by encoder_stack_dropout_offsets(n) per step.
//
// Limits and contract: as EncoderLayer's, per layer (every parameter and gradient view non-null,
// named with its layer in the message), plus layers >= 1 and one weights and one grads entry per
// layer. forward() and backward() allocate nothing; backward() needs the last forward's x,
// unchanged; dx may alias dy. The views of all layers together follow EncoderLayer's overlap
// rules (a gradient of one layer on a weight of another is refused too). Every check happens
// before any CUDA call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/encoder_layer.h"
#include "layers/gemm.h"
#include "layers/memory_planner.h"

namespace seqbench::layers {

struct EncoderStackOptions {
  bool causal = false;         // every layer masks future keys (a GPT-2 stack)
  std::string prefix = "enc";  // layer i's tensors: "<prefix><i>.attn.probs", ...
  // GEMMs: a caller's Gemm (not owned), or null for one the stack makes at its first use with a
  // workspace of gemm_workspace_bytes planned in its block.
  Gemm* gemm = nullptr;
  std::size_t gemm_workspace_bytes = kGemmWorkspaceBytes;
  // What each layer's forward keeps for its backward (layers/layer_run.h); the results are
  // bitwise the same either way.
  Recompute recompute = Recompute::pointwise;
  // Whether backward() leaves what the forward kept intact, so that backward() may run again on
  // the same forward (PyTorch's retain_graph): those tensors then stay live to the end of the
  // backward (planned_lifetimes, layers/layer_run.h), which costs their bytes in the block. By
  // default a backward consumes its forward (its temporaries reuse those bytes) and a second
  // backward() without a new forward() is refused. (As EncoderLayerOptions::retain_forward.)
  bool retain_forward = false;
};

// The dropout offsets one forward of an n-layer stack uses: base .. base + this − 1. Throws for
// layers < 1.
std::uint64_t encoder_stack_dropout_offsets(int layers);

// Where each layer's passes start in the stack's op list (steps), and where the forward ends.
struct EncoderStackSteps {
  std::vector<int> forward_start;   // [layers]: layer i's first forward op
  std::vector<int> backward_start;  // [layers]: layer i's first backward op
  int forward_steps = 0;            // the forward's op count (the backward's first step)
};

// The stack's dry run: its ops in execution order and every temporary's lifetime at the config's
// maximum shapes. Host only; validates the config and the layer count. `ops` and `steps` receive
// the op names and the layers' pass boundaries when not null.
std::vector<TensorLifetime> encoder_stack_lifetimes(const LayerConfig& config, int layers,
                                                    const EncoderStackOptions& options = {},
                                                    std::vector<std::string>* ops = nullptr,
                                                    EncoderStackSteps* steps = nullptr);

class EncoderStack {
 public:
  // Validates config, layer count, every layer's weights and grads and the options (before any
  // CUDA call), plans the stack and allocates its one block through `allocator` (which must
  // outlive the stack).
  EncoderStack(const LayerConfig& config, std::vector<EncoderLayerWeights> weights,
               std::vector<EncoderLayerGrads> grads, DeviceAllocator& allocator,
               EncoderStackOptions options = {});
  ~EncoderStack();
  EncoderStack(const EncoderStack&) = delete;
  EncoderStack& operator=(const EncoderStack&) = delete;

  // y = layer_{n−1}(… layer_0(x)). x, y: device [batch_size·seq_len, H] of config.dtype, rows
  // b·L + l, outside the block and not overlapping each other; key_lengths: device int32
  // [batch_size] or null.
  void forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
               const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
               cudaStream_t stream);
  // dx and every layer's parameter gradients (written, not accumulated) from dy, for the last
  // forward() (same x pointer, contents unchanged). dx may alias dy.
  void backward(void* dx, const void* dy, const void* x, cudaStream_t stream);

  int layers() const { return static_cast<int>(weights_.size()); }
  const LayerConfig& config() const { return config_; }
  const MemoryManager& memory() const;
  std::size_t block_bytes() const;

 private:
  struct Impl;

  LayerConfig config_;
  EncoderStackOptions options_;
  std::vector<EncoderLayerWeights> weights_;
  std::vector<EncoderLayerGrads> grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqbench::layers
