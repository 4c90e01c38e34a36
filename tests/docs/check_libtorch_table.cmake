# The libtorch comparisons as committed are what examples/libtorch/compare.py writes from the
# committed runs: the script summarizes them into a work directory and rewrites copies of the
# pages, which must all come out unchanged, as must the committed table and summary.
#   TABLE=short (default): the 2-epoch table (docs/results/libtorch_runs.jsonl) in README.md and
#     docs/compressors.md, docs/results/libtorch_table.md and libtorch_summary.json;
#   TABLE=converged: the runs of scripts/measure_converged.sh (docs/results/converged/runs/*.json)
#     in docs/compressors.md, docs/results/converged/libtorch_table.md and libtorch_summary.json.
#   cmake -DPYTHON=<python3> -DSOURCE_DIR=<repository root> -DWORKDIR=<dir> [-DTABLE=converged]
#         -P check_libtorch_table.cmake
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
if(TABLE STREQUAL "converged")
  set(_results "docs/results/converged")
  file(GLOB _runs "${SOURCE_DIR}/${_results}/runs/*.json")
  list(SORT _runs)
  set(_pages "docs/compressors.md")
  set(_args --marker converged-table --no-times)
  set(_redo "scripts/measure_converged.sh --table")
else()
  set(_results "docs/results")
  set(_runs "${SOURCE_DIR}/${_results}/libtorch_runs.jsonl")
  set(_pages "README.md" "docs/compressors.md")
  set(_args)
  set(_redo "examples/libtorch/compare.py --summarize docs/results/libtorch_runs.jsonl --docs README.md docs/compressors.md")
endif()
if(NOT _runs)
  message(FATAL_ERROR "no runs under ${SOURCE_DIR}/${_results}")
endif()
set(_copies)
foreach(_page IN LISTS _pages)
  get_filename_component(_name "${_page}" NAME)
  file(COPY "${SOURCE_DIR}/${_page}" DESTINATION "${WORKDIR}")
  list(APPEND _copies "${WORKDIR}/${_name}")
endforeach()
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/examples/libtorch/compare.py" --summarize ${_runs}
                        --out "${WORKDIR}" --images "${WORKDIR}" --docs ${_copies} ${_args}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "compare.py exited with ${_rc}:\n${_out}${_err}")
endif()
foreach(_committed_path IN LISTS _pages ITEMS "${_results}/libtorch_table.md" "${_results}/libtorch_summary.json")
  get_filename_component(_name "${_committed_path}" NAME)
  file(READ "${SOURCE_DIR}/${_committed_path}" _committed)
  file(READ "${WORKDIR}/${_name}" _written)
  if(NOT _committed STREQUAL _written)
    message(FATAL_ERROR "${_committed_path} differs from what compare.py writes from the runs in "
                        "${_results} (run ${_redo})")
  endif()
endforeach()
string(JOIN ", " _page_list ${_pages})
message(STATUS "the libtorch table (${_results}) in ${_page_list} is the committed runs'")
