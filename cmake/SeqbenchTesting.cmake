# seqbench_add_test(<name> SOURCES <files...> LABEL cpu|gpu [LIBS <targets...>] [RUN_SERIAL])
#
# One GoogleTest executable whose tests ctest discovers one by one, each carrying the label.
# A gpu-labelled test must call SEQBENCH_REQUIRE_GPU() (tests/common/gpu_test.h) first, so that
# on a machine without a device it is reported as skipped, with the reason, and not as passed.
include(GoogleTest)

# seqbench_gpu_tests: every gpu-labelled test binary, so that tools/prebuild.sh can build those and
# `seqbench` alone for a GPU machine (the cpu tests run in CI; a lease's time is kept for the GPU).
add_custom_target(seqbench_gpu_tests)

function(seqbench_add_test name)
  cmake_parse_arguments(ARG "RUN_SERIAL" "LABEL" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_LABEL MATCHES "^(cpu|gpu)$")
    message(FATAL_ERROR "seqbench_add_test(${name}): LABEL must be cpu or gpu, got '${ARG_LABEL}'")
  endif()
  add_executable(${name} ${ARG_SOURCES})
  if(ARG_LABEL STREQUAL "gpu")
    add_dependencies(seqbench_gpu_tests ${name})
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} seqbench_test_common GTest::gtest_main)
  seqbench_warnings(${name})
  # RUN_SERIAL (ARG_RUN_SERIAL is TRUE or FALSE): a test that times the GPU runs alone, not beside
  # other tests' kernels (ctest -j).
  # PRE_TEST: discovery runs when ctest runs, so the build itself never executes test binaries.
  # DISCOVERY_TIMEOUT: a binary whose --gtest_list_tests outlasts it stops the whole ctest run (0
  # tests run); 5 s, the default, is tight for a binary loading the CUDA libraries on a busy machine.
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS ${ARG_LABEL} SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" RUN_SERIAL ${ARG_RUN_SERIAL})
endfunction()
