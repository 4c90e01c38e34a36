# ctest driver of scripts/compressors_table.py (test docs.compressors_table): writes the table of
# small fixed results into a copy of a page with the markers and checks its rows and the plot.
#   cmake -DPYTHON=<python3> -DSCRIPT=<compressors_table.py> -DFIXTURES=<dir> -DWORKDIR=<dir>
#         -P check_table.cmake
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
file(WRITE "${WORKDIR}/page.md" "# Page\n\n<!-- table: begin -->\nold\n<!-- table: end -->\n\nafter\n")
execute_process(
  COMMAND "${PYTHON}" "${SCRIPT}" --summary4 "${FIXTURES}/summary.json" --summary8 "${FIXTURES}/summary.json"
          --bench "${FIXTURES}/bench.json" --markdown "${WORKDIR}/page.md" --plot "${WORKDIR}/plot.png"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "compressors_table.py exited with ${_rc}: ${_out}${_err}")
endif()
file(READ "${WORKDIR}/page.md" _page)
foreach(_row
    "| `dense` | 32.256 | 1.0x | 88.00% | 88.00% | 2,500 | - | - |"
    "| `dgc` | 0.320 | 100.8x | 87.50% (-0.50) | 87.50% (-0.50) | - | 250,000 | - |"
    "| `onebit_sgd` | 1.200 | 26.9x | 87.00% (-1.00) | 87.00% (-1.00) | - | - | 660 |")
  string(FIND "${_page}" "${_row}" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "row missing: ${_row}\n${_page}")
  endif()
endforeach()
if(_page MATCHES "old" OR NOT _page MATCHES "after\n$")
  message(FATAL_ERROR "the page around the markers changed:\n${_page}")
endif()
if(NOT EXISTS "${WORKDIR}/plot.png")
  message(FATAL_ERROR "no plot written")
endif()
