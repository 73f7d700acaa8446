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
# The README's configure line, then install without building: the headers and the
# package, the tool skipped (it was not built; tool_installs checks it installed).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib -DCMAKE_BUILD_TYPE=Release -DDISTLOCK_BUILD_TESTS=OFF
    -DDISTLOCK_BUILD_EXAMPLES=OFF -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib --prefix ${prefix})
# A copy of Asio outside the system's include path, named to the consumer's
# find_package: the package must pass that directory on.
find_path(system_asio asio.hpp PATHS ${ASIO_DIR} /usr/include /usr/local/include REQUIRED) # script mode: no default paths
set(asio_copy ${WORK_DIR}/asio/include)
file(COPY ${system_asio}/asio.hpp ${system_asio}/asio DESTINATION ${asio_copy})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/test/package/consumer -B ${WORK_DIR}/consumer -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DDISTLOCK_ASIO_INCLUDE_DIR=${asio_copy} -DEXPECTED_ASIO_DIR=${asio_copy})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer --parallel 2)
run(${WORK_DIR}/consumer/consumer)
run(${WORK_DIR}/consumer/single_consumer)
if(EXISTS ${WORK_DIR}/consumer/redis_consumer)
  run(${WORK_DIR}/consumer/redis_consumer)
endif()
if(EXISTS ${WORK_DIR}/consumer/postgres_consumer)
  run(${WORK_DIR}/consumer/postgres_consumer)
endif()
if(EXISTS ${WORK_DIR}/consumer/etcd_consumer)
  run(${WORK_DIR}/consumer/etcd_consumer)
endif()
if(EXISTS ${WORK_DIR}/consumer/zookeeper_consumer)
  run(${WORK_DIR}/consumer/zookeeper_consumer)
endif()
