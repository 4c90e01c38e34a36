# What two runs of the demo must have in common to be the same run, for check_backends.cmake and
# check_mpi.cmake: every CSV line but its last column (the seconds) and the summary JSON without
# the backend's name and the times.

# The run that both compare with: every mode, 4 workers in one process on the cpu backend, three
# short epochs (8 steps each; the first 4 steps DGC's warm-up, SAEF's residuals averaged at step
# 20). run_reference.cmake writes it once (ctest fixture demo_reference) into the directory
# REFERENCE, and compares its trained weights with tests/fingerprints/train_fashion_mnist.txt.
set(demo_check_args --train-limit 1024 --test-limit 1000 --epochs 3 --warmup-epochs 0.5 --jobs 1)

# Reads <dir>/<name>.csv and <name>.json (dir: the optional second argument, else WORKDIR) into
# <name>_csv and <name>_json in the caller's scope.
function(read_run_figures name)
  set(_dir "${WORKDIR}")
  if(ARGC GREATER 1)
    set(_dir "${ARGV1}")
  endif()
  if(NOT EXISTS "${_dir}/${name}.csv" OR NOT EXISTS "${_dir}/${name}.json")
    message(FATAL_ERROR "no run ${name} in ${_dir} (the test demo.reference_run writes it)")
  endif()
  file(STRINGS "${_dir}/${name}.csv" _lines)
  set(_epochs "")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE ",[^,]*$" "" _line "${_line}")
    list(APPEND _epochs "${_line}")
  endforeach()
  file(READ "${_dir}/${name}.json" _json)
  string(REGEX REPLACE "\"backend\": \"[a-z]+\", " "" _json "${_json}")
  string(REGEX REPLACE ", \"compress_seconds\": [0-9.]+, \"step_seconds\": [0-9.]+" "" _json "${_json}")
  set(${name}_csv "${_epochs}" PARENT_SCOPE)
  set(${name}_json "${_json}" PARENT_SCOPE)
endfunction()

# Runs the command after `name` (in WORKDIR, adding --csv <name>.csv --summary-json <name>.json;
# its standard output kept as <name>.out), fails if it fails, then reads its figures
# (read_run_figures).
function(run_demo name)
  execute_process(
    COMMAND ${ARGN} --csv "${name}.csv" --summary-json "${name}.json"
    WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  file(WRITE "${WORKDIR}/${name}.out" "${_out}")
  message("${_out}${_err}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "the ${name} run exited with ${_rc}")
  endif()
  read_run_figures(${name})
  set(${name}_csv "${${name}_csv}" PARENT_SCOPE)
  set(${name}_json "${${name}_json}" PARENT_SCOPE)
endfunction()

# Fails unless runs a and b (read by read_run_figures) have the same figures; `what` names them.
function(require_same_run a b what)
  list(LENGTH ${a}_csv _rows)
  if(_rows LESS 3)
    message(FATAL_ERROR "the ${a} run wrote ${_rows} CSV lines")
  endif()
  if(NOT "${${a}_csv}" STREQUAL "${${b}_csv}")
    message(FATAL_ERROR "per-epoch figures differ between ${what}:\n${a}: ${${a}_csv}\n${b}: ${${b}_csv}")
  endif()
  if(NOT "${${a}_json}" STREQUAL "${${b}_json}")
    message(FATAL_ERROR "summaries differ between ${what}:\n${a}: ${${a}_json}\n${b}: ${${b}_json}")
  endif()
  message(STATUS "${what}: the same ${_rows} CSV lines and summaries")
endfunction()
