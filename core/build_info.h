// Facts about this build, captured at build time (not configure time), for `seqbench info` and
// every report's meta.
#pragma once

#include <string>

namespace seqbench {

namespace build_info_values {
extern const char* const kVersion;
extern const char* const kGitSha;
extern const bool kGitDirty;
extern const char* const kSourceHash;
extern const char* const kBuildType;
extern const char* const kBuildFlags;
extern const char* const kCudaArchitectures;
extern const char* const kCudaCompilerVersion;
extern const char* const kCxxCompiler;
}  // namespace build_info_values

struct BuildInfo {
  std::string version;
  std::string git_sha;      // 40 hex digits, or "unknown" outside a git checkout
  bool git_dirty = false;   // uncommitted changes outside reports/
  std::string source_hash;  // tools/source_hash.sh of the tree built; empty when unknown
  std::string build_type;
  std::string flags;
  std::string cuda_architectures;
  std::string cuda_compiler_version;
  std::string cxx_compiler;
};

BuildInfo build_info();

}  // namespace seqbench
