// The one .cu file next to host_step.cpp: the kernels of gradcomp::cuda_backend, compiled by nvcc.
#include <gradcomp/thrust/separate_kernels.hpp>
#include <thrust/system/cuda/execution_policy.h>

GRADCOMP_INSTANTIATE_KERNELS(gradcomp::cuda_kernels, thrust::system::cuda::tag);
