// Products that are rounded before anything adds them: what makes the library's arithmetic the
// same on every compiler and target.
//
// The library defines each of its results as IEEE-754 operations that are rounded one at a time,
// in a fixed order (docs/algorithms.md, "Arithmetic"). A compiler may instead contract a product
// and an addition that uses it into one fused multiply-add, rounded once, wherever the target has
// the instruction: GCC does so across statements by default (-ffp-contract=fast) and ignores
// `#pragma STDC FP_CONTRACT`, Clang does so within an expression (-ffp-contract=on); every
// aarch64 target has the instruction, and x86-64 has it with -mfma, -march=x86-64-v3 or
// -march=native. The sum then differs in its last bits from the one every other build computes.
//
// rounded(x) returns x, but the optimiser cannot see through it: a product passed through it is a
// finished, rounded value, and no addition can be fused with it. It costs nothing where the
// target has no fused multiply-add (x86-64 without FMA: the default build; nothing is emitted),
// and one empty inline-assembly statement elsewhere, which keeps the value in a register. It does
// stop the compiler from vectorising a scalar loop on its own; the AVX2 kernels of the DGC and
// EF-SignSGD passes (detail/simd.hpp, ef_signsgd/cpu_ops.hpp) pass whole vectors through their own
// form of it. Measured in an x86-64-v3 build against the unguarded (fused) code: DGC 1.01-1.09x,
// the quantisers 1.03-1.04x, AdaComp 1.18x (bench/results/fma_guard_x86_64_v3.md).
//
// Device code needs nothing here: nvcc compiles the library with -fmad=false (its contraction
// switch), which every CUDA build of gradcomp's own code sets and docs/backends.md asks of users.
// MSVC contracts only under /fp:fast or /fp:contract, which the library does not support.
#pragma once

#include "../config.hpp"

/// How rounded() stops contraction on this target: 0 nothing to stop (no fused multiply-add, or
/// device code), 1 an SSE/AVX register operand (x86 with FMA), 2 a SIMD&FP register operand
/// (aarch64), 3 a memory operand (other GCC/Clang targets, which may have one). Defined as 0
/// before the first gradcomp header, it turns the guard off: the library's results then depend
/// on the compiler's contraction (only to measure what the guard costs and prevents).
#if defined(GRADCOMP_ROUNDING_BARRIER)
// set by the user
#elif defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || !(defined(__GNUC__) || defined(__clang__))
#define GRADCOMP_ROUNDING_BARRIER 0
#elif defined(__x86_64__) || defined(__i386__)
#if defined(__FMA__) || defined(__FMA4__)
#define GRADCOMP_ROUNDING_BARRIER 1
#else
#define GRADCOMP_ROUNDING_BARRIER 0
#endif
#elif defined(__aarch64__)
#define GRADCOMP_ROUNDING_BARRIER 2
#else
#define GRADCOMP_ROUNDING_BARRIER 3
#endif

namespace gradcomp {
namespace detail {

/// `x`, as a value no later addition can fuse with: pass a product through it where the product
/// is added (rounded(a * b) + c is two roundings on every compiler and target). Also takes SIMD
/// vector types (__m256 and the like) on x86 and aarch64.
template <class T>
GRADCOMP_HD GRADCOMP_FORCE_INLINE T rounded(T x) noexcept {
#if GRADCOMP_ROUNDING_BARRIER == 1
  __asm__("" : "+x"(x));
#elif GRADCOMP_ROUNDING_BARRIER == 2
  __asm__("" : "+w"(x));
#elif GRADCOMP_ROUNDING_BARRIER == 3
  __asm__("" : "+m"(x));
#endif
  return x;
}

}  // namespace detail
}  // namespace gradcomp
