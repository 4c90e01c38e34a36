# The libtorch comparison as committed (README.md's and docs/compressors.md's tables,
# docs/results/libtorch_table.md and libtorch_summary.json) is what examples/libtorch/compare.py
# writes from the committed runs (docs/results/libtorch_runs.jsonl): the script summarizes them
# into a work directory and rewrites copies of both pages, which must all come out unchanged.
#   cmake -DPYTHON=<python3> -DSOURCE_DIR=<repository root> -DWORKDIR=<dir> -P check_libtorch_table.cmake
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
set(_results "${SOURCE_DIR}/docs/results")
file(COPY "${SOURCE_DIR}/README.md" "${SOURCE_DIR}/docs/compressors.md" DESTINATION "${WORKDIR}")
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/examples/libtorch/compare.py"
                        --summarize "${_results}/libtorch_runs.jsonl" --out "${WORKDIR}" --images "${WORKDIR}"
                        --docs "${WORKDIR}/README.md" "${WORKDIR}/compressors.md"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "compare.py exited with ${_rc}:\n${_out}${_err}")
endif()
foreach(_pair "README.md|README.md" "docs/compressors.md|compressors.md"
              "docs/results/libtorch_table.md|libtorch_table.md" "docs/results/libtorch_summary.json|libtorch_summary.json")
  string(REPLACE "|" ";" _pair "${_pair}")
  list(GET _pair 0 _committed_path)
  list(GET _pair 1 _written_name)
  file(READ "${SOURCE_DIR}/${_committed_path}" _committed)
  file(READ "${WORKDIR}/${_written_name}" _written)
  if(NOT _committed STREQUAL _written)
    message(FATAL_ERROR "${_committed_path} differs from what compare.py writes from ${_results}/libtorch_runs.jsonl "
                        "(run examples/libtorch/compare.py --summarize docs/results/libtorch_runs.jsonl "
                        "--docs README.md docs/compressors.md)")
  endif()
endforeach()
message(STATUS "the libtorch table in README.md, docs/compressors.md and docs/results is the committed runs'")
