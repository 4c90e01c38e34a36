// Running the CPU kernels at a chosen SIMD level (the portable loops or AVX2) in a test.
#pragma once

#include <gradcomp/detail/simd.hpp>

namespace gradcomp_test {

// Runs f() with the kernels pinned to `level`, then restores automatic dispatch.
template <class F>
auto with_level(gradcomp::detail::cpu::simd_level level, F f) {
  gradcomp::detail::cpu::simd_override().store(static_cast<int>(level));
  auto r = f();
  gradcomp::detail::cpu::simd_override().store(-1);
  return r;
}

}  // namespace gradcomp_test
