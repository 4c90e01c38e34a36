# Trains every mode of the demo in one process and with one worker per MPI process (mpirun -np 4
# train_fashion_mnist --mpi), with the same arguments, and checks that the two are the same run:
# every epoch's losses, accuracy, density and message bytes, and the trained weights'
# fingerprint (weights_fnv1a), match; only the times differ.
#   cmake -DDEMO=<train_fashion_mnist> -DMPIEXEC=<mpiexec> -DNP_FLAG=<-n> -DWORKDIR=<dir> -P check_mpi.cmake
file(MAKE_DIRECTORY "${WORKDIR}")
set(_args --train-limit 2048 --test-limit 1000 --epochs 2 --warmup-epochs 0.5 --jobs 1)
foreach(_run simulated mpi)
  if(_run STREQUAL "mpi")
    set(_command "${MPIEXEC}" ${NP_FLAG} 4 "${DEMO}" --mpi)
  else()
    set(_command "${DEMO}" --workers 4)
  endif()
  execute_process(
    COMMAND ${_command} ${_args} --csv "${_run}.csv" --summary-json "${_run}.json"
    WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message("${_out}${_err}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "the ${_run} run exited with ${_rc}")
  endif()
  # Per epoch: everything but the last column (seconds).
  file(STRINGS "${WORKDIR}/${_run}.csv" _lines)
  set(_epochs "")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE ",[^,]*$" "" _line "${_line}")
    list(APPEND _epochs "${_line}")
  endforeach()
  set(_csv_${_run} "${_epochs}")
  # Per mode: everything but the times.
  file(READ "${WORKDIR}/${_run}.json" _json)
  string(REGEX REPLACE ", \"compress_seconds\": [0-9.]+, \"step_seconds\": [0-9.]+" "" _json "${_json}")
  set(_json_${_run} "${_json}")
endforeach()
list(LENGTH _csv_simulated _rows)
if(_rows LESS 3)
  message(FATAL_ERROR "the simulated run wrote ${_rows} CSV lines")
endif()
if(NOT _json_simulated MATCHES "\"weights_fnv1a\": \"[0-9a-f]+\"")
  message(FATAL_ERROR "the summary has no weights_fnv1a")
endif()
if(NOT _csv_simulated STREQUAL _csv_mpi)
  message(FATAL_ERROR "per-epoch figures differ:\nsimulated: ${_csv_simulated}\nmpi: ${_csv_mpi}")
endif()
if(NOT _json_simulated STREQUAL _json_mpi)
  message(FATAL_ERROR "summaries differ:\nsimulated: ${_json_simulated}\nmpi: ${_json_mpi}")
endif()
message(STATUS "one process and 4 MPI processes: the same ${_rows} CSV lines, summaries and weights")
