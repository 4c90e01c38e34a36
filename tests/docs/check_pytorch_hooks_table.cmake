# The comparison of DDP hooks as committed (the tables in README.md and docs/compressors.md) is
# what examples/pytorch/compare_hooks.py writes from the committed runs
# (docs/results/pytorch_hooks/runs.jsonl): the script rewrites copies of both pages, which must
# come out unchanged.
#   cmake -DPYTHON=<python3 with torch> -DSOURCE_DIR=<repository root> -DWORKDIR=<dir> -P check_pytorch_hooks_table.cmake
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
file(COPY "${SOURCE_DIR}/README.md" "${SOURCE_DIR}/docs/compressors.md" DESTINATION "${WORKDIR}")
set(_runs "${SOURCE_DIR}/docs/results/pytorch_hooks/runs.jsonl")
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/examples/pytorch/compare_hooks.py" --table "${_runs}"
                        --docs "${WORKDIR}/README.md" "${WORKDIR}/compressors.md"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "compare_hooks.py exited with ${_rc}:\n${_out}${_err}")
endif()
foreach(_pair "README.md|README.md" "docs/compressors.md|compressors.md")
  string(REPLACE "|" ";" _pair "${_pair}")
  list(GET _pair 0 _committed_path)
  list(GET _pair 1 _written_name)
  file(READ "${SOURCE_DIR}/${_committed_path}" _committed)
  file(READ "${WORKDIR}/${_written_name}" _written)
  if(NOT _committed STREQUAL _written)
    message(FATAL_ERROR "${_committed_path}'s table of DDP hooks differs from what compare_hooks.py writes from "
                        "${_runs} (run examples/pytorch/compare_hooks.py --table ${_runs} --docs README.md "
                        "docs/compressors.md)")
  endif()
endforeach()
message(STATUS "the table of DDP hooks in README.md and docs/compressors.md is the committed runs'")
