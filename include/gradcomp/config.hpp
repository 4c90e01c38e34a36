/// @file config.hpp
/// @brief Feature macros shared by every gradcomp header.
#pragma once

#include <cassert>

/// Marks functions that compile for both host and device. Under nvcc it expands to
/// `__host__ __device__`; with any other compiler it expands to nothing, so `.hpp` headers never
/// need CUDA headers.
#if defined(__CUDACC__)
#define GRADCOMP_HD __host__ __device__
#else
#define GRADCOMP_HD
#endif

/// Placed before a function template marked `GRADCOMP_HD` that calls a callable argument, which
/// a host caller may give as a host-only lambda: nvcc then checks those calls only where device
/// code instantiates the template. Expands to nothing with other compilers.
#if defined(__NVCC__)
#define GRADCOMP_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define GRADCOMP_HD_TEMPLATE
#endif

/// Assertion for programmer errors (violated preconditions of the caller's own code). Active
/// unless `NDEBUG` is defined. Malformed data from outside is never checked with this macro: it
/// gets an error code.
#define GRADCOMP_ASSERT(cond) assert(cond)

/// Asks the compiler to inline a small function on a hot path even where its heuristics would
/// not (a refill step inside a decoding loop, for instance). Expands to nothing on compilers
/// without the attribute.
#if defined(__GNUC__) || defined(__clang__)
#define GRADCOMP_FORCE_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define GRADCOMP_FORCE_INLINE __forceinline
#else
#define GRADCOMP_FORCE_INLINE inline
#endif
