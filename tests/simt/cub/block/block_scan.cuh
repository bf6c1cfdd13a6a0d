// cub::BlockScan for the simt build (tests/simt/simt.h): the sums the kernels take from it,
// computed through shared storage and block barriers, with CUB's thread order (linear thread id).
#pragma once

namespace cub {

template <class T, int kBlockThreads>
class BlockScan {
 public:
  struct TempStorage {
    T values[kBlockThreads];
  };

  explicit BlockScan(TempStorage& storage) : storage_(storage) {}

  // output = the sum over threads before this one; aggregate = the sum over the block.
  void ExclusiveSum(T input, T& output, T& aggregate) {
    const unsigned self = linear_id();
    storage_.values[self] = input;
    __syncthreads();
    T before{}, total{};
    for (int t = 0; t < kBlockThreads; ++t) {
      if (static_cast<unsigned>(t) < self) before += storage_.values[t];
      total += storage_.values[t];
    }
    __syncthreads();  // the storage may be reused by the next call
    output = before;
    aggregate = total;
  }

  void ExclusiveSum(T input, T& output) {
    T aggregate;
    ExclusiveSum(input, output, aggregate);
  }

  void InclusiveSum(T input, T& output, T& aggregate) {
    ExclusiveSum(input, output, aggregate);
    output += input;
  }

  void InclusiveSum(T input, T& output) {
    T aggregate;
    InclusiveSum(input, output, aggregate);
  }

 private:
  static unsigned linear_id() {
    if (blockDim.x * blockDim.y * blockDim.z != static_cast<unsigned>(kBlockThreads))
      ::simt::detail::fault("cub::BlockScan<" + std::to_string(kBlockThreads) + "> in a block of " +
                            std::to_string(blockDim.x * blockDim.y * blockDim.z) + " threads");
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }

  TempStorage& storage_;
};

}  // namespace cub
