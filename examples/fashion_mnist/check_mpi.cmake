# Trains every mode of the demo in one process and with one worker per MPI process (mpirun -np 4
# train_fashion_mnist --mpi), with the same arguments, and checks that the two are the same run:
# every epoch's losses, accuracy, density and message bytes, and the trained weights'
# fingerprint (weights_fnv1a), match; only the times differ.
#   cmake -DDEMO=<train_fashion_mnist> -DMPIEXEC=<mpiexec> -DNP_FLAG=<-n> -DWORKDIR=<dir> -P check_mpi.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
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
  read_run_figures(${_run})
endforeach()
if(NOT simulated_json MATCHES "\"weights_fnv1a\": \"[0-9a-f]+\"")
  message(FATAL_ERROR "the summary has no weights_fnv1a")
endif()
require_same_run(simulated mpi "one process and 4 MPI processes")
