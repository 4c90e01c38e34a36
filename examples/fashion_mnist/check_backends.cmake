# Trains every mode of the demo on the backend OTHER (thrust, or cuda in the nvcc build) and on
# the cpu backend with the same arguments, and checks that the two runs are the same run: the
# Thrust backend's results are the CPU backend's bit for bit, so every epoch's losses, accuracy,
# density and message bytes match (only the times differ).
#   cmake -DDEMO=<train_fashion_mnist> -DOTHER=<thrust|cuda> -DWORKDIR=<dir> -P check_backends.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_figures.cmake")
file(MAKE_DIRECTORY "${WORKDIR}")
set(_args --train-limit 2048 --test-limit 1000 --workers 4 --epochs 2 --warmup-epochs 0.5 --jobs 1)
foreach(_backend ${OTHER} cpu)
  run_demo(${_backend} "${DEMO}" ${_args} --backend ${_backend})
endforeach()
require_same_run(cpu ${OTHER} "the cpu and ${OTHER} backends")
