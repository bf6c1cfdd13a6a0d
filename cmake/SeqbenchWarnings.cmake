# seqbench_warnings(<target>): -Wall -Wextra for C++ and for the host side of CUDA sources, and
# nvcc's own diagnostics; -Werror with SEQBENCH_WERROR (CI sets it).
function(seqbench_warnings target)
  set(host_flags -Wall -Wextra)
  if(SEQBENCH_WERROR)
    list(APPEND host_flags -Werror)
  endif()
  list(JOIN host_flags "," host_csv)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${host_flags}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${host_csv}>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${SEQBENCH_WERROR}>>:--Werror=all-warnings>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${SEQBENCH_PTXAS_VERBOSE}>>:-Xptxas=-v>)
endfunction()
