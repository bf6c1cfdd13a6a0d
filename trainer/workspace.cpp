#include "trainer/workspace.h"

#include <limits>

#include "core/cuda_check.h"
#include "trainer/convert.h"

namespace seqbench::trainer {

WorkspaceLayout::WorkspaceLayout(const std::vector<TensorSpec>& specs) {
  // The largest total whose byte size in fp32 still fits in size_t: a bound on the layout, not on
  // any device.
  constexpr std::size_t kMaxTotal = std::numeric_limits<std::size_t>::max() / 8;
  slots_.reserve(specs.size());
  for (const TensorSpec& spec : specs) {
    SEQBENCH_REQUIRE(!spec.name.empty(),
                     "workspace layout: tensor #" << slots_.size() << " has an empty name");
    SEQBENCH_REQUIRE(index_.count(spec.name) == 0, "workspace layout: duplicate tensor name '"
                                                       << spec.name << "' (tensor #" << slots_.size()
                                                       << " and #" << index_.at(spec.name) << ")");
    const std::size_t padded_count = (spec.count + kAlignElements - 1) / kAlignElements * kAlignElements;
    SEQBENCH_REQUIRE(spec.count <= kMaxTotal && padded_count <= kMaxTotal - total_,
                     "workspace layout: tensor '" << spec.name << "' with " << spec.count
                                                  << " elements makes the workspace exceed " << kMaxTotal
                                                  << " elements");
    index_.emplace(spec.name, slots_.size());
    slots_.push_back(TensorSlot{spec.name, total_, spec.count});
    total_ += padded_count;
    parameters_ += spec.count;
  }
}

const TensorSlot& WorkspaceLayout::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  SEQBENCH_REQUIRE(it != index_.end(), "workspace layout: no tensor named '" << name << "' among its "
                                                                             << slots_.size() << " tensors");
  return slots_[it->second];
}

Workspace::Workspace(WorkspaceLayout layout, DType dtype, bool with_master)
    : layout_(std::move(layout)),
      dtype_(dtype),
      with_master_(with_master),
      params_(layout_.bytes(dtype)),
      grads_(layout_.bytes(dtype)),
      master_(with_master ? layout_.total_elements() : 0) {
  // Zero everything, padding included: the optimizer sweeps whole buffers (see workspace.h).
  if (params_.size() > 0) SEQBENCH_CUDA_CHECK(cudaMemset(params_.data(), 0, params_.bytes()));
  if (grads_.size() > 0) SEQBENCH_CUDA_CHECK(cudaMemset(grads_.data(), 0, grads_.bytes()));
  if (master_.size() > 0) SEQBENCH_CUDA_CHECK(cudaMemset(master_.data(), 0, master_.bytes()));
  // cudaMemset may return before it completes, and work on a non-blocking stream does not wait
  // for the legacy stream: finish here (a set-up path) so the first step sees the zeros.
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

TensorView<float> Workspace::master(std::string_view name) {
  SEQBENCH_REQUIRE(with_master_,
                   "workspace master view '" << name << "': the workspace has no master buffer");
  const TensorSlot& slot = layout_.find(name);
  return {master_.data() + slot.offset, slot.count};
}

void Workspace::zero_grads(cudaStream_t stream) {
  if (grads_.size() > 0) SEQBENCH_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream));
}

void Workspace::copy_params_to_master(cudaStream_t stream) {
  SEQBENCH_REQUIRE(with_master_, "copy_params_to_master: the workspace has no master buffer");
  launch_convert(master_.data(), DType::f32, params_.data(), dtype_, count(), nullptr, ConvertScaling::none,
                 stream);
  master_filled_ = true;
}

void Workspace::mark_master_filled() {
  SEQBENCH_REQUIRE(with_master_, "mark_master_filled: the workspace has no master buffer");
  master_filled_ = true;
}

}  // namespace seqbench::trainer
