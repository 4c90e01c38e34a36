# Trains every mode of the demo with run_figures.cmake's demo_check_args (4 workers, cpu backend)
# and leaves its figures in WORKDIR as cpu.csv and cpu.json, for check_backends.cmake and
# check_mpi.cmake to compare their runs with.
#   cmake -DDEMO=<train_fashion_mnist> -DWORKDIR=<dir> -P run_reference.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
run_demo(cpu "${DEMO}" --workers 4 ${demo_check_args} --backend cpu)
list(LENGTH cpu_csv _rows)
if(_rows LESS 3)
  message(FATAL_ERROR "the reference run wrote ${_rows} CSV lines")
endif()
if(NOT cpu_json MATCHES "\"weights_fnv1a\": \"[0-9a-f]+\"")
  message(FATAL_ERROR "the reference run's summary has no weights_fnv1a")
endif()
