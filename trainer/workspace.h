// The trainer's workspace: every parameter in one contiguous device buffer, every gradient in
// another, and (for the AMP-style precision mode) every fp32 master weight in a third, all with
// one layout, so that element i of each buffer belongs to the same parameter.
//
// WorkspaceLayout is pure host logic (testable without a GPU): from a list of (name, element
// count) it assigns each tensor an element offset. Each offset is a multiple of kAlignElements = 8,
// so every view starts on a 16-byte boundary in a 2-byte buffer and on a 32-byte boundary in a
// 4-byte one: one index space serves the fp16/bf16/fp32 parameters, the gradients, the fp32 master
// and the fp32 optimizer state alike, which is what lets one kernel thread find "its" element in
// all of them. The padding between tensors is zero in every buffer (Workspace zeroes it at
// allocation and zero_grads() clears whole buffers), and the optimizer's rule keeps a zero
// parameter with a zero gradient at zero, so the optimizer can sweep the whole buffer, padding
// included, without knowing where the tensors are.
//
// Workspace owns the device memory: one DeviceBuffer per buffer, allocated once at construction.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/device_buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "trainer/tensor_view.h"

namespace seqbench::trainer {

struct TensorSpec {
  std::string name;
  std::size_t count = 0;  // elements; 0 is allowed (the tensor gets an offset and no storage)
};

struct TensorSlot {
  std::string name;
  std::size_t offset = 0;  // elements from the start of the buffer; a multiple of kAlignElements
  std::size_t count = 0;
};

class WorkspaceLayout {
 public:
  static constexpr std::size_t kAlignBytes = 16;
  // 16 bytes of the narrowest element type (2 bytes); 4-byte buffers are then 32-byte aligned.
  static constexpr std::size_t kAlignElements = 8;

  WorkspaceLayout() = default;
  // Offsets in the order given. Throws seqbench::Error on an empty or duplicate name, naming it,
  // or when the total would not fit in memory addressable by size_t.
  explicit WorkspaceLayout(const std::vector<TensorSpec>& specs);

  const std::vector<TensorSlot>& tensors() const { return slots_; }
  std::size_t tensor_count() const { return slots_.size(); }
  // Throws seqbench::Error naming `name` (and how many tensors there are) when it is unknown.
  const TensorSlot& find(std::string_view name) const;
  bool contains(std::string_view name) const { return index_.count(std::string(name)) != 0; }

  // Elements in each buffer, padding included; a multiple of kAlignElements.
  std::size_t total_elements() const { return total_; }
  // Sum of the tensors' counts (no padding): the model's parameter count.
  std::size_t parameter_count() const { return parameters_; }
  // Bytes of one buffer with elements of `dtype` (or of `element_bytes` bytes).
  std::size_t bytes(DType dtype) const { return total_ * dtype_size(dtype); }
  std::size_t bytes(std::size_t element_bytes) const { return total_ * element_bytes; }

 private:
  std::vector<TensorSlot> slots_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t total_ = 0;
  std::size_t parameters_ = 0;
};

class Workspace {
 public:
  // Allocates the parameter and gradient buffers in `dtype` (and the fp32 master buffer when
  // `with_master`) and zeroes all of them, padding included. Synchronous: a set-up path.
  Workspace(WorkspaceLayout layout, DType dtype, bool with_master);

  const WorkspaceLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  bool has_master() const { return with_master_; }
  std::size_t count() const { return layout_.total_elements(); }

  void* params() { return params_.data(); }
  const void* params() const { return params_.data(); }
  void* grads() { return grads_.data(); }
  const void* grads() const { return grads_.data(); }
  float* master() { return master_.data(); }  // nullptr without a master buffer
  const float* master() const { return master_.data(); }

  // Views by tensor name. T must be the workspace's dtype (checked); throws on an unknown name.
  template <class T>
  TensorView<T> param(std::string_view name) {
    return view<T>(params_.data(), name, "param");
  }
  template <class T>
  TensorView<T> grad(std::string_view name) {
    return view<T>(grads_.data(), name, "grad");
  }
  TensorView<float> master(std::string_view name);

  // Clears the whole gradient buffer (padding included) on `stream`.
  void zero_grads(cudaStream_t stream);
  // master[i] = float(params[i]) for the whole buffer, on `stream`: how the AMP mode starts (and
  // how it resumes from a checkpoint that holds only the low-precision parameters).
  void copy_params_to_master(cudaStream_t stream);
  // Whether the master holds parameters: set by copy_params_to_master, by FusedOptimizer::
  // load_state, and by mark_master_filled() for a caller that writes master() itself. A
  // master_fp32 step from the zeroed master would replace every parameter with about -lr·sign(g),
  // so FusedOptimizer refuses one before this is set.
  bool master_filled() const { return master_filled_; }
  void mark_master_filled();

 private:
  template <class T>
  TensorView<T> view(unsigned char* base, std::string_view name, const char* what) {
    SEQBENCH_REQUIRE(DTypeTraits<T>::dtype == dtype_,
                     "workspace " << what << " view '" << name << "' as " << DTypeTraits<T>::name
                                  << ", but the workspace is " << dtype_name(dtype_));
    const TensorSlot& slot = layout_.find(name);
    return {reinterpret_cast<T*>(base) + slot.offset, slot.count};
  }

  WorkspaceLayout layout_;
  DType dtype_;
  bool with_master_;
  bool master_filled_ = false;
  DeviceBuffer<unsigned char> params_;
  DeviceBuffer<unsigned char> grads_;
  DeviceBuffer<float> master_;
};

}  // namespace seqbench::trainer
