# ctest driver of arith.libtorch_fingerprints (tests/CMakeLists.txt): the libtorch trainer built for
# x86-64-v3 with GCC's -ffp-contract=fast, where the compiler may fuse any product into an
# addition, and its short --portable run (examples/libtorch/run_fingerprints.cmake), whose trained
# weights must still be the committed fingerprints (tests/fingerprints/train_libtorch.txt): the
# library's arithmetic does not depend on the contraction setting (docs/algorithms.md,
# "Arithmetic"). Needs a CPU with FMA and AVX2 (training under an emulator would take too long):
# without one it prints "arith: skipped" (a skip for ctest), or fails when REQUIRED is on.
#
#   cmake -DSOURCE_ROOT=<repo> -DBINARY_DIR=<dir> -DCXX=<compiler> -DGENERATOR=<generator>
#         [-DLAUNCHER=ccache] [-DREQUIRED=ON] -P run_fingerprints.cmake
foreach(_var SOURCE_ROOT BINARY_DIR CXX GENERATOR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "arith: ${_var} is not set")
  endif()
endforeach()

include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")
set(ARCH libtorch_fingerprints)
arith_cpu_is_x86_64_v3(_native)
if(NOT _native)
  arith_skip("this CPU has no FMA or AVX2 (x86-64-v3)")
  return()
endif()

set(_args -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=${CXX}"
          "-DCMAKE_CXX_FLAGS=-march=x86-64-v3 -ffp-contract=fast" -DGRADCOMP_ENABLE_CUDA=OFF
          -DGRADCOMP_BUILD_TESTS=OFF -DGRADCOMP_BUILD_EXAMPLES=ON -DGRADCOMP_BUILD_BENCHMARKS=OFF
          -DGRADCOMP_REQUIRE_TORCH=ON -DGRADCOMP_WERROR=ON)
if(DEFINED LAUNCHER AND NOT LAUNCHER STREQUAL "")
  list(APPEND _args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
arith_run(configure ${CMAKE_COMMAND} -S ${SOURCE_ROOT} -B ${BINARY_DIR} -G ${GENERATOR} ${_args})
arith_run(build ${CMAKE_COMMAND} --build ${BINARY_DIR} --target train_libtorch)
execute_process(
  COMMAND ${CMAKE_COMMAND} -DTRAINER=${BINARY_DIR}/examples/libtorch/train_libtorch -DWORKDIR=${BINARY_DIR}/run
          -DCACHE=${BINARY_DIR}/idx -DFINGERPRINTS=${SOURCE_ROOT}/tests/fingerprints/train_libtorch.txt
          -P ${SOURCE_ROOT}/examples/libtorch/run_fingerprints.cmake
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
message("${_out}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "arith.libtorch_fingerprints: the fingerprints differ (or the run failed)")
endif()
if(_out MATCHES "apt-get install dataset-fashion-mnist")
  # The data set is missing: run_fingerprints.cmake returned without checking anything.
  arith_skip("no Fashion-MNIST data (apt-get install dataset-fashion-mnist)")
endif()
