# Trains every mode of the demo on the backend OTHER (thrust, or cuda in the nvcc build) and on
# the cpu backend with the same arguments, and checks that the two runs are the same run: the
# Thrust backend's results are the CPU backend's bit for bit, so every epoch's losses, accuracy,
# density and message bytes match (only the times differ).
#   cmake -DDEMO=<train_fashion_mnist> -DOTHER=<thrust|cuda> -DWORKDIR=<dir> -P check_backends.cmake
file(MAKE_DIRECTORY "${WORKDIR}")
set(_args --train-limit 2048 --test-limit 1000 --workers 4 --epochs 2 --warmup-epochs 0.5 --jobs 1)
foreach(_backend ${OTHER} cpu)
  execute_process(
    COMMAND "${DEMO}" ${_args} --backend ${_backend} --csv "${_backend}.csv" --summary-json "${_backend}.json"
    WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message("${_out}${_err}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "train_fashion_mnist --backend ${_backend} exited with ${_rc}")
  endif()
  # Per epoch: everything but the last column (seconds).
  file(STRINGS "${WORKDIR}/${_backend}.csv" _lines)
  set(_epochs "")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE ",[^,]*$" "" _line "${_line}")
    list(APPEND _epochs "${_line}")
  endforeach()
  set(_csv_${_backend} "${_epochs}")
  # Per mode: everything but the backend's name and the times.
  file(READ "${WORKDIR}/${_backend}.json" _json)
  string(REGEX REPLACE "\"backend\": \"[a-z]+\", " "" _json "${_json}")
  string(REGEX REPLACE ", \"compress_seconds\": [0-9.]+, \"step_seconds\": [0-9.]+" "" _json "${_json}")
  set(_json_${_backend} "${_json}")
endforeach()
list(LENGTH _csv_cpu _rows)
if(_rows LESS 3)
  message(FATAL_ERROR "the cpu run wrote ${_rows} CSV lines")
endif()
if(NOT _csv_cpu STREQUAL _csv_${OTHER})
  message(FATAL_ERROR "per-epoch figures differ between the backends:\ncpu: ${_csv_cpu}\n${OTHER}: ${_csv_${OTHER}}")
endif()
if(NOT _json_cpu STREQUAL _json_${OTHER})
  message(FATAL_ERROR "summaries differ between the backends:\ncpu: ${_json_cpu}\n${OTHER}: ${_json_${OTHER}}")
endif()
message(STATUS "cpu and ${OTHER} backends: the same ${_rows} CSV lines and summaries")
