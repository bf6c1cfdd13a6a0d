#include "layers/parameter_ranges.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/byte_range.h"
#include "core/error.h"

namespace seqbench::layers {

std::size_t ParameterRanges::bytes_of(const std::vector<ParameterShape>& shapes, std::size_t i,
                                      std::size_t element_bytes) {
  SEQBENCH_REQUIRE(i < shapes.size(), "ParameterRanges: the layer visits more tensors than its "
                                          << shapes.size() << " parameter shapes");
  return shapes[i].elements() * element_bytes;
}

void ParameterRanges::add(std::string name, const void* p, std::size_t bytes, bool gradient) {
  if (p == nullptr || bytes == 0) return;
  ranges_.push_back(Range{std::move(name), p, bytes, gradient});
}

void ParameterRanges::require_gradients_disjoint() const {
  // Sorted by start, every overlapping pair (a, c) with a first has a.end > c.start; keeping the
  // furthest-reaching range seen so far, and the furthest-reaching gradient, finds one for c
  // whenever c overlaps an earlier range that is a gradient or (c being one) any earlier range.
  std::vector<const Range*> sorted;
  sorted.reserve(ranges_.size());
  for (const Range& r : ranges_) sorted.push_back(&r);
  const auto start = [](const Range* r) { return reinterpret_cast<std::uintptr_t>(r->p); };
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const Range* a, const Range* b) { return start(a) < start(b); });
  const Range* reach_any = nullptr;
  const Range* reach_grad = nullptr;
  const auto end = [&](const Range* r) { return start(r) + r->bytes; };
  for (const Range* c : sorted) {
    const Range* other = c->gradient ? reach_any : reach_grad;
    SEQBENCH_REQUIRE(other == nullptr || end(other) <= start(c),
                     layer_ << ": " << c->name << " (" << c->bytes << " bytes at " << c->p << ") overlaps "
                            << other->name << " (" << other->bytes << " bytes at " << other->p
                            << "): a gradient must share bytes with no other parameter or gradient");
    if (reach_any == nullptr || end(c) > end(reach_any)) reach_any = c;
    if (c->gradient && (reach_grad == nullptr || end(c) > end(reach_grad))) reach_grad = c;
  }
}

void ParameterRanges::require_clear(const char* where, const char* what, const void* p, std::size_t bytes,
                                    bool weights_too) const {
  for (const Range& r : ranges_) {
    if (!r.gradient && !weights_too) continue;
    SEQBENCH_REQUIRE(!bytes_overlap(p, bytes, r.p, r.bytes),
                     layer_ << "::" << where << ": " << what << " (" << bytes << " bytes at " << p
                            << ") overlaps " << r.name << " (" << r.bytes << " bytes at " << r.p << ")"
                            << (weights_too ? ": the layer writes it, and reads or writes the parameters"
                                            : ": the layer reads it and writes the gradients"));
  }
}

void ParameterRanges::require_written_clear(const char* where, const char* what, const void* p,
                                            std::size_t bytes) const {
  require_clear(where, what, p, bytes, true);
}

void ParameterRanges::require_read_clear(const char* where, const char* what, const void* p,
                                         std::size_t bytes) const {
  require_clear(where, what, p, bytes, false);
}

}  // namespace seqbench::layers
