// Host side of the multi-tensor-apply baseline: the launch plan and the slicing.
#include "trainer/multi_tensor_apply.h"

#include "core/error.h"

namespace seqbench::trainer {

std::vector<MtaLaunch> plan_multi_tensor_apply(const std::vector<std::size_t>& counts,
                                               std::size_t chunk_elements, int max_tensors, int max_blocks) {
  SEQBENCH_REQUIRE(chunk_elements > 0, "multi_tensor_apply: chunk_elements must be > 0");
  SEQBENCH_REQUIRE(max_tensors >= 1 && max_blocks >= 1, "multi_tensor_apply: max_tensors "
                                                            << max_tensors << " and max_blocks " << max_blocks
                                                            << " must be >= 1");
  std::vector<MtaLaunch> launches;
  MtaLaunch current;
  for (std::size_t t = 0; t < counts.size(); ++t) {
    if (counts[t] == 0) continue;
    current.tensors.push_back(t);
    const std::size_t chunks = (counts[t] + chunk_elements - 1) / chunk_elements;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      current.blocks.push_back(MtaBlock{static_cast<int>(current.tensors.size()) - 1, chunk});
      const bool last_chunk_of_tensor = chunk + 1 == chunks;
      const bool tensors_full =
          static_cast<int>(current.tensors.size()) == max_tensors && last_chunk_of_tensor;
      const bool blocks_full = static_cast<int>(current.blocks.size()) == max_blocks;
      if (!tensors_full && !blocks_full) continue;
      launches.push_back(std::move(current));
      current = MtaLaunch{};
      // A tensor with chunks left continues as slot 0 of the next launch (apex does the same).
      if (!last_chunk_of_tensor) current.tensors.push_back(t);
    }
  }
  // apex launches on "last chunk of the last tensor"; flushing here also covers trailing empty tensors.
  if (!current.blocks.empty()) launches.push_back(std::move(current));
  return launches;
}

std::vector<UpdateBuffers> slice_update_buffers(const WorkspaceLayout& layout, const UpdateBuffers& whole) {
  SEQBENCH_REQUIRE(whole.count == layout.total_elements(), "multi_tensor_apply: buffers have "
                                                               << whole.count << " elements, layout "
                                                               << layout.total_elements());
  const std::size_t element = dtype_size(whole.dtype);
  auto at = [](float* base, std::size_t offset) { return base ? base + offset : nullptr; };
  std::vector<UpdateBuffers> slices;
  slices.reserve(layout.tensor_count());
  for (const TensorSlot& slot : layout.tensors()) {
    if (slot.count == 0) continue;
    UpdateBuffers s = whole;
    s.params = static_cast<unsigned char*>(whole.params) + slot.offset * element;
    s.grads = static_cast<const unsigned char*>(whole.grads) + slot.offset * element;
    s.master = at(whole.master, slot.offset);
    s.state0 = at(whole.state0, slot.offset);
    s.state1 = at(whole.state1, slot.offset);
    s.count = slot.count;
    s.index_base = whole.index_base + slot.offset;
    slices.push_back(s);
  }
  return slices;
}

}  // namespace seqbench::trainer
