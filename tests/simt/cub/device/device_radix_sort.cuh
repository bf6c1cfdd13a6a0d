// cub::DeviceRadixSort::SortPairs for the simt build (tests/simt/simt.h): a stable sort on key bits
// [begin_bit, end_bit) only, as CUB's radix sort (bits outside the range do not order anything).
// The temporary storage it asks for is scribbled over at every call, and every array must lie
// inside one device allocation, so that a caller that shares the storage with its operands, or
// sizes an array short, is seen.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/simt/runtime_state.h"

namespace cub {

struct DeviceRadixSort {
  template <class Key, class Value, class NumItems>
  static cudaError_t SortPairs(void* temp_storage, std::size_t& temp_bytes, const Key* keys_in, Key* keys_out,
                               const Value* values_in, Value* values_out, NumItems num_items,
                               int begin_bit = 0, int end_bit = sizeof(Key) * 8,
                               cudaStream_t stream = nullptr) {
    (void)stream;
    const auto n = static_cast<std::size_t>(num_items);
    // About what CUB asks for: a copy of the pairs and the digit histograms.
    const std::size_t needed = n * (sizeof(Key) + sizeof(Value)) + 4096;
    if (temp_storage == nullptr) {
      temp_bytes = needed;
      return cudaSuccess;
    }
    using simt::detail::runtime_check_device_range;
    if (temp_bytes < needed) return cudaErrorInvalidValue;
    if (begin_bit < 0 || end_bit > static_cast<int>(sizeof(Key) * 8) || begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    for (const cudaError_t e :
         {runtime_check_device_range("SortPairs", "temp", temp_storage, temp_bytes),
          runtime_check_device_range("SortPairs", "keys_in", keys_in, n * sizeof(Key)),
          runtime_check_device_range("SortPairs", "keys_out", keys_out, n * sizeof(Key)),
          runtime_check_device_range("SortPairs", "values_in", values_in, n * sizeof(Value)),
          runtime_check_device_range("SortPairs", "values_out", values_out, n * sizeof(Value))}) {
      if (e != cudaSuccess) return e;
    }
    const Key* kin = keys_in;
    const Value* vin = values_in;
    std::vector<Key> keys(kin, kin + n);
    std::vector<Value> values(vin, vin + n);
    std::memset(temp_storage, 0xff, temp_bytes);
    const int bits = end_bit - begin_bit;
    const auto digit = [&](Key k) {
      const auto u = static_cast<unsigned long long>(k) >> begin_bit;
      return bits >= 64 ? u : u & ((1ull << bits) - 1);
    };
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return digit(keys[a]) < digit(keys[b]); });
    for (std::size_t i = 0; i < n; ++i) {
      keys_out[i] = keys[order[i]];
      values_out[i] = values[order[i]];
    }
    return cudaSuccess;
  }
};

}  // namespace cub
