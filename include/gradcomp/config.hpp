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

/// Assertion for programmer errors (violated preconditions of the caller's own code). Active
/// unless `NDEBUG` is defined. Malformed data from outside is never checked with this macro: it
/// gets an error code.
#define GRADCOMP_ASSERT(cond) assert(cond)
