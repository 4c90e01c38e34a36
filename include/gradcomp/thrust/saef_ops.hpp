// detail::saef_ops<thrust_backend<System>>: Step-Ahead Error Feedback's element-wise kernels on
// the portable Thrust backend, one thread per element with the CPU's arithmetic
// (detail/saef_arithmetic.hpp), so every value is bitwise the CPU backend's.
#pragma once

#include <thrust/fill.h>

#include "../detail/saef_arithmetic.hpp"
#include "kernel_support.hpp"

namespace gradcomp {
namespace detail {

/// SAEF's element-wise kernels on the Thrust backend, on the backend value's stream.
template <class System>
struct saef_ops<thrust_backend<System>> {
  using backend = thrust_backend<System>;
  template <class T>
  using view = span<T, thrust_space<System>>;

  template <class T>
  static void momentum(const backend& on, T beta, T eta, view<const T> m, view<const T> g, view<T> next_m,
                       view<T> next_u) {
    for_each(on, m.size(), saef_momentum_op<T>{beta, eta, m.data(), g.data(), next_m.data(), next_u.data()});
  }
  template <class T>
  static void difference(const backend& on, view<const T> x, view<const T> e, view<T> out) {
    for_each(on, out.size(), saef_difference_op<T>{x.data(), e.empty() ? nullptr : e.data(), out.data()});
  }
  template <class T>
  static void expand(const backend& on, view<const std::uint32_t> idx, view<const T> values, view<T> out) {
    if (!idx.empty() || values.size() != out.size())
      thrust::fill_n(thrust_impl::exec<System>(on.stream), out.data(), out.size(), T(0));
    for_each(on, values.size(), saef_place_op<T>{idx.empty() ? nullptr : idx.data(), values.data(), out.data()});
  }

 private:
  template <class F>
  static void for_each(const backend& on, std::size_t n, F f) {
    if (n != 0)
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), n, f);
  }
};

}  // namespace detail
}  // namespace gradcomp
