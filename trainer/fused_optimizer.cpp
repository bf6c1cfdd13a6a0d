// Host-side validation shared by the fused launchers and the baselines.
#include "trainer/fused_optimizer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"

namespace seqbench::trainer {

void validate_update_buffers(const UpdateBuffers& b, const OptimizerConfig& config, PrecisionMode mode,
                             const char* what) {
  validate_optimizer_config(config);
  precision_mode_name(mode);  // rejects an out-of-range mode
  dtype_name(b.dtype);
  SEQBENCH_REQUIRE(mode != PrecisionMode::stochastic_rounding || b.dtype == DType::bf16,
                   what << ": stochastic_rounding needs bf16 parameters, got " << dtype_name(b.dtype));
  if (b.count == 0) return;
  const std::size_t element = dtype_size(b.dtype);
  SEQBENCH_REQUIRE(
      b.count <= std::numeric_limits<std::size_t>::max() / 8,
      what << ": count " << b.count << " exceeds " << std::numeric_limits<std::size_t>::max() / 8);
  struct Range {
    const char* name;
    const void* ptr;
    std::size_t element_bytes;
    bool needed;
  };
  const Range ranges[] = {
      {"params", b.params, element, true},
      {"grads", b.grads, element, true},
      {"master", b.master, 4, mode == PrecisionMode::master_fp32},
      {"state0", b.state0, 4, uses_state0(config)},
      {"state1", b.state1, 4, uses_state1(config)},
  };
  std::vector<const Range*> used;
  for (const Range& r : ranges) {
    if (!r.needed) continue;
    SEQBENCH_REQUIRE(r.ptr != nullptr,
                     what << ": " << r.name << " is null but " << optimizer_kind_name(config.kind) << " in "
                          << precision_mode_name(mode) << " mode needs it (" << b.count << " elements)");
    SEQBENCH_REQUIRE(reinterpret_cast<std::uintptr_t>(r.ptr) % r.element_bytes == 0,
                     what << ": " << r.name << " " << r.ptr << " is not aligned to its " << r.element_bytes
                          << "-byte elements");
    used.push_back(&r);
  }
  for (std::size_t x = 0; x < used.size(); ++x) {
    for (std::size_t y = x + 1; y < used.size(); ++y) {
      const auto a = reinterpret_cast<std::uintptr_t>(used[x]->ptr);
      const auto c = reinterpret_cast<std::uintptr_t>(used[y]->ptr);
      const std::size_t a_bytes = b.count * used[x]->element_bytes,
                        c_bytes = b.count * used[y]->element_bytes;
      SEQBENCH_REQUIRE(a + a_bytes <= c || c + c_bytes <= a, what << ": " << used[x]->name << " ["
                                                                  << used[x]->ptr << ", +" << a_bytes
                                                                  << ") overlaps " << used[y]->name << " ["
                                                                  << used[y]->ptr << ", +" << c_bytes << ")");
    }
  }
}

}  // namespace seqbench::trainer
