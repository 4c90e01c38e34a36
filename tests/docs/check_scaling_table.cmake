# docs/scaling.md's tables are what scripts/scaling_table.py writes from the committed results
# (bench/results/scaling): the script rewrites a copy of the page, which must come out unchanged.
#   cmake -DPYTHON=<python3> -DSCRIPT=<scaling_table.py> -DRESULTS=<dir> -DPAGE=<scaling.md>
#         -DWORKDIR=<dir> -P check_scaling_table.cmake
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
file(COPY "${PAGE}" DESTINATION "${WORKDIR}")
get_filename_component(_name "${PAGE}" NAME)
execute_process(COMMAND "${PYTHON}" "${SCRIPT}" --results "${RESULTS}" --markdown "${WORKDIR}/${_name}"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "scaling_table.py exited with ${_rc}:\n${_out}${_err}")
endif()
file(READ "${PAGE}" _committed)
file(READ "${WORKDIR}/${_name}" _written)
if(NOT _committed STREQUAL _written)
  message(FATAL_ERROR "${PAGE}: its tables differ from what scaling_table.py writes from ${RESULTS} "
                      "(run scripts/scaling_table.py --results ${RESULTS} --markdown ${PAGE})")
endif()
message(STATUS "${_name}: its tables are the results' in ${RESULTS}")
