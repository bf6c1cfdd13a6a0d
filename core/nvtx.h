// NVTX ranges in the one `seqbench` domain.
//
// Every launcher and every layer forward/backward opens one range:
//     SEQBENCH_NVTX_RANGE("layernorm_fwd");
// The name is registered once with the domain (a static nvtx3::registered_string_in), so the
// per-call cost is a handle lookup, and tools can select ranges by name:
//     ncu --nvtx --nvtx-include "seqbench@layernorm_fwd" ...
//     nsys profile --capture-range=nvtx --nvtx-capture "range@seqbench" ...
// Without a profiler attached NVTX calls return at once; no library needs to be linked.
#pragma once

#include <nvtx3/nvtx3.hpp>
#include <string>

namespace seqbench {

struct NvtxDomain {
  static constexpr const char* name{"seqbench"};
};

using NvtxRegisteredName = nvtx3::registered_string_in<NvtxDomain>;
using NvtxScopedRange = nvtx3::scoped_range_in<NvtxDomain>;

// A range whose name is only known at run time (a suite's experiment name); not registered.
class NvtxDynamicRange {
 public:
  explicit NvtxDynamicRange(const std::string& name) : range_(nvtx3::message{name.c_str()}) {}

 private:
  NvtxScopedRange range_;
};

}  // namespace seqbench

#define SEQBENCH_NVTX_CONCAT_INNER(a, b) a##b
#define SEQBENCH_NVTX_CONCAT(a, b) SEQBENCH_NVTX_CONCAT_INNER(a, b)

// Opens a range named by the string literal `literal_name` until the end of the scope.
#define SEQBENCH_NVTX_RANGE(literal_name)                                                   \
  static const ::seqbench::NvtxRegisteredName SEQBENCH_NVTX_CONCAT(seqbench_nvtx_name_,     \
                                                                   __LINE__){literal_name}; \
  const ::seqbench::NvtxScopedRange SEQBENCH_NVTX_CONCAT(seqbench_nvtx_range_, __LINE__) {  \
    nvtx3::event_attributes {                                                               \
      SEQBENCH_NVTX_CONCAT(seqbench_nvtx_name_, __LINE__)                                   \
    }                                                                                       \
  }
