# Shared by the consumer projects next to this file.

if(NOT DEFINED GRADCOMP_EXPECTED_VERSION)
  message(FATAL_ERROR "pass -DGRADCOMP_EXPECTED_VERSION=<major.minor.patch>")
endif()

# The consumer executable, built from the shared main.cpp.
function(gradcomp_consumer_executable)
  add_executable(gradcomp_consumer "${CMAKE_CURRENT_LIST_DIR}/../common/main.cpp")
  target_link_libraries(gradcomp_consumer PRIVATE gradcomp::gradcomp)
  target_compile_definitions(gradcomp_consumer PRIVATE
    "GRADCOMP_EXPECTED_VERSION=\"${GRADCOMP_EXPECTED_VERSION}\"")
endfunction()

# gradcomp built from source inside another project must not add its own
# tests, examples or warning flags there.
function(gradcomp_consumer_check_source_build)
  foreach(_target IN ITEMS gradcomp_tests gradcomp_tests_cxx20 gradcomp_header_check
                           gradcomp_dev_flags)
    if(TARGET ${_target})
      message(FATAL_ERROR "gradcomp created its internal target '${_target}' in a consumer project")
    endif()
  endforeach()
  foreach(_option IN ITEMS GRADCOMP_BUILD_TESTS GRADCOMP_BUILD_EXAMPLES GRADCOMP_BUILD_BENCHMARKS)
    if(${_option})
      message(FATAL_ERROR "${_option} is ON in a consumer project")
    endif()
  endforeach()
  if(NOT TARGET gradcomp::gradcomp)
    message(FATAL_ERROR "gradcomp::gradcomp is not defined")
  endif()
endfunction()
