// Helpers of the trainer's GPU tests: random layouts and values, typed host <-> device copies,
// bitwise comparisons that name the first differing element.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/dtype.h"
#include "trainer/workspace.h"

namespace seqbench::trainer::testing {

// The sizes every kernel must survive, then random ones.
inline std::vector<std::size_t> odd_sizes() {
  return {1, 3, 7, 8, 9, 15, 16, 17, 127, 1000, 1023, 4095, 4096, 4097};
}

// 20-40 tensors: odd sizes, random sizes up to 20000, a zero-size one, and (when `big`) one tensor
// longer than one multi-tensor chunk.
inline WorkspaceLayout random_layout(std::mt19937_64& rng, bool big = false) {
  std::vector<TensorSpec> specs;
  const auto sizes = odd_sizes();
  const int tensors = 20 + static_cast<int>(rng() % 21);
  for (int t = 0; t < tensors; ++t) {
    std::ostringstream name;
    name << "layer" << t / 4 << ".w" << t % 4;
    const std::size_t count = t == 5 ? 0 : (rng() % 2 ? sizes[rng() % sizes.size()] : 1 + rng() % 20000);
    specs.push_back({name.str(), count});
  }
  if (big) specs.push_back({"big", 65536 * 2 + 4099});
  return WorkspaceLayout(specs);
}

template <class T>
std::vector<T> download(const void* device, std::size_t count) {
  std::vector<T> host(count);
  if (count > 0)
    SEQBENCH_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <class T>
void upload(void* device, const std::vector<T>& host) {
  if (!host.empty())
    SEQBENCH_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Random values in the dtype, zero in the workspace padding (where no tensor lives).
template <class T>
std::vector<T> random_in_tensors(const WorkspaceLayout& layout, std::mt19937_64& rng, float scale,
                                 double zero_fraction = 0.0) {
  std::vector<T> values(layout.total_elements(), from_float<T>(0.0f));
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> uniform;
  for (const TensorSlot& slot : layout.tensors()) {
    // Per-tensor magnitudes spread over three decades, like real layers (LayerNorm gains ~1,
    // embeddings ~1e-2).
    const float tensor_scale = scale * std::pow(10.0f, static_cast<float>(rng() % 3) - 1.0f);
    for (std::size_t i = 0; i < slot.count; ++i)
      values[slot.offset + i] =
          uniform(rng) < zero_fraction ? from_float<T>(0.0f) : from_float<T>(normal(rng) * tensor_scale);
  }
  return values;
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(to_float<T>(v[i]));
  return out;
}

// "" when a and b hold the same bits; else the count of differing elements and the first one.
template <class T>
std::string bitwise_difference(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    std::ostringstream os;
    os << what << ": sizes " << got.size() << " vs " << want.size();
    return os.str();
  }
  std::size_t differing = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (differing == 0) first = i;
      ++differing;
    }
  }
  if (differing == 0) return "";
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << differing << " of " << got.size() << " elements differ; first #" << first << " got "
     << to_float<T>(got[first]) << " want " << to_float<T>(want[first]);
  return os.str();
}

}  // namespace seqbench::trainer::testing
