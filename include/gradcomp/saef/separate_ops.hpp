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
  X(momentum, (const backend& on, T beta, T eta, const model<T>& tensors), (on, beta, eta, tensors))      \
  X(momentum,                                                                                             \
    (const backend& on, T beta, T eta, view<const T> m, view<const T> g, view<T> next_m, view<T> next_u), \
    (on, beta, eta, m, g, next_m, next_u))                                                                \
  X(difference,                                                                                           \
    (const backend& on, view<const T> x, view<const T> e, view<T> out),                                   \
    (on, x, e, out))                                                                                      \
  X(expand,                                                                                               \
    (const backend& on, view<const std::uint32_t> idx, view<const T> values, view<T> out),                \
    (on, idx, values, out))

GRADCOMP_SEPARATE_KERNELS(saef_separate_kernels, GRADCOMP_DETAIL_SAEF_SEPARATE);

template <class Kernels>
struct saef_ops<separate_backend<Kernels>> : separate_method_ops<saef_separate_kernels, Kernels> {
  using base = separate_method_ops<saef_separate_kernels, Kernels>;
  template <class T>
  using model = separate_model<Kernels, T>;
  using base::f::momentum, base::d::momentum, base::f::difference, base::d::difference, base::f::expand,
      base::d::expand;
};

}  // namespace detail
}  // namespace gradcomp
