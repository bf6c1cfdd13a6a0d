#include "core/build_info.h"

namespace seqbench {

BuildInfo build_info() {
  using namespace build_info_values;
  return BuildInfo{kVersion,    kGitSha,     kGitDirty,          kSourceHash,
                   kBuildType,  kBuildFlags, kCudaArchitectures, kCudaCompilerVersion,
                   kCxxCompiler};
}

}  // namespace seqbench
