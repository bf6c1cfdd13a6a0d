// NumPy .npy files (format version 1.0), written so that an outside oracle (suites/pytorch/'s
// parity check, numpy.load) can read seqbench's inputs and outputs bit for bit.
//
// Layout: the 6-byte magic "\x93NUMPY", version bytes 1 and 0, a little-endian uint16 header
// length, then the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (4096, 1024), }
// padded with spaces and ended by '\n' so that magic + version + length + header is a multiple of
// 64 bytes; then the raw little-endian data in C (row-major) order.
//
// Element types: float '<f4', __half '<f2'. bfloat16 has no numpy dtype, so it is stored as its raw
// bits, '<u2' (lossless; a reader gets the float value as uint32(bits) << 16 viewed as float32),
// and the dump's manifest says "bf16" for such an array. Integer arrays (suites/dump.h): uint8
// '|u1' (dropout keep masks) and int32 '<i4' (token ids, targets), as numpy names them. Host byte order must
// be little-endian, as on every CUDA host (checked at compile time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace seqbench {

// '<f4', '<f2' or '<u2' (bf16 bits); throws seqbench::Error for another dtype.
std::string_view npy_descr(DType dtype);

// The complete header (magic through the final '\n'); its size is a multiple of 64. Throws
// seqbench::Error for a negative dimension or a header longer than format 1.0 allows (65535).
std::string npy_header(std::string_view descr, std::span<const std::int64_t> shape);

// Writes header + `bytes` of `data` atomically (write_file_atomic). Throws seqbench::Error when
// `bytes` is not the product of `shape` times the element size of `descr` ('<f4'/'<i4' 4,
// '<f2'/'<u2' 2, '|u1' 1).
void write_npy(const std::filesystem::path& path, std::string_view descr, std::span<const std::int64_t> shape,
               const void* data, std::size_t bytes);

}  // namespace seqbench
