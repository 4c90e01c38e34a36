// What torch's CPU results depend on, and how the example pins it (train_libtorch --portable).
// Part of the example, not the library.
//
// Without pinning, torch chooses at run time: ATen's kernels for the CPU's instruction set (its
// dispatch, ATEN_CPU_CAPABILITY: default, avx2 or avx512, each with other vector code and other
// bits), oneDNN's convolutions generated for the CPU (their blocking follows its vector width and
// caches) and a thread count that splits reductions. A run then gives the same bits on one machine,
// run after run, and other bits on another.
#pragma once

#include <torch/torch.h>

#include <cstdlib>

namespace torch_demo {

/**
 * Makes the following torch computations give the same bits on every x86-64 machine: ATen's
 * kernels at their baseline instruction set (ATEN_CPU_CAPABILITY=default), convolutions by ATen's
 * own unfolding and the BLAS instead of oneDNN, one thread. Call it before the first tensor
 * operation (torch reads ATEN_CPU_CAPABILITY once, when it first dispatches). What it cannot pin is
 * the BLAS library itself: Debian's reference BLAS (libblas3) computes the same bits everywhere; an
 * optimised one chosen through update-alternatives (OpenBLAS, BLIS) chooses its kernels by CPU.
 */
inline void pin_numerics() {
#if defined(_WIN32)
  _putenv_s("ATEN_CPU_CAPABILITY", "default");
#else
  setenv("ATEN_CPU_CAPABILITY", "default", 1);
#endif
  at::globalContext().setUserEnabledMkldnn(false);
  torch::set_num_threads(1);
}

}  // namespace torch_demo
