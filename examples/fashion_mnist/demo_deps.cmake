# The Fashion-MNIST demo's dependencies, Eigen and zlib, which only the demo and its tests use
# (the library itself has none). Defines the targets gradcomp_fashion_mnist_common (the demo's
# headers) and gradcomp_fashion_mnist (a static library: the mode registry, modes.cpp) when both
# are found; included by examples/ and tests/.
include_guard(GLOBAL)

find_package(Eigen3 3.3 QUIET NO_MODULE)
find_package(ZLIB QUIET)
find_package(Threads QUIET)
if(TARGET Eigen3::Eigen AND TARGET ZLIB::ZLIB AND TARGET Threads::Threads)
  # The demo's headers and libraries (also for its nvcc build), then the demo's C++ build.
  add_library(gradcomp_fashion_mnist_common INTERFACE)
  target_include_directories(gradcomp_fashion_mnist_common INTERFACE "${CMAKE_CURRENT_LIST_DIR}")
  target_link_libraries(gradcomp_fashion_mnist_common INTERFACE
    gradcomp::gradcomp Eigen3::Eigen ZLIB::ZLIB Threads::Threads)
  # Eigen never runs a product on several threads (with OpenMP it would, and its blocking would
  # then depend on the thread count): the demo trains its modes in parallel itself (--jobs), and
  # its products give the same bits on every machine (fmnist::pin_eigen_blocking).
  target_compile_definitions(gradcomp_fashion_mnist_common INTERFACE EIGEN_DONT_PARALLELIZE)
  # The mode registry (modes.cpp), which instantiates every compressor on every backend, is
  # compiled once here for the demo, its tests and the libtorch trainer.
  add_library(gradcomp_fashion_mnist STATIC "${CMAKE_CURRENT_LIST_DIR}/modes.cpp")
  target_link_libraries(gradcomp_fashion_mnist PUBLIC gradcomp_fashion_mnist_common)
  if(TARGET gradcomp_dev_flags)
    target_link_libraries(gradcomp_fashion_mnist PRIVATE gradcomp_dev_flags)
  endif()
  set_target_properties(gradcomp_fashion_mnist PROPERTIES CXX_EXTENSIONS OFF)
  # --backend thrust: the portable Thrust backend on Thrust's OpenMP system, where the Thrust
  # headers (the CUDA Toolkit's CCCL) and OpenMP are found; not in sanitizer builds, where the
  # Thrust backend is covered by its own tests (Thrust binds references to null pointers in its
  # headers, which those tests exempt from UBSan's null check).
  find_path(GRADCOMP_DEMO_THRUST_INCLUDE_DIR thrust/version.h
            HINTS "${CUDAToolkit_ROOT}/include/cccl" "$ENV{CUDA_HOME}/include/cccl" /usr/local/cuda/include/cccl
                  /usr/local/cuda/include)
  find_package(OpenMP QUIET COMPONENTS CXX)
  if(GRADCOMP_DEMO_THRUST_INCLUDE_DIR AND OpenMP_CXX_FOUND AND NOT GRADCOMP_SANITIZE)
    target_include_directories(gradcomp_fashion_mnist SYSTEM PUBLIC "${GRADCOMP_DEMO_THRUST_INCLUDE_DIR}")
    # OpenMP is here for the Thrust backend (EIGEN_DONT_PARALLELIZE, above, keeps Eigen off it:
    # Eigen's own OpenMP threads on top of the demo's --jobs oversubscribed the cores, and the
    # model's products ran several times slower).
    target_compile_definitions(gradcomp_fashion_mnist PUBLIC FMNIST_WITH_THRUST
                                                                THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP)
    target_link_libraries(gradcomp_fashion_mnist PUBLIC OpenMP::OpenMP_CXX)
    set(GRADCOMP_DEMO_WITH_THRUST ON CACHE INTERNAL "the demo offers --backend thrust")
  else()
    set(GRADCOMP_DEMO_WITH_THRUST OFF CACHE INTERNAL "the demo offers --backend thrust")
    message(STATUS "gradcomp: the demo offers --backend cpu only (Thrust headers, OpenMP, no sanitizer: "
                   "'${GRADCOMP_DEMO_THRUST_INCLUDE_DIR}', '${OpenMP_CXX_FOUND}', '${GRADCOMP_SANITIZE}')")
  endif()
else()
  message(STATUS "gradcomp: Eigen3 or zlib not found; the Fashion-MNIST demo and its tests are "
                 "not built (Debian: apt-get install libeigen3-dev zlib1g-dev)")
endif()
