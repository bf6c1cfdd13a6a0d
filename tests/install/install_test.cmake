# cmake -P tests/install/install_test.cmake: `cmake --install` of a built tree into a fresh prefix,
# then the package as a user meets it: the installed layout, and tests/install/consumer configured
# with find_package(seqbench), built from every installed header and run.
#
# -D arguments (tests/CMakeLists.txt passes them): BUILD_DIR (the built tree), SOURCE_DIR (the
# project), WORK_DIR (emptied first), GENERATOR, CXX_COMPILER, CUDA_TOOLKIT_ROOT, EIGEN3_DIR (where
# the build found them, so the consumer finds the same), VERSION (the project's).
foreach(arg BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER CUDA_TOOLKIT_ROOT EIGEN3_DIR VERSION)
  if(NOT DEFINED ${arg} OR "${${arg}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: -D${arg}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (exit ${rc})\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")

# The layout: exactly the public headers (*.h) of the five library folders, nothing of suites/ or
# tests/, the package files, the libraries and the command.
set(folders core reference kernels layers trainer)
file(GLOB installed_dirs RELATIVE "${prefix}/include/seqbench" "${prefix}/include/seqbench/*")
list(SORT installed_dirs)
set(expected_dirs ${folders})
list(SORT expected_dirs)
if(NOT installed_dirs STREQUAL expected_dirs)
  message(FATAL_ERROR "install test: include/seqbench holds '${installed_dirs}', expected '${expected_dirs}'")
endif()
set(all_headers "")
foreach(folder IN LISTS folders)
  file(GLOB source_headers RELATIVE "${SOURCE_DIR}/${folder}" "${SOURCE_DIR}/${folder}/*.h")
  file(GLOB_RECURSE installed RELATIVE "${prefix}/include/seqbench/${folder}" "${prefix}/include/seqbench/${folder}/*")
  list(SORT source_headers)
  list(SORT installed)
  if(NOT source_headers STREQUAL installed)
    message(FATAL_ERROR "install test: include/seqbench/${folder} holds '${installed}', "
                        "expected the folder's headers '${source_headers}'")
  endif()
  foreach(header IN LISTS installed)
    string(APPEND all_headers "#include \"${folder}/${header}\"\n")
  endforeach()
  if(NOT EXISTS "${prefix}/lib/libseqbench_${folder}.a" AND NOT EXISTS "${prefix}/lib64/libseqbench_${folder}.a")
    message(FATAL_ERROR "install test: libseqbench_${folder}.a was not installed under ${prefix}/lib")
  endif()
endforeach()
if(NOT EXISTS "${prefix}/bin/seqbench")
  message(FATAL_ERROR "install test: bin/seqbench was not installed")
endif()

# Every installed header, in one translation unit of the consumer.
set(all_headers_tu "${WORK_DIR}/all_headers.cpp")
file(WRITE "${all_headers_tu}" "// Written by tests/install/install_test.cmake: every installed header.\n${all_headers}")

set(consumer_build "${WORK_DIR}/consumer")
run_step("configuring the consumer (find_package(seqbench ${VERSION}))"
         "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install/consumer" -B "${consumer_build}" -G "${GENERATOR}"
         "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}"
         "-DCUDAToolkit_ROOT=${CUDA_TOOLKIT_ROOT}" "-DEigen3_DIR=${EIGEN3_DIR}"
         "-DSEQBENCH_ALL_HEADERS=${all_headers_tu}")
run_step("building the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
run_step("running the consumer" "${consumer_build}/seqbench_consumer")
message("${step_output}")
if(NOT step_output MATCHES "seqbench consumer: ok")
  message(FATAL_ERROR "install test: the consumer did not print 'seqbench consumer: ok'")
endif()

# The installed command runs from its prefix (its run path survives the install).
run_step("bin/seqbench info" "${prefix}/bin/seqbench" info)
if(NOT step_output MATCHES "${VERSION}")
  message(FATAL_ERROR "install test: bin/seqbench info does not name version ${VERSION}:\n${step_output}")
endif()
message("install test: passed (${prefix})")
