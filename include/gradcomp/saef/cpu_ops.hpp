// detail::saef_ops<cpu_backend>: Step-Ahead Error Feedback's element-wise kernels on the CPU
// (saef/arithmetic.hpp), element after element.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "arithmetic.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

template <>
struct saef_ops<cpu_backend> {
  template <class T>
  static void momentum(const cpu_backend&, T beta, T eta, span<const T> m, span<const T> g, span<T> next_m,
                       span<T> next_u) {
    const saef_momentum_op<T> op{beta, eta, m.data(), g.data(), next_m.data(), next_u.data()};
    for (std::size_t i = 0; i < m.size(); ++i) op(i);
  }
  template <class T>
  static void difference(const cpu_backend&, span<const T> x, span<const T> e, span<T> out) {
    const saef_difference_op<T> op{x.data(), e.empty() ? nullptr : e.data(), out.data()};
    for (std::size_t i = 0; i < out.size(); ++i) op(i);
  }
  template <class T>
  static void expand(const cpu_backend&, span<const std::uint32_t> idx, span<const T> values, span<T> out) {
    if (!idx.empty() || values.size() != out.size())
      for (T& x : out) x = T(0);
    const saef_place_op<T> op{idx.empty() ? nullptr : idx.data(), values.data(), out.data()};
    for (std::size_t j = 0; j < values.size(); ++j) op(j);
  }
};

}  // namespace detail
}  // namespace gradcomp
