# Trains every mode of the demo in one process and with one worker per MPI process (mpirun -np 4
# train_fashion_mnist --mpi), with the same arguments, and checks that the two are the same run:
# every epoch's losses, accuracy, density and message bytes, and the trained weights'
# fingerprint (weights_fnv1a), match; only the times differ.
#   cmake -DDEMO=<train_fashion_mnist> -DMPIEXEC=<mpiexec> -DNP_FLAG=<-n> -DWORKDIR=<dir> -P check_mpi.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
file(MAKE_DIRECTORY "${WORKDIR}")
set(_args --train-limit 2048 --test-limit 1000 --epochs 2 --warmup-epochs 0.5 --jobs 1)
run_demo(simulated "${DEMO}" --workers 4 ${_args})
run_demo(mpi "${MPIEXEC}" ${NP_FLAG} 4 "${DEMO}" --mpi ${_args})
if(NOT simulated_json MATCHES "\"weights_fnv1a\": \"[0-9a-f]+\"")
  message(FATAL_ERROR "the summary has no weights_fnv1a")
endif()
require_same_run(simulated mpi "one process and 4 MPI processes")
