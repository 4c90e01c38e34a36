# Trains some modes of the libtorch example with 2 workers in one process and with one worker per
# MPI process (mpirun -np 2 train_libtorch --mpi), with the same arguments, and checks that the
# two are the same run: every run's accuracy, message bytes and trained weights' fingerprint
# (weights_fnv1a) match; only the times differ. The modes cover every hook of the trainer: the
# scale sharing (terngrad), the step ahead and residual averaging (saef_topk), the layers'
# factors (isgq), the receiver's momentum in torch's SGD (dense) and DGC's own.
#   cmake -DTRAINER=<train_libtorch> -DMPIEXEC=<mpiexec> -DNP_FLAG=<-n> -DWORKDIR=<dir> -P check_mpi.cmake
file(MAKE_DIRECTORY "${WORKDIR}")
set(_args --modes dense,dgc,terngrad,saef_topk,isgq --train-limit 3200 --test-limit 500 --max-steps 40
          --threads 1 --cache "${WORKDIR}/idx")
foreach(_run simulated mpi)
  file(REMOVE "${WORKDIR}/${_run}.jsonl")
  if(_run STREQUAL "simulated")
    set(_cmd "${TRAINER}" --workers 2)
  else()
    set(_cmd "${MPIEXEC}" ${NP_FLAG} 2 "${TRAINER}" --mpi)
  endif()
  execute_process(COMMAND ${_cmd} ${_args} --json "${WORKDIR}/${_run}.jsonl"
                  WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message("${_out}${_err}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${_run} run failed (${_rc})")
  endif()
  file(STRINGS "${WORKDIR}/${_run}.jsonl" _lines)
  set(${_run}_figures "")
  foreach(_line IN LISTS _lines)
    foreach(_key mode final_accuracy bytes_per_step weights_fnv1a)
      string(REGEX MATCH "\"${_key}\": \"?[^,\"}]*" _field "${_line}")
      list(APPEND ${_run}_figures "${_field}")
    endforeach()
  endforeach()
endforeach()
list(LENGTH simulated_figures _n)
if(NOT _n EQUAL 20)
  message(FATAL_ERROR "expected 5 runs of 4 figures, got: ${simulated_figures}")
endif()
if(NOT simulated_figures STREQUAL mpi_figures)
  message(FATAL_ERROR "one process and 2 MPI processes differ:\n  ${simulated_figures}\n  ${mpi_figures}")
endif()
message("one process and 2 MPI processes: the same runs (${simulated_figures})")
