# Installs distlock to a temporary prefix and builds a consumer project against it
# with find_package(distlock). The consumer compiles the library's headers with
# -Wall -Wextra -Werror -O2 (see consumer/CMakeLists.txt): a warning a user would see
# fails this test.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib -DDISTLOCK_BUILD_TESTS=OFF -DDISTLOCK_BUILD_EXAMPLES=OFF -DDISTLOCK_BUILD_CLI=OFF -DCMAKE_INSTALL_PREFIX=${prefix})
run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/test/package/consumer -B ${WORK_DIR}/consumer -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/consumer)
if(EXISTS ${WORK_DIR}/consumer/redis_consumer)
  run(${WORK_DIR}/consumer/redis_consumer)
endif()
if(EXISTS ${WORK_DIR}/consumer/postgres_consumer)
  run(${WORK_DIR}/consumer/postgres_consumer)
endif()
