# What the arith.* drivers share (run.cmake, run_fingerprints.cmake); ARCH names the test in their
# messages ("arith.<ARCH>"), REQUIRED turns a skip into a failure.

# Prints "arith: skipped: <reason>" (a skip for ctest), or fails when REQUIRED is on; the caller
# returns after it.
function(arith_skip reason)
  if(REQUIRED)
    message(FATAL_ERROR "arith.${ARCH}: ${reason}")
  endif()
  message("arith: skipped: ${reason}")
endfunction()

# Runs a command; on failure prints its output and fails, naming `what`. Its output in _arith_out.
function(arith_run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    message("${_out}")
    message(FATAL_ERROR "arith.${ARCH}: ${what} failed (${_rc})")
  endif()
  set(_arith_out "${_out}" PARENT_SCOPE)
endfunction()

# Sets `var` to whether this CPU has what x86-64-v3 assumes (AVX2 and FMA among them).
function(arith_cpu_is_x86_64_v3 var)
  set(_flags "")
  if(EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo _flags REGEX "^flags" LIMIT_COUNT 1)
  endif()
  if(_flags MATCHES " fma( |$)" AND _flags MATCHES " avx2( |$)")
    set(${var} TRUE PARENT_SCOPE)
  else()
    set(${var} FALSE PARENT_SCOPE)
  endif()
endfunction()
