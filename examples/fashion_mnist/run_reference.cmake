# Trains every mode of the demo with run_figures.cmake's demo_check_args (4 workers, cpu backend),
# leaves its figures in WORKDIR as cpu.csv and cpu.json, for check_backends.cmake and
# check_mpi.cmake to compare their runs with, and compares every mode's trained weights with the
# committed fingerprints (FINGERPRINTS, tests/fingerprints/train_fashion_mnist.txt).
#   cmake -DDEMO=<train_fashion_mnist> -DWORKDIR=<dir> -DFINGERPRINTS=<file> -P run_reference.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/../../tests/fingerprints/fingerprints.cmake")
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
run_demo(cpu "${DEMO}" --workers 4 ${demo_check_args} --backend cpu)
list(LENGTH cpu_csv _rows)
if(_rows LESS 3)
  message(FATAL_ERROR "the reference run wrote ${_rows} CSV lines")
endif()
check_fingerprints("${WORKDIR}/cpu.json" "${FINGERPRINTS}"
                   "the demo's tables: scripts/compare_compressors.sh (scripts/demo_tables.py --list names its runs)")
