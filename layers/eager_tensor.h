// EagerTensor: one tensor of an eager-like baseline layer (an autograd tensor in PyTorch eager):
// allocated through the layer's DeviceAllocator (in practice a CachingAllocator,
// layers/caching_allocator.h) when the op producing it runs, and freed by reset() or its
// destructor when autograd would drop it. Move-only; holds no device state beyond the pointer.
// Used by every baseline layer (embedding, criterion, and the encoder and decoder layers through
// layers/baseline_sublayers.h).
#pragma once

#include <cstddef>
#include <utility>

#include "layers/device_allocator.h"

namespace seqbench::layers {

class EagerTensor {
 public:
  EagerTensor() = default;
  EagerTensor(DeviceAllocator& allocator, std::size_t bytes)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes)), bytes_(bytes) {}
  EagerTensor(EagerTensor&& o) noexcept
      : allocator_(o.allocator_), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  EagerTensor& operator=(EagerTensor&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = o.allocator_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  EagerTensor(const EagerTensor&) = delete;
  EagerTensor& operator=(const EagerTensor&) = delete;
  ~EagerTensor() { reset(); }

  void reset() noexcept {
    if (ptr_ != nullptr) allocator_->deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <class U>
  U* as() const {
    return static_cast<U*>(ptr_);
  }
  void* get() const { return ptr_; }
  // The requested bytes (0 when empty).
  std::size_t bytes() const { return ptr_ != nullptr ? bytes_ : 0; }

 private:
  DeviceAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace seqbench::layers
