// BaselineEncoderStack: `layers` BaselineEncoderLayers (layers/baseline_encoder_layer.h) chained
// the way PyTorch eager runs an nn.Sequential of them: each hidden state between layers is a
// tensor allocated through the stack's allocator (in practice a CachingAllocator) when the layer
// producing it runs, kept while the next layer's graph needs it, and freed when autograd would
// drop it; each layer's input gradient is allocated when its backward runs and freed once the
// layer below has consumed it. The baseline of EncoderStack (layers/encoder_stack.h) for Fig. 20
// at stack scale: the same math, layer i at dropout streams base + kEncoderLayerDropoutOffsets·i.
// The layers share one Gemm and one GEMM workspace (allocated through the allocator at
// construction), as an eager model shares one cuBLAS workspace and EncoderStack plans one.
//
// Limits and contract: as BaselineEncoderLayer's, per layer, plus layers >= 1 and one weights and
// one grads entry per layer (checked before any CUDA call), the overlap rules over all layers'
// views together; backward() needs the last forward's x, unchanged; dx may alias dy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "layers/baseline_encoder_layer.h"
#include "layers/config.h"
#include "layers/device_allocator.h"
#include "layers/encoder_layer.h"

namespace seqbench::layers {

class BaselineEncoderStack {
 public:
  BaselineEncoderStack(const LayerConfig& config, const std::vector<EncoderLayerWeights>& weights,
                       const std::vector<EncoderLayerGrads>& grads, DeviceAllocator& allocator,
                       BaselineEncoderLayerOptions options = {});
  ~BaselineEncoderStack();
  BaselineEncoderStack(const BaselineEncoderStack&) = delete;
  BaselineEncoderStack& operator=(const BaselineEncoderStack&) = delete;

  // As EncoderStack::forward.
  void forward(void* y, const void* x, std::size_t batch_size, std::size_t seq_len,
               const std::int32_t* key_lengths, std::uint64_t seed, std::uint64_t base_offset,
               cudaStream_t stream);
  // As EncoderStack::backward; then frees every saved tensor (the layers' and the hidden states)
  // unless retain_graph.
  void backward(void* dx, const void* dy, const void* x, cudaStream_t stream, bool retain_graph = false);

  int layers() const { return static_cast<int>(layers_.size()); }
  // Bytes of the tensors held for the backward now: the layers' saved tensors and the hidden states.
  std::size_t saved_bytes() const;

 private:
  struct Impl;

  LayerConfig config_;
  std::unique_ptr<Impl> impl_;  // before layers_: its Gemm outlives them
  std::vector<std::unique_ptr<BaselineEncoderLayer>> layers_;
};

}  // namespace seqbench::layers
