# The trained weights' fingerprints of a trainer's short run against the committed ones
# (tests/fingerprints/<trainer>.txt): any change to the training numerics changes a fingerprint,
# fails the test and names the tables to re-measure. With GRADCOMP_UPDATE_FINGERPRINTS=1 in the
# environment (scripts/update_fingerprints.sh) the committed file is rewritten instead.
#
# The committed file: comment lines (#), then "<mode> <seed> <weights_fnv1a>" lines.

# check_fingerprints(<runs file> <committed file> <what to re-measure>): the runs file has one run
# a line with its "mode", optional "seed" and "weights_fnv1a" (the demo's summary JSON, the libtorch
# example's JSON lines).
function(check_fingerprints runs committed remeasure)
  file(STRINGS "${runs}" _lines REGEX "\"weights_fnv1a\"")
  set(_got "")
  foreach(_line IN LISTS _lines)
    if(NOT _line MATCHES "\"mode\": \"([a-z0-9_]+)\"")
      message(FATAL_ERROR "a run without a mode in ${runs}: ${_line}")
    endif()
    set(_mode "${CMAKE_MATCH_1}")
    set(_seed 1)
    if(_line MATCHES "\"seed\": ([0-9]+)")
      set(_seed "${CMAKE_MATCH_1}")
    endif()
    if(NOT _line MATCHES "\"weights_fnv1a\": \"([0-9a-f]+)\"")
      message(FATAL_ERROR "a run without weights_fnv1a in ${runs}: ${_line}")
    endif()
    list(APPEND _got "${_mode} ${_seed} ${CMAKE_MATCH_1}")
  endforeach()
  list(LENGTH _got _count)
  if(_count EQUAL 0)
    message(FATAL_ERROR "no fingerprints in ${runs}")
  endif()

  set(_header "")
  set(_expected "")
  if(EXISTS "${committed}")
    file(STRINGS "${committed}" _committed_lines)
    foreach(_line IN LISTS _committed_lines)
      if(_line MATCHES "^#")
        string(APPEND _header "${_line}\n")
      elseif(NOT _line STREQUAL "")
        list(APPEND _expected "${_line}")
      endif()
    endforeach()
  endif()

  # Modes whose fingerprint differs, or that one side lacks.
  set(_changed "")
  foreach(_entry IN LISTS _got _expected)
    string(REGEX MATCH "^[^ ]+ [0-9]+" _key "${_entry}")
    set(_in_got "")
    set(_in_expected "")
    foreach(_g IN LISTS _got)
      if(_g MATCHES "^${_key} ")
        set(_in_got "${_g}")
      endif()
    endforeach()
    foreach(_e IN LISTS _expected)
      if(_e MATCHES "^${_key} ")
        set(_in_expected "${_e}")
      endif()
    endforeach()
    if(NOT _in_got STREQUAL _in_expected)
      list(APPEND _changed "${_key}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _changed)

  if("$ENV{GRADCOMP_UPDATE_FINGERPRINTS}" STREQUAL "1")
    list(JOIN _got "\n" _body)
    file(WRITE "${committed}" "${_header}${_body}\n")
    if(_changed)
      message(STATUS "fingerprints rewritten in ${committed}; changed: ${_changed}\n"
                     "re-measure: ${remeasure}")
    else()
      message(STATUS "fingerprints unchanged in ${committed}")
    endif()
    return()
  endif()
  if(_changed)
    list(JOIN _got "\n  " _got_text)
    message(FATAL_ERROR "the trained weights differ from ${committed} for: ${_changed}\n"
                        "this run's fingerprints:\n  ${_got_text}\n"
                        "The training numerics changed. If that is intended, run "
                        "scripts/update_fingerprints.sh and re-measure in the same change: ${remeasure}")
  endif()
  message(STATUS "${_count} runs: the committed fingerprints (${committed})")
endfunction()
