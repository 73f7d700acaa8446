# Compiles SOURCE (expected to fail) and checks what a user would read: the first
# error matches EXPECT, and there are at most MAX_ERRORS errors in all (no cascade).
#   cmake -DCOMPILER=g++ -DSTANDARD=gnu++20 -DINCLUDE=include -DSOURCE=x.cpp
#         -DEXPECT=regex -DMAX_ERRORS=1 -P run.cmake
execute_process(
  COMMAND ${COMPILER} -std=${STANDARD} -fsyntax-only -I${INCLUDE} ${SOURCE}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
string(APPEND out "${err}")
if(status EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be refused")
endif()
# One diagnostic per line that says "error: " (the source lines quoted after it do not).
get_filename_component(name ${SOURCE} NAME_WE)
set(log ${CMAKE_CURRENT_BINARY_DIR}/compile_error_${name}.log)
file(WRITE ${log} "${out}")
file(STRINGS ${log} errors REGEX "error: ")
list(LENGTH errors count)
if(count EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: no error message at all:\n${out}")
endif()
list(GET errors 0 first)
if(NOT first MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE}: the first error does not say '${EXPECT}':\n${first}")
endif()
if(count GREATER MAX_ERRORS)
  message(FATAL_ERROR "${SOURCE}: ${count} errors, at most ${MAX_ERRORS} expected:\n${out}")
endif()
message(STATUS "${SOURCE}: ${count} error(s), the first: ${first}")
