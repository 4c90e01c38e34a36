# The libtorch example's dependencies: libtorch's CMake package (Debian: apt-get install
# libtorch-dev) and the Fashion-MNIST demo's headers and mode registry (Eigen, zlib). Defines the
# INTERFACE targets gradcomp_libtorch_views and gradcomp_libtorch_example when they are found;
# included by examples/ and tests/ (and by the example's own project). Not in sanitizer builds: libtorch itself is not instrumented.
# Included by every directory that builds against it: find_package(Torch)'s imported targets are
# visible only in the directory that found them.
include("${CMAKE_CURRENT_LIST_DIR}/../fashion_mnist/demo_deps.cmake")

option(GRADCOMP_ENABLE_TORCH "Build the libtorch example and its tests where libtorch is found" ON)
option(GRADCOMP_REQUIRE_TORCH "Fail the configuration unless the libtorch example can be built" OFF)
if(GRADCOMP_ENABLE_TORCH AND TARGET gradcomp_fashion_mnist AND "${GRADCOMP_SANITIZE}" STREQUAL "")
  find_package(Torch QUIET)
  if(Torch_FOUND AND NOT TARGET gradcomp_libtorch_example)
    # gradcomp with libtorch (the integration snippet), then the trainer's dependencies on top:
    # the demo's headers and its mode registry.
    add_library(gradcomp_libtorch_views INTERFACE)
    target_include_directories(gradcomp_libtorch_views INTERFACE "${CMAKE_CURRENT_LIST_DIR}")
    target_link_libraries(gradcomp_libtorch_views INTERFACE gradcomp::gradcomp ${TORCH_LIBRARIES})
    target_compile_features(gradcomp_libtorch_views INTERFACE cxx_std_17)
    add_library(gradcomp_libtorch_example INTERFACE)
    target_link_libraries(gradcomp_libtorch_example INTERFACE gradcomp_libtorch_views gradcomp_fashion_mnist)
  endif()
endif()
if(NOT TARGET gradcomp_libtorch_example)
  if(GRADCOMP_REQUIRE_TORCH)
    message(FATAL_ERROR "gradcomp: GRADCOMP_REQUIRE_TORCH is on but libtorch was not found or is disabled "
                        "(Debian: apt-get install libtorch-dev; not in sanitizer builds)")
  endif()
  message(STATUS "gradcomp: libtorch not found (or a sanitizer build): the libtorch example is not built "
                 "(Debian: apt-get install libtorch-dev)")
endif()
