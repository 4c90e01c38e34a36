// The one .cu file of a trainer whose other files are plain C++: nvcc compiles the kernels of
// gradcomp::cuda_backend here, for the GPU. (gradcomp's CUDA tests build it as the kernels of their
// separate-backend cases.)
#include <gradcomp/separate_kernels.hpp>
#include <thrust/system/cuda/execution_policy.h>

GRADCOMP_INSTANTIATE_KERNELS(gradcomp::cuda_kernels, thrust::system::cuda::tag);
