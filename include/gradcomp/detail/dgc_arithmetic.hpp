// The DGC step's arithmetic on one element, shared by every backend's kernels so that they all
// compute the same bits: the sender's momentum correction and accumulation, and the receiver's
// momentum. Each is written with separate multiplications and additions, in a fixed order, and
// every product is rounded before it is added (rounded(), detail/rounded.hpp), whatever the
// compiler's contraction setting; device code is compiled with nvcc's -fmad=false.
#pragma once

#include "../config.hpp"
#include "../momentum_kind.hpp"
#include "rounded.hpp"

namespace gradcomp {
namespace detail {

// Momentum correction and accumulation of gradient g (scaled by the clip coefficient c) into
// the momentum u and the accumulator v; returns the new v. For momentum_kind::none, u is not
// touched.
// vanilla:  U = m*U + c*g;     V = V + U
// nesterov: U = m*(U + c*g);   V = V + U + c*g
// none:     V = V + c*g
template <momentum_kind K, class T>
GRADCOMP_HD inline T accumulate_one(T m, T c, T g, T& u, T& v) {
  if constexpr (K == momentum_kind::none) {
    (void)m;
    (void)u;
    v += rounded(c * g);
  } else if constexpr (K == momentum_kind::vanilla) {
    u = rounded(m * u) + rounded(c * g);
    v += u;
  } else {
    const T cg = rounded(c * g);
    u = rounded(m * (u + cg));
    v = v + u + cg;
  }
  return v;
}

// The same with the momentum form chosen at run time.
template <class T>
GRADCOMP_HD inline T accumulate_one(momentum_kind kind, T m, T c, T g, T& u, T& v) {
  if (kind == momentum_kind::none) return accumulate_one<momentum_kind::none>(m, c, g, u, v);
  if (kind == momentum_kind::vanilla) return accumulate_one<momentum_kind::vanilla>(m, c, g, u, v);
  return accumulate_one<momentum_kind::nesterov>(m, c, g, u, v);
}

// The receiver's momentum, in place on the averaged gradient a (the sender's arithmetic, so that
// a dense tensor and a compressed one with k = n agree bitwise); none leaves both unchanged.
// vanilla:  U = m*U + a;    a = U
// nesterov: U = m*(U + a);  a = U + a
template <class T>
GRADCOMP_HD inline void receiver_momentum_one(momentum_kind kind, T m, T& u, T& a) {
  if (kind == momentum_kind::vanilla) {
    u = rounded(m * u) + a;
    a = u;
  } else if (kind == momentum_kind::nesterov) {
    u = rounded(m * (u + a));
    a = u + a;
  }
}

}  // namespace detail
}  // namespace gradcomp
