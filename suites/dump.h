// `seqbench dump`: an experiment's inputs and outputs as .npy files, for an outside oracle
// (suites/pytorch/'s parity check) to recompute the outputs from the same inputs.
//
// A family opts in by naming ExperimentSpec::dump_variant and setting PreparedExperiment::dump:
// after `seqbench dump` has called that variant once on the prepared inputs, dump() returns host
// copies of the inputs and of what that call wrote. Experiments without a dump_variant are
// counted and skipped without being prepared. Files land in
//   DIR/<suite>/<experiment name, '/' and ',' and '=' as '_'>/<array>.npy
// next to a manifest.json (schema "seqbench.dump/1"): suite, experiment, params, variant, and per
// array its name, role ("input" or "output"), seqbench dtype, numpy descr, shape and file. bf16 is
// stored as raw bits ('<u2'; see suites/npy.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iosfwd>
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
};

// A host copy of `buffer` (synchronous), whose element count must match `shape`.
template <class T>
DumpArray dump_array(std::string name, std::string role, const DeviceBuffer<T>& buffer,
                     std::vector<std::int64_t> shape) {
  const std::vector<T> host = buffer.copy_to_host();
  DumpArray a{std::move(name), std::move(role), DTypeTraits<T>::dtype, std::move(shape), {}};
  a.bytes.resize(host.size() * sizeof(T));
  if (!host.empty()) std::memcpy(a.bytes.data(), host.data(), a.bytes.size());
  return a;
}

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
};

// The folder name of an experiment: "layernorm_fwd/bf16/tokens=4096,hidden=1024" ->
// "layernorm_fwd_bf16_tokens_4096_hidden_1024".
std::string dump_folder_name(const std::string& experiment);

// Throws seqbench::Error without a GPU (before writing anything), for an unknown suite, a bad regex
// or an output folder that cannot be written.
DumpResult dump_experiments(const DumpOptions& options, std::ostream& log);

}  // namespace seqbench
