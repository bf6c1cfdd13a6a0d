#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace seqbench {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return DTypeTraits<__half>::name;
    case DType::bf16:
      return DTypeTraits<__nv_bfloat16>::name;
    case DType::f32:
      break;
  }
  return DTypeTraits<float>::name;
}

std::size_t dtype_size(DType dtype) {
  return dtype == DType::f32 ? 4 : 2;
}

int dtype_significand_bits(DType dtype) {
  return dispatch_dtype(dtype, [](auto tag) { return DTypeTraits<decltype(tag)>::significand_bits; });
}

double unit_roundoff(DType dtype) {
  return std::ldexp(1.0, -dtype_significand_bits(dtype));
}

DType parse_dtype(std::string_view text) {
  if (text == "f32" || text == "fp32" || text == "float32" || text == "float") return DType::f32;
  if (text == "f16" || text == "fp16" || text == "float16" || text == "half") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  SEQBENCH_FAIL("unknown dtype '" << text << "': expected one of f32, f16, bf16");
}

}  // namespace seqbench
