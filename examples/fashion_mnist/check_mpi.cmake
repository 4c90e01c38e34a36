# Trains every mode of the demo with one worker per MPI process (mpirun -np 4 train_fashion_mnist
# --mpi) with the reference run's arguments and checks that it is the reference run (4 workers in
# one process, in REFERENCE: run_reference.cmake): every epoch's losses, accuracy, density and
# message bytes, and the trained weights' fingerprint (weights_fnv1a), match; only the times
# differ.
#   cmake -DDEMO=<train_fashion_mnist> -DMPIEXEC=<mpiexec> -DNP_FLAG=<-n> -DWORKDIR=<dir>
#         -DREFERENCE=<dir> -P check_mpi.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
file(MAKE_DIRECTORY "${WORKDIR}")
read_run_figures(cpu "${REFERENCE}")
run_demo(mpi "${MPIEXEC}" ${NP_FLAG} 4 "${DEMO}" --mpi ${demo_check_args})
require_same_run(cpu mpi "one process and 4 MPI processes")
