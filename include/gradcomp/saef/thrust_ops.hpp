// detail::saef_ops<thrust_backend<System>>: Step-Ahead Error Feedback's element-wise kernels on
// the portable Thrust backend, one thread per element with the CPU's arithmetic
// (saef/arithmetic.hpp), so every value is bitwise the CPU backend's.
#pragma once

#include <thrust/fill.h>

#include "arithmetic.hpp"
#include "../thrust/kernel_support.hpp"

namespace gradcomp {
namespace detail {

/// SAEF's element-wise kernels on the Thrust backend, on the backend value's stream.
template <class System>
struct saef_ops<thrust_backend<System>> {
  template <class T>
  static void momentum(const thrust_backend<System>& on, T beta, T eta, thrust_view<const T, System> m,
                       thrust_view<const T, System> g, thrust_view<T, System> next_m, thrust_view<T, System> next_u) {
    for_each(on, m.size(), saef_momentum_op<T>{beta, eta, m.data(), g.data(), next_m.data(), next_u.data()});
  }
  template <class T>
  static void difference(const thrust_backend<System>& on, thrust_view<const T, System> x,
                         thrust_view<const T, System> e, thrust_view<T, System> out) {
    for_each(on, out.size(), saef_difference_op<T>{x.data(), e.empty() ? nullptr : e.data(), out.data()});
  }
  template <class T>
  static void expand(const thrust_backend<System>& on, thrust_view<const std::uint32_t, System> idx,
                     thrust_view<const T, System> values, thrust_view<T, System> out) {
    if (!idx.empty() || values.size() != out.size())
      thrust::fill_n(thrust_impl::exec<System>(on.stream), out.data(), out.size(), T(0));
    for_each(on, values.size(), saef_place_op<T>{idx.empty() ? nullptr : idx.data(), values.data(), out.data()});
  }

 private:
  template <class F>
  static void for_each(const thrust_backend<System>& on, std::size_t n, F f) {
    if (n != 0)
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), n, f);
  }
};

}  // namespace detail
}  // namespace gradcomp
