# ctest driver of the tests arith.x86_64_v3 and arith.aarch64 (tests/arith/CMakeLists.txt):
# configures and builds the bitwise tests for ARCH, runs them (under qemu for aarch64), then
# requires scripts/find_fused.py to find no fused multiply-add in the library's functions.
# Without the target's tools (for x86_64_v3 a CPU with FMA, or qemu-x86_64; for aarch64 the cross
# compiler and qemu-aarch64) it prints "arith: skipped" (a skip for ctest), or fails when REQUIRED
# is on.
#
#   cmake -DTARGET=x86_64_v3|aarch64 -DSOURCE_ROOT=<repo> -DBINARY_DIR=<dir> -DDOCTEST_INCLUDE_DIR=<dir>
#         -DCXX=<compiler> -DGENERATOR=<generator> -DPYTHON=<python3> [-DLAUNCHER=ccache] [-DREQUIRED=ON]
#         -P run.cmake
foreach(_var ARCH SOURCE_ROOT BINARY_DIR DOCTEST_INCLUDE_DIR CXX GENERATOR PYTHON)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "arith: ${_var} is not set")
  endif()
endforeach()

include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")

set(_args -DGRADCOMP_SOURCE_ROOT=${SOURCE_ROOT} -DDOCTEST_INCLUDE_DIR=${DOCTEST_INCLUDE_DIR})
if(DEFINED LAUNCHER AND NOT LAUNCHER STREQUAL "")
  list(APPEND _args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
set(_emulator "")
set(_objdump objdump)
if(ARCH STREQUAL "x86_64_v3")
  # The tests run on this CPU when it has what x86-64-v3 assumes (AVX2 and FMA among them), else
  # under qemu-user's emulation of a CPU that has (qemu-x86_64 -cpu max).
  arith_cpu_is_x86_64_v3(_native)
  if(NOT _native)
    find_program(_qemu_x86 qemu-x86_64)
    if(NOT _qemu_x86)
      arith_skip("this CPU has no FMA or AVX2 (x86-64-v3), and there is no qemu-x86_64")
      return()
    endif()
    set(_emulator ${_qemu_x86} -cpu max)
  endif()
  list(APPEND _args -DCMAKE_CXX_COMPILER=${CXX} "-DCMAKE_CXX_FLAGS=-march=x86-64-v3 -ffp-contract=fast")
elseif(ARCH STREQUAL "aarch64")
  find_program(_cross aarch64-linux-gnu-g++)
  find_program(_qemu qemu-aarch64)
  find_program(_objdump_cross aarch64-linux-gnu-objdump)
  if(NOT _cross OR NOT _qemu OR NOT _objdump_cross)
    arith_skip("no aarch64 cross compiler or qemu-user (Debian: g++-aarch64-linux-gnu qemu-user)")
    return()
  endif()
  # ARMv8.0 with the CRC32 instructions (optional in 8.0, part of 8.1): the CRC-32C's instruction
  # path is compiled and must be the one in use (tests/wire/test_crc32c.cpp).
  list(APPEND _args "-DCMAKE_TOOLCHAIN_FILE=${SOURCE_ROOT}/tests/arith/aarch64-linux-gnu.cmake"
       "-DCMAKE_CXX_FLAGS=-march=armv8-a+crc -DGRADCOMP_TEST_EXPECT_ARM_CRC=1")
  set(_emulator ${_qemu} -L /usr/aarch64-linux-gnu)
  set(_objdump ${_objdump_cross})
else()
  message(FATAL_ERROR "arith: unknown ARCH '${ARCH}'")
endif()

arith_run(configure ${CMAKE_COMMAND} -S ${SOURCE_ROOT}/tests/arith -B ${BINARY_DIR} -G ${GENERATOR} ${_args})
arith_run(build ${CMAKE_COMMAND} --build ${BINARY_DIR})
arith_run("the tests" ${_emulator} ${BINARY_DIR}/gradcomp_arith_tests)
string(REGEX MATCH "test cases:[^\n]*" _summary "${_arith_out}")
message("arith.${ARCH}: ${_summary}")
if(NOT _summary MATCHES "[1-9][0-9]* passed \\| 0 failed")
  message("${_arith_out}")
  message(FATAL_ERROR "arith.${ARCH}: no test case ran")
endif()
arith_run(find_fused ${PYTHON} ${SOURCE_ROOT}/scripts/find_fused.py --objdump ${_objdump}
          ${BINARY_DIR}/gradcomp_arith_tests)
message("${_arith_out}")
