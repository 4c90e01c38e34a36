// The Thrust systems the Thrust backend's tests run on. Compiled by the C++ compiler: the OpenMP
// system (the work split among threads) and the C++ system (sequential). Compiled by nvcc for the
// CUDA tests (GRADCOMP_TEST_CUDA_SYSTEM): the CUDA system alone, so the same test sources check
// the GPU against the CPU backend.
#pragma once

#include <gradcomp/thrust.hpp>

#include "support/sanitized.hpp"

#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
#include <thrust/system/cuda/execution_policy.h>
#else
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>
#endif

namespace gradcomp_test {

#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
using primary_system = thrust::system::cuda::tag;
using second_system = thrust::system::cuda::tag;
#else
using primary_system = thrust::system::omp::tag;
using second_system = thrust::system::cpp::tag;
#endif
using primary_backend = gradcomp::thrust_backend<primary_system>;
using second_backend = gradcomp::thrust_backend<second_system>;

}  // namespace gradcomp_test

// The backends a TEST_CASE_TEMPLATE runs on: each distinct system once. Under the sanitizers, the
// OpenMP system only: the C++ system runs the same functors one thread at a time, which the
// optimised builds check, and compiling its instantiations with the sanitizers' instrumentation
// doubled the sanitizer build's longest translation units.
#if defined(GRADCOMP_TEST_CUDA_SYSTEM) || defined(GRADCOMP_TEST_SANITIZED)
#define GRADCOMP_THRUST_TEST_BACKENDS gradcomp_test::primary_backend
#else
#define GRADCOMP_THRUST_TEST_BACKENDS gradcomp_test::primary_backend, gradcomp_test::second_backend
#endif
