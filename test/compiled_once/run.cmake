# Checks that a mutex type declared `extern template` is compiled only where it is
# instantiated (README, "Compile a mutex type once"): the file that locks defines no
# acquisition loop, the file with the explicit instantiation does. Fails if the loop
# moves back into the class (an inline member, which every file compiles again).
#   cmake -DNM=nm -DUSER=<compiled_once.cpp's object> -DINSTANCE=<order_mutex.cpp's object> -P run.cmake
function(defines_acquire_loop object out_var)
  execute_process(COMMAND ${NM} -C --defined-only ${object}
                  RESULT_VARIABLE status OUTPUT_VARIABLE symbols ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} ${object} failed: ${err}")
  endif()
  if(symbols MATCHES "basic_distributed_mutex<[^\n]*>::acquire_loop")
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    set(${out_var} FALSE PARENT_SCOPE)
  endif()
endfunction()

defines_acquire_loop(${INSTANCE} in_instance)
if(NOT in_instance)
  message(FATAL_ERROR "${INSTANCE}: the explicit instantiation defines no acquisition loop")
endif()
defines_acquire_loop(${USER} in_user)
if(in_user)
  message(FATAL_ERROR "${USER}: compiles the acquisition loop although the mutex type is extern template")
endif()
message(STATUS "the acquisition loop is compiled in the explicit instantiation only")
