/// @file thrust/cuda_errors.hpp
/// @brief How the Thrust backend on the CUDA system reports CUDA errors: `cuda_errc` maps a CUDA
/// runtime error code to `errc::device_error` or, where the CUDA context is lost, to
/// `errc::device_fault`. A host header: it needs neither the CUDA headers nor Thrust.
#pragma once

#include "../error.hpp"

namespace gradcomp {

/// CUDA runtime error codes (`cudaError_t` values, stable across CUDA releases) that leave the
/// CUDA context unusable: every later CUDA call of the process fails with the same error.
namespace cuda_sticky {
constexpr int ecc_uncorrectable = 214;     ///< cudaErrorECCUncorrectable
constexpr int nvlink_uncorrectable = 220;  ///< cudaErrorNvlinkUncorrectable
constexpr int illegal_address = 700;       ///< cudaErrorIllegalAddress
constexpr int launch_timeout = 702;        ///< cudaErrorLaunchTimeout
constexpr int context_destroyed = 709;     ///< cudaErrorContextIsDestroyed
constexpr int device_assert = 710;         ///< cudaErrorAssert
constexpr int hardware_stack = 714;        ///< cudaErrorHardwareStackError
constexpr int illegal_instruction = 715;   ///< cudaErrorIllegalInstruction
constexpr int misaligned_address = 716;    ///< cudaErrorMisalignedAddress
constexpr int invalid_address_space = 717; ///< cudaErrorInvalidAddressSpace
constexpr int invalid_pc = 718;            ///< cudaErrorInvalidPc
constexpr int launch_failure = 719;        ///< cudaErrorLaunchFailure
constexpr int tensor_memory_leak = 721;    ///< cudaErrorTensorMemoryLeak
constexpr int external_device = 911;       ///< cudaErrorExternalDevice
}  // namespace cuda_sticky

namespace detail {
// Every code of cuda_sticky.
inline constexpr int cuda_sticky_codes[] = {
    cuda_sticky::ecc_uncorrectable,   cuda_sticky::nvlink_uncorrectable, cuda_sticky::illegal_address,
    cuda_sticky::launch_timeout,      cuda_sticky::context_destroyed,    cuda_sticky::device_assert,
    cuda_sticky::hardware_stack,      cuda_sticky::illegal_instruction,  cuda_sticky::misaligned_address,
    cuda_sticky::invalid_address_space, cuda_sticky::invalid_pc,         cuda_sticky::launch_failure,
    cuda_sticky::tensor_memory_leak,  cuda_sticky::external_device};
}  // namespace detail

/**
 * @brief The `errc` of a CUDA runtime error code (a `cudaError_t` converted to `int`).
 *
 * `errc::ok` for `cudaSuccess` (0); `errc::device_fault` for the errors after which the CUDA
 * context is lost (`cuda_sticky`: the process must restart to use the GPU again);
 * `errc::device_error` for every other error (out of device memory, no device or an old driver,
 * an invalid launch), after which the device stays usable. The Thrust backend on the CUDA system
 * throws `gradcomp::error` with this code and the CUDA error's text when a launch, a copy, a
 * synchronisation or one of its CUB calls fails; Thrust's own algorithms report their failures
 * as `thrust::system_error`.
 */
constexpr errc cuda_errc(int cuda_error) noexcept {
  if (cuda_error == 0) return errc::ok;
  for (int sticky : detail::cuda_sticky_codes)
    if (cuda_error == sticky) return errc::device_fault;
  return errc::device_error;
}

}  // namespace gradcomp
