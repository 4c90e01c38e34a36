// The one translation unit that compiles the kernels of gradcomp::separate_backend<omp_kernels>
// for Thrust's OpenMP system: the only file of the separate-backend tests that sees Thrust.
#include <gradcomp/separate_kernels.hpp>
#include <thrust/system/omp/execution_policy.h>

#include "separate/kernels_tag.hpp"

GRADCOMP_INSTANTIATE_KERNELS(gradcomp_test::omp_kernels, thrust::system::omp::tag);
