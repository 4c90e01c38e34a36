// The one .cu file of the separate-backend tests on the GPU: the kernels of gradcomp::cuda_backend
// compiled by nvcc for Thrust's CUDA system. tests/separate/test_separate_backend.cpp, compiled by
// the C++ compiler without Thrust or CUDA headers, runs them (gradcomp_separate_cuda_tests).
#include <gradcomp/thrust/separate_kernels.hpp>
#include <thrust/system/cuda/execution_policy.h>

GRADCOMP_INSTANTIATE_KERNELS(gradcomp::cuda_kernels, thrust::system::cuda::tag);
