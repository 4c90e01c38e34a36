// Step-Ahead Error Feedback's element-wise arithmetic (saef/worker.hpp), one element per call,
// the same on every backend (GRADCOMP_HD), and the declaration of its kernels on a backend
// (saef/cpu_ops.hpp, saef/thrust_ops.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {

// The worker's momentum and update: next_m = beta * m + g, next_u = eta * next_m, the product and
// the sum each rounded to T, in this order.
template <class T>
struct saef_momentum_op {
  T beta, eta;
  const T* m;
  const T* g;
  T* next_m;
  T* next_u;
  GRADCOMP_HD void operator()(std::size_t i) const {
    const T bm = rounded(static_cast<T>(beta * m[i]));
    const T nm = static_cast<T>(bm + g[i]);
    next_m[i] = nm;
    next_u[i] = static_cast<T>(eta * nm);
  }
};

// out = x - e (out = x where e is null); out may be x.
template <class T>
struct saef_difference_op {
  const T* x;
  const T* e;
  T* out;
  GRADCOMP_HD void operator()(std::size_t i) const { out[i] = e == nullptr ? x[i] : static_cast<T>(x[i] - e[i]); }
};

// out[idx[j]] = values[j] (out[j] = values[j] where idx is null).
template <class T>
struct saef_place_op {
  const std::uint32_t* idx;
  const T* values;
  T* out;
  GRADCOMP_HD void operator()(std::size_t j) const { out[idx == nullptr ? j : idx[j]] = values[j]; }
};

// SAEF's kernels on a backend, over views of its memory:
//   momentum(on, beta, eta, m, g, next_m, next_u)   saef_momentum_op over every element
//   difference(on, x, e, out)                       out = x - e (e empty: out = x)
//   expand(on, idx, values, out)                    out = 0, then out[idx[j]] = values[j]
//                                                   (idx empty: out = values, of out's length)
template <class Backend>
struct saef_ops;

}  // namespace detail
}  // namespace gradcomp
