# The Fashion-MNIST demo's dependencies, Eigen and zlib, which only the demo and its tests use
# (the library itself has none). Defines the INTERFACE target gradcomp_fashion_mnist when both
# are found; included by examples/ and tests/.
include_guard(GLOBAL)

find_package(Eigen3 3.3 QUIET NO_MODULE)
find_package(ZLIB QUIET)
find_package(Threads QUIET)
if(TARGET Eigen3::Eigen AND TARGET ZLIB::ZLIB AND TARGET Threads::Threads)
  add_library(gradcomp_fashion_mnist INTERFACE)
  target_include_directories(gradcomp_fashion_mnist INTERFACE "${CMAKE_CURRENT_LIST_DIR}")
  target_link_libraries(gradcomp_fashion_mnist INTERFACE
    gradcomp::gradcomp Eigen3::Eigen ZLIB::ZLIB Threads::Threads)
else()
  message(STATUS "gradcomp: Eigen3 or zlib not found; the Fashion-MNIST demo and its tests are "
                 "not built (Debian: apt-get install libeigen3-dev zlib1g-dev)")
endif()
