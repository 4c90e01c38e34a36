# Runs a command and checks its exit status and output; used by the tools' ctest tests.
#
#   cmake -DEXPECT_RC=<number|nonzero> [-DEXPECT_REGEX=<regex>] -P check_command.cmake COMMAND [ARGS...]
#
# EXPECT_REGEX is matched against stdout and stderr together.
if(NOT DEFINED EXPECT_RC)
  message(FATAL_ERROR "check_command.cmake: EXPECT_RC is not set")
endif()

# The command is whatever follows the script on the command line.
set(_cmd "")
set(_after_script OFF)
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(_i RANGE 1 ${_last})
  if(_after_script)
    list(APPEND _cmd "${CMAKE_ARGV${_i}}")
  elseif(CMAKE_ARGV${_i} STREQUAL "-P")
    math(EXPR _script "${_i} + 1")
    set(_skip_to ${_script})
  endif()
  if(DEFINED _skip_to AND _i EQUAL _skip_to)
    set(_after_script ON)
  endif()
endforeach()
if(NOT _cmd)
  message(FATAL_ERROR "check_command.cmake: no command given after the script")
endif()

execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
message("exit status: ${_rc}")

if(EXPECT_RC STREQUAL "nonzero")
  if(NOT _rc MATCHES "^[0-9]+$" OR _rc EQUAL 0)
    message(FATAL_ERROR "expected a non-zero exit status, got '${_rc}'")
  endif()
elseif(NOT _rc STREQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit status ${EXPECT_RC}, got '${_rc}'")
endif()

if(DEFINED EXPECT_REGEX AND NOT "${_out}${_err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match the regular expression '${EXPECT_REGEX}'")
endif()
