// The only file of this example that includes Thrust: it compiles the kernels of
// gradcomp::separate_backend<example_kernels> for Thrust's OpenMP system, so that the example runs
// on any machine. kernels_cuda.cu is the same file for the GPU.
#include <gradcomp/separate_kernels.hpp>
#include <thrust/system/omp/execution_policy.h>

#include "kernels_tag.hpp"

GRADCOMP_INSTANTIATE_KERNELS(example_kernels, thrust::system::omp::tag);
