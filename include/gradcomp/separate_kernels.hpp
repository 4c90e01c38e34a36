/// @file separate_kernels.hpp
/// @brief The kernels of a `separate_backend` (`<gradcomp/separate_backend.hpp>`), every method's:
/// included by the one translation unit that compiles them for a Thrust system, which then says
/// `GRADCOMP_INSTANTIATE_KERNELS(Kernels, System)` at namespace scope, once per program.
///
/// For the GPU, one `.cu` file compiled by nvcc:
///
///     #include <gradcomp/separate_kernels.hpp>
///     #include <thrust/system/cuda/execution_policy.h>
///     GRADCOMP_INSTANTIATE_KERNELS(gradcomp::cuda_kernels, thrust::system::cuda::tag)
///
/// Every operation forwards to `thrust_backend<System>`'s, so its results are that backend's. A
/// method outside the library adds its own kernels to the same unit with
/// `GRADCOMP_INSTANTIATE_SEPARATE(its_kernels_template, Kernels)` (docs/backends.md).
#pragma once

#include "separate/thrust_kernels.hpp"

#include "adacomp/separate_kernels.hpp"
#include "dgc/separate_kernels.hpp"
#include "ef_signsgd/separate_kernels.hpp"
#include "isgq/separate_kernels.hpp"
#include "onebit/separate_kernels.hpp"
#include "powersgd/separate_kernels.hpp"
#include "qsgd/separate_kernels.hpp"
#include "saef/separate_kernels.hpp"
#include "terngrad/separate_kernels.hpp"

/// Compiles the kernels of `separate_backend<Kernels>` for Thrust system `System` (for `float` and
/// `double`), every method's, at namespace scope, in exactly one translation unit of the program.
#define GRADCOMP_INSTANTIATE_KERNELS(Kernels, System)                                  \
  GRADCOMP_INSTANTIATE_GENERIC_KERNELS(Kernels, System);                               \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::adacomp_separate_kernels, Kernels);  \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::dgc_separate_kernels, Kernels);      \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::ef_sign_separate_kernels, Kernels);  \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::isgq_separate_kernels, Kernels);     \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::onebit_separate_kernels, Kernels);   \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::powersgd_separate_kernels, Kernels); \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::powersgd_separate_table, Kernels);   \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::qsgd_separate_kernels, Kernels);     \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::saef_separate_kernels, Kernels);     \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::terngrad_separate_kernels, Kernels)
