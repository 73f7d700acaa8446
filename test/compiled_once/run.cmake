# Checks that what a program compiles once is compiled only there (README, "Compile a
# mutex type once" and "Separate compilation"): the file that locks defines neither
# the acquisition loop of its extern-template mutex type nor the members of the
# in-process store and its lifetime that constructing the store uses (declared extern
# by DISTLOCK_SEPARATE_COMPILATION); the file with the explicit instantiations and
# distlock/memory/src.hpp defines them all. Fails if one of them moves back into a
# class body the headers compile everywhere, or out of the lists of instances.
#   cmake -DNM=nm -DUSER=<compiled_once.cpp's object> -DINSTANCE=<order_mutex.cpp's object> -P run.cmake
set(compiled_once_patterns
    "basic_distributed_mutex<[^\n]*>::acquire_loop"
    "distlock::memory::basic_store<void>::basic_store"
    "distlock::memory::basic_store<void>::core::wake_all"
    "distlock::backend::basic_lifetime<void>::shut")

function(defined_symbols object out_var)
  execute_process(COMMAND ${NM} -C --defined-only ${object}
                  RESULT_VARIABLE status OUTPUT_VARIABLE symbols ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} ${object} failed: ${err}")
  endif()
  set(${out_var} "${symbols}" PARENT_SCOPE)
endfunction()

defined_symbols(${INSTANCE} in_instance)
defined_symbols(${USER} in_user)
foreach(pattern IN LISTS compiled_once_patterns)
  if(NOT in_instance MATCHES "${pattern}")
    message(FATAL_ERROR "${INSTANCE}: the file that compiles the instances defines nothing like ${pattern}")
  endif()
  if(in_user MATCHES "${pattern}")
    message(FATAL_ERROR "${USER}: compiles ${pattern} although it is compiled once elsewhere")
  endif()
endforeach()
message(STATUS "the acquisition loop, the store and its lifetime are compiled once")
