# `cmake --install <build> --prefix <dir>`: the five libraries as one CMake package, their headers,
# and the seqbench command.
#
#   find_package(seqbench 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE seqbench::layers)   # or ::core ::reference ::kernels ::trainer
#
# Headers go to include/seqbench/<folder>/, so that the spelling the sources use
# (#include "kernels/layernorm.h") is the users' spelling too, and the folder names cannot clash
# with another project's. The .cuh files are device-side internals of the .cu files and stay out
# (no public header includes one). The libraries are static, built for this build's
# CMAKE_CUDA_ARCHITECTURES (their device code runs on those GPUs only), without relocatable device
# code, so a C++-only consumer links them with its host compiler. The harness library (suites/) is
# the command's, not an API, and is not installed. tests/install checks the whole round trip.
include(CMakePackageConfigHelpers)

set(seqbench_installed_folders core reference kernels layers trainer)
set(seqbench_package_dir "${CMAKE_INSTALL_LIBDIR}/cmake/seqbench")

set(seqbench_installed_targets "")
foreach(folder IN LISTS seqbench_installed_folders)
  set_target_properties(seqbench_${folder} PROPERTIES EXPORT_NAME ${folder})
  list(APPEND seqbench_installed_targets seqbench_${folder})
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${folder}/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/seqbench/${folder}"
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(TARGETS ${seqbench_installed_targets} EXPORT seqbench_targets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT seqbench_targets NAMESPACE seqbench:: FILE seqbenchTargets.cmake
        DESTINATION "${seqbench_package_dir}")

# The command keeps the run path to the libraries it was linked against outside the build tree
# (Google Benchmark's, when it came from the offline bundle rather than the system).
set_target_properties(seqbench PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS seqbench RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/seqbenchConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/seqbenchConfig.cmake"
                              INSTALL_DESTINATION "${seqbench_package_dir}")
# 0.x: a minor version may change the API, so a request for 0.1 accepts 0.1.* only.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/seqbenchConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/seqbenchConfig.cmake" "${PROJECT_BINARY_DIR}/seqbenchConfigVersion.cmake"
        DESTINATION "${seqbench_package_dir}")
