# `cmake --install` of a build tree where the tool was built (this one): the tool and
# its man page land under the prefix, and the installed tool runs.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR})
foreach(installed bin/distlock share/man/man1/distlock.1 share/bash-completion/completions/distlock
        include/distlock/distlock.hpp
        lib/cmake/distlock/distlockConfig.cmake)
  if(NOT EXISTS ${WORK_DIR}/${installed})
    message(FATAL_ERROR "cmake --install did not install ${installed}")
  endif()
endforeach()
run(${WORK_DIR}/bin/distlock --help)
if(NOT last_output MATCHES "usage: distlock run")
  message(FATAL_ERROR "the installed tool's --help: ${last_output}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
