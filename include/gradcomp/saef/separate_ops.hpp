// detail::saef_ops<separate_backend<Kernels>>: Step-Ahead Error Feedback's kernels on a separate backend, each
// saef_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// saef/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "arithmetic.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_SAEF_SEPARATE(X)                                                                  \
  X(momentum,                                                                                             \
    (const backend& on, T beta, T eta, view<const T> m, view<const T> g, view<T> next_m, view<T> next_u), \
    (on, beta, eta, m, g, next_m, next_u))                                                                \
  X(difference,                                                                                           \
    (const backend& on, view<const T> x, view<const T> e, view<T> out),                                   \
    (on, x, e, out))                                                                                      \
  X(expand,                                                                                               \
    (const backend& on, view<const std::uint32_t> idx, view<const T> values, view<T> out),                \
    (on, idx, values, out))

// The kernels on T.
template <class Kernels, class T>
struct saef_separate_kernels {
  using backend = separate_backend<Kernels>;
  template <class U>
  using view = separate_view<U, Kernels>;
  GRADCOMP_DETAIL_SAEF_SEPARATE(GRADCOMP_SEPARATE_DECLARE)
};

template <class Kernels>
struct saef_ops<separate_backend<Kernels>>
    : saef_separate_kernels<Kernels, float>, saef_separate_kernels<Kernels, double> {
  using f = saef_separate_kernels<Kernels, float>;
  using d = saef_separate_kernels<Kernels, double>;
  using f::momentum, d::momentum, f::difference, d::difference, f::expand, d::expand;
};

}  // namespace detail
}  // namespace gradcomp
