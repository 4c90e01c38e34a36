// The tag that names this program's own set of kernels (kernels_omp.cpp compiles them); the GPU
// build uses gradcomp::cuda_kernels instead (kernels_cuda.cu).
#pragma once

struct example_kernels {};
