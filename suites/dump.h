// `seqbench dump`: an experiment's inputs and outputs as .npy files, for an outside oracle
// (suites/pytorch/'s parity check) to recompute the outputs from the same inputs.
//
// A family opts in by naming ExperimentSpec::dump_variant and setting PreparedExperiment::dump:
// after `seqbench dump` has called that variant once on the prepared inputs, dump() returns host
// copies of the inputs and of what that call wrote. A family whose dump needs neither (the layers'
// separate parity instances) sets ExperimentSpec::dump_standalone instead, and the experiment is
// not prepared. Experiments without a dump_variant are counted and skipped without being
// prepared. Files land in
//   DIR/<suite>/<experiment name, '/' and ',' and '=' as '_'>/<array>.npy
// next to a manifest.json (schema "seqbench.dump/1"): suite, experiment, params, variant, and per
// array its name, role ("input" or "output"), seqbench dtype, numpy descr, shape and file. bf16 is
// stored as raw bits ('<u2'; see suites/npy.h). Integer arrays (token ids and targets, int32
// '<i4', dtype "i32"; dropout keep masks, uint8 '|u1', dtype "u8", 1 = kept) are inputs a family
// needs so that the oracle applies exactly what the kernel did: dropout cannot match torch's RNG,
// so a dropout family dumps the keep mask its kernel used (the unpacked bit mask it wrote, or the
// same Philox stream redrawn by launch_dropout_mask_u8, bit for bit the fused kernels' mask).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "core/dtype.h"

namespace seqbench {

struct DumpArray {
  std::string name;
  std::string role;  // "input" or "output"
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;  // little-endian elements, row-major
  // Integer arrays only: "u8" or "i32" (then `dtype` is unused); empty for the float dtypes.
  std::string int_type;
};

// The manifest's "dtype" ("f32", "f16", "bf16", "u8", "i32") and the numpy descr ('<f4', '<f2',
// '<u2', '|u1', '<i4') of an array; throws seqbench::Error for an unknown int_type.
std::string dump_dtype_name(const DumpArray& array);
std::string dump_descr(const DumpArray& array);

// A host copy of `buffer` (synchronous), whose element count must match `shape`.
template <class T>
DumpArray dump_array(std::string name, std::string role, const DeviceBuffer<T>& buffer,
                     std::vector<std::int64_t> shape) {
  const std::vector<T> host = buffer.copy_to_host();
  DumpArray a{std::move(name), std::move(role), DTypeTraits<T>::dtype, std::move(shape), {}, {}};
  a.bytes.resize(host.size() * sizeof(T));
  if (!host.empty()) std::memcpy(a.bytes.data(), host.data(), a.bytes.size());
  return a;
}

// Integer arrays: keep masks (uint8) and token ids / targets (int32), from the device or the host.
DumpArray dump_array(std::string name, std::string role, const DeviceBuffer<std::uint8_t>& buffer,
                     std::vector<std::int64_t> shape);
DumpArray dump_array(std::string name, std::string role, const DeviceBuffer<std::int32_t>& buffer,
                     std::vector<std::int64_t> shape);
DumpArray dump_host_array(std::string name, std::string role, const std::vector<std::uint8_t>& values,
                          std::vector<std::int64_t> shape);
DumpArray dump_host_array(std::string name, std::string role, const std::vector<std::int32_t>& values,
                          std::vector<std::int64_t> shape);

// The bit-packed keep mask of kernels/dropout.h (bit i%8 of byte i/8) as n bytes, 1 = kept: the
// uint8 mask a dropout family dumps for the oracle. Throws when `packed` holds fewer than
// ceil(n/8) bytes.
std::vector<std::uint8_t> unpack_keep_mask(const std::vector<std::uint8_t>& packed, std::size_t n);

struct DumpOptions {
  std::vector<std::string> suites;  // empty: all
  std::string filter;               // ECMAScript regex over "suite/experiment"
  std::filesystem::path out_dir;
  bool quick = false;
};

struct DumpResult {
  std::size_t dumped = 0;   // experiments written
  std::size_t no_dump = 0;  // selected experiments whose family does not dump (yet)
  std::size_t files = 0;    // .npy files written
  // "<suite>/<experiment>: <error>" of each experiment whose prepare, run or dump threw: it is
  // skipped (no folder) and the others are still dumped; the command then exits non-zero.
  std::vector<std::string> failed;
};

// The folder name of an experiment: "layernorm_fwd/bf16/tokens=4096,hidden=1024" ->
// "layernorm_fwd_bf16_tokens_4096_hidden_1024".
std::string dump_folder_name(const std::string& experiment);

// Writes one experiment's folder: every array as DIR/<name>.npy, then DIR/manifest.json (the
// folder is complete once the manifest is there). Host only; returns the number of .npy files.
// Throws seqbench::Error when the folder cannot be created, for duplicate array names, a role
// other than "input"/"output", or bytes that do not match the shape.
std::size_t write_dump_folder(const std::filesystem::path& dir, const std::string& suite,
                              const std::string& experiment, const nlohmann::json& params,
                              const std::string& variant, const std::vector<DumpArray>& arrays);

// Throws seqbench::Error without a GPU (before writing anything), for an unknown suite, a bad regex
// or an output folder that cannot be written. An experiment that throws is recorded in
// DumpResult::failed and the others are dumped.
DumpResult dump_experiments(const DumpOptions& options, std::ostream& log);

}  // namespace seqbench
