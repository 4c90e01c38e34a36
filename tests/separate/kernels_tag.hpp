// The kernels the separate-backend tests run on: Thrust's OpenMP system, compiled in
// omp_kernels.cpp (the C++ compiler with Thrust and OpenMP), or, for the CUDA variant, Thrust's
// CUDA system compiled from examples/separate/kernels_cuda.cu (gradcomp::cuda_kernels).
#pragma once

#include <gradcomp/separate_backend.hpp>

namespace gradcomp_test {

struct omp_kernels {};

#if defined(GRADCOMP_TEST_SEPARATE_CUDA)
using separate_tested = gradcomp::cuda_backend;
#else
using separate_tested = gradcomp::separate_backend<omp_kernels>;
#endif

}  // namespace gradcomp_test
