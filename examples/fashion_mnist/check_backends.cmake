# Trains every mode of the demo on the backend OTHER (thrust, or cuda in the nvcc build) with the
# reference run's arguments and checks that it is the reference run (the cpu backend's, in
# REFERENCE: run_reference.cmake): the Thrust backend's results are the CPU backend's bit for bit,
# so every epoch's losses, accuracy, density and message bytes and the trained weights'
# fingerprint match (only the times differ).
#   cmake -DDEMO=<train_fashion_mnist> -DOTHER=<thrust|cuda> -DWORKDIR=<dir> -DREFERENCE=<dir>
#         -P check_backends.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
file(MAKE_DIRECTORY "${WORKDIR}")
read_run_figures(cpu "${REFERENCE}")
run_demo(${OTHER} "${DEMO}" --workers 4 ${demo_check_args} --backend ${OTHER})
require_same_run(cpu ${OTHER} "the cpu and ${OTHER} backends")
