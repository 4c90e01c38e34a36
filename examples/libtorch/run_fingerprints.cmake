# A short run of every mode of train_libtorch with --portable (the same bits on every x86-64
# machine) whose trained weights must be the committed fingerprints (FINGERPRINTS,
# tests/fingerprints/train_libtorch.txt).
#   cmake -DTRAINER=<train_libtorch> -DWORKDIR=<dir> -DCACHE=<dir> -DFINGERPRINTS=<file> -P run_fingerprints.cmake
include("${CMAKE_CURRENT_LIST_DIR}/../../tests/fingerprints/fingerprints.cmake")
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
execute_process(
  COMMAND "${TRAINER}" --portable --workers 2 --train-limit 512 --test-limit 100 --epochs 2
          --warmup-epochs 0.5 --json runs.jsonl --cache "${CACHE}"
  WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(_err MATCHES "apt-get install dataset-fashion-mnist")
  return()  # no data set: ctest reports the test as skipped
endif()
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "train_libtorch exited with ${_rc}")
endif()
check_fingerprints("${WORKDIR}/runs.jsonl" "${FINGERPRINTS}"
                   "the libtorch tables: python3 examples/libtorch/compare.py --binary <build>/examples/libtorch/train_libtorch --docs README.md docs/compressors.md")
