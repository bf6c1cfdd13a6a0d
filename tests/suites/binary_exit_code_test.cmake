# cmake -P test of the real binary's exit status, which is part of its interface (README, "The
# `seqbench` command"): -DBINARY=<seqbench> -DEXPECT=<status> -DARGS=<arguments, ;-separated>
# [-DWORK=<a folder that must stay absent: nothing may be written>]. WILL_FAIL would pass on any
# non-zero status, a crash included.
if(DEFINED WORK)
  file(REMOVE_RECURSE "${WORK}")
endif()
execute_process(COMMAND ${BINARY} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE ";" " " shown "${ARGS}")
if(NOT "${rc}" STREQUAL "${EXPECT}")
  message(FATAL_ERROR "seqbench ${shown}: exit status ${rc}, expected ${EXPECT}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED WORK AND EXISTS "${WORK}")
  message(FATAL_ERROR "seqbench ${shown} exited ${rc} but wrote ${WORK}")
endif()
message(STATUS "seqbench ${shown}: exit ${rc}: ${err}")
