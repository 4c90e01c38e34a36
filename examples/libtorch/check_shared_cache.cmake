# Starts several train_libtorch processes at once on one empty cache directory (as MPI ranks on
# one machine, or runs started together, do) and checks that every one succeeds and that the cache
# ends with the four complete IDX files and nothing else: each process inflates into a partial
# file of its own and renames it into place.
#   cmake -DTRAINER=<train_libtorch> -DWORKDIR=<dir> [-DPROCESSES=4] -P check_shared_cache.cmake
if(NOT PROCESSES)
  set(PROCESSES 4)
endif()
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
set(_cache "${WORKDIR}/idx")
set(_run "${TRAINER}" --modes dense --workers 2 --train-limit 256 --test-limit 100 --max-steps 2 --threads 1
         --cache "${_cache}")
# execute_process starts all its commands at once (a pipeline: each one's output, a few lines, is
# the next one's input, which the trainer does not read).
set(_commands "")
foreach(_i RANGE 1 ${PROCESSES})
  list(APPEND _commands COMMAND ${_run})
endforeach()
execute_process(${_commands} WORKING_DIRECTORY "${WORKDIR}" RESULTS_VARIABLE _rcs
                OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(_err MATCHES "apt-get install dataset-fashion-mnist")
  return()  # no data set: ctest reports the test as skipped
endif()
foreach(_rc IN LISTS _rcs)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "a process sharing the cache exited with ${_rc} (all: ${_rcs})")
  endif()
endforeach()
file(GLOB _left RELATIVE "${_cache}" "${_cache}/*")
list(SORT _left)
set(_expected t10k-images-idx3-ubyte t10k-labels-idx1-ubyte train-images-idx3-ubyte train-labels-idx1-ubyte)
if(NOT "${_left}" STREQUAL "${_expected}")
  message(FATAL_ERROR "the cache holds ${_left}, expected ${_expected}")
endif()
# The IDX sizes: a 16-byte header and 28 x 28 pixels an image, an 8-byte header and a byte a label.
foreach(_pair "train-images-idx3-ubyte|47040016" "train-labels-idx1-ubyte|60008"
              "t10k-images-idx3-ubyte|7840016" "t10k-labels-idx1-ubyte|10008")
  string(REPLACE "|" ";" _pair "${_pair}")
  list(GET _pair 0 _name)
  list(GET _pair 1 _size)
  file(SIZE "${_cache}/${_name}" _got)
  if(NOT _got EQUAL _size)
    message(FATAL_ERROR "${_name} has ${_got} bytes, expected ${_size}")
  endif()
endforeach()
message(STATUS "${PROCESSES} processes filled one cache at once: all succeeded, four complete files")
