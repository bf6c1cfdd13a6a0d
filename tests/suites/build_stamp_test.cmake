# cmake -P test of cmake/WriteBuildInfo.cmake outside a git repository (the GPU machine's copy of the
# tree): the sha and dirty flag come from BUILD_STAMP (tools/stamp.sh); a malformed or missing stamp
# leaves the sha "unknown". -DREPO=<source root> -DWORK=<a scratch folder outside any repository>.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(build_info expect_sha expect_dirty expect_hash)
  execute_process(COMMAND ${CMAKE_COMMAND} -DOUT=${WORK}/build_info.cpp -DSOURCE_DIR=${WORK} -DVERSION=0
                          -P ${REPO}/cmake/WriteBuildInfo.cmake RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "WriteBuildInfo failed: ${err}")
  endif()
  file(READ "${WORK}/build_info.cpp" text)
  if(NOT text MATCHES "kGitSha = \"${expect_sha}\";" OR NOT text MATCHES "kGitDirty = ${expect_dirty};"
     OR NOT text MATCHES "kSourceHash = \"${expect_hash}\";")
    message(FATAL_ERROR "expected sha ${expect_sha}, dirty ${expect_dirty}, source hash '${expect_hash}'; got:\n${text}")
  endif()
endfunction()
build_info("unknown" "false" "")
set(sha "0123456789abcdef0123456789abcdef01234567")
file(WRITE "${WORK}/BUILD_STAMP" "git_sha=${sha}\ngit_dirty=true\nsource_hash=abc\n")
build_info("${sha}" "true" "abc")
file(WRITE "${WORK}/BUILD_STAMP" "git_sha=0123\ngit_dirty=true\n")
build_info("unknown" "false" "")
file(REMOVE_RECURSE "${WORK}")
message(STATUS "build stamp: ok")
