# Starts several train_libtorch processes at once on one empty cache directory (as MPI ranks on
# one machine, or runs started together, do) and checks that every one succeeds and that the cache
# ends with the four complete IDX files and nothing else: each process inflates into a partial
# file of its own and renames it into place.
#   cmake -DTRAINER=<train_libtorch> -DWORKDIR=<dir> [-DPROCESSES=8] -P check_shared_cache.cmake
if(NOT PROCESSES)
  set(PROCESSES 8)
endif()
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
set(_cache "${WORKDIR}/idx")
# A POSIX shell starts them all, then waits for every one; each leaves its output and exit status.
execute_process(
  COMMAND sh -c "for i in $(seq \"$1\"); do (shift; \"$@\" > out.$i 2>&1; echo $? > rc.$i) & done; wait"
          sh ${PROCESSES} "${TRAINER}" --modes dense --workers 2 --train-limit 256 --test-limit 100 --max-steps 2
          --threads 1 --cache "${_cache}"
  WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _shell_rc)
if(NOT _shell_rc EQUAL 0)
  message(FATAL_ERROR "the shell that starts the processes exited with ${_shell_rc}")
endif()
set(_rcs "")
foreach(_i RANGE 1 ${PROCESSES})
  file(READ "${WORKDIR}/out.${_i}" _out)
  file(STRINGS "${WORKDIR}/rc.${_i}" _rc)
  message("process ${_i} (exit status ${_rc}):\n${_out}")
  if(_out MATCHES "apt-get install dataset-fashion-mnist")
    return()  # no data set: ctest reports the test as skipped
  endif()
  list(APPEND _rcs "${_rc}")
endforeach()
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
