// TensorView<T>: a non-owning window {data, count} into a workspace buffer.
//
// Layers receive views and never own parameter or gradient storage: every parameter lives in the
// workspace's one parameter buffer and every gradient in its one gradient buffer (LightSeq2's
// "symbolic tensor link"), so the optimizer can update all of them in one launch. A view from a
// Workspace starts on a 16-byte boundary, so kernels may use Packed<T> loads on it.
#pragma once

#include <cstddef>

namespace seqbench::trainer {

template <class T>
struct TensorView {
  T* ptr = nullptr;
  std::size_t count = 0;

  T* data() const { return ptr; }
  std::size_t size() const { return count; }
  std::size_t bytes() const { return count * sizeof(T); }
  bool empty() const { return count == 0; }
};

}  // namespace seqbench::trainer
