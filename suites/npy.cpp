#include "suites/npy.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "suites/report.h"

namespace seqbench {

static_assert(std::endian::native == std::endian::little, "the .npy writer stores the host's bytes as '<'");

std::string_view npy_descr(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "<f4";
    case DType::f16:
      return "<f2";
    case DType::bf16:
      return "<u2";  // raw bits: numpy has no bfloat16
  }
  SEQBENCH_FAIL("npy: no .npy element type for dtype " << static_cast<int>(dtype));
}

namespace {
std::size_t element_size(std::string_view descr) {
  if (descr == "<f4") return 4;
  if (descr == "<f2" || descr == "<u2") return 2;
  if (descr == "|u1") return 1;
  if (descr == "<i4") return 4;
  SEQBENCH_FAIL("npy: unsupported descr '" << descr << "' (expected <f4, <f2, <u2, |u1 or <i4)");
}
}  // namespace

std::string npy_header(std::string_view descr, std::span<const std::int64_t> shape) {
  element_size(descr);  // validates
  std::string dict = "{'descr': '";
  dict += descr;
  dict += "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    SEQBENCH_REQUIRE(shape[i] >= 0, "npy: dimension " << i << " is " << shape[i] << ", not >= 0");
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += shape.size() == 1 ? "," : ", ";
  }
  dict += "), }";
  constexpr std::size_t kPreamble = 10;  // magic 6 + version 2 + header length 2
  const std::size_t total = (kPreamble + dict.size() + 1 + 63) / 64 * 64;
  const std::size_t header_len = total - kPreamble;
  SEQBENCH_REQUIRE(header_len <= 65535,
                   "npy: header of " << header_len << " bytes exceeds format 1.0's 65535");
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header_len & 0xFF);
  out += static_cast<char>(header_len >> 8);
  return out + dict;
}

void write_npy(const std::filesystem::path& path, std::string_view descr, std::span<const std::int64_t> shape,
               const void* data, std::size_t bytes) {
  std::size_t expected = element_size(descr);
  for (const std::int64_t d : shape) expected *= static_cast<std::size_t>(d < 0 ? 0 : d);
  std::string text = npy_header(descr, shape);
  SEQBENCH_REQUIRE(bytes == expected, "npy: '" << path.string() << "': " << bytes
                                               << " bytes of data for shape and " << descr << " needing "
                                               << expected);
  SEQBENCH_REQUIRE(data != nullptr || bytes == 0, "npy: '" << path.string() << "': null data");
  const std::size_t header = text.size();
  text.resize(header + bytes);
  if (bytes > 0) std::memcpy(text.data() + header, data, bytes);
  write_file_atomic(path, text);
}

}  // namespace seqbench
