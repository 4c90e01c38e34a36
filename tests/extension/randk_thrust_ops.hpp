// Random-k's kernels on the portable Thrust backend (tests/extension/randk.hpp): a method outside
// the library adds a backend's kernels by specialising its own template, here over the Thrust
// backend's support (<gradcomp/thrust/kernel_support.hpp>). The records and the verdict stay in the
// system's memory; the host issues a step without waiting.
#pragma once

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <gradcomp/detail/magnitude.hpp>
#include <gradcomp/thrust.hpp>

#include "extension/randk.hpp"

namespace gradcomp_test {
namespace randk_thrust {

template <class T>
GRADCOMP_HD bool finite(T x) noexcept {
  return gradcomp::detail::is_finite_key<T>(gradcomp::detail::magnitude_key(x));
}

// Bit 0: g[i] is not finite; bit 1: p = e[i] + g[i] is not.
template <class T>
struct bad_bits {
  const T* g;
  const T* e;
  GRADCOMP_HD std::uint32_t operator()(std::size_t i) const {
    const T p = e == nullptr ? g[i] : static_cast<T>(e[i] + g[i]);
    return (finite(g[i]) ? 0u : 1u) | (finite(p) ? 0u : 2u);
  }
};
struct bit_or {
  GRADCOMP_HD std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const { return a | b; }
};
struct record_bits {
  const std::uint32_t* bits;
  randk_record* r;
  GRADCOMP_HD void operator()(std::size_t) const {
    r->g_finite = (*bits & 1u) != 0 ? 0 : 1;
    r->p_finite = (*bits & 2u) != 0 ? 0 : 1;
  }
};
struct plan_op {
  const randk_record* records;
  std::size_t count;
  randk_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { randk_plan(records, count, step); }
};
template <class T>
struct apply_op {
  randk_positions at;
  const T* g;
  T* e;
  std::uint32_t* idx;
  T* values;
  const randk_record* r;
  const randk_step_record* step;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (step->status != static_cast<std::int32_t>(gradcomp::errc::ok)) return;
    if (r->compressed == 0) {
      values[i] = g[i];
      return;
    }
    const T p = static_cast<T>(e[i] + g[i]);
    const bool sent = i >= at.first && (i - at.first) % at.stride == 0;
    if (sent) {
      const std::size_t j = (i - at.first) / at.stride;
      idx[j] = static_cast<std::uint32_t>(i);
      values[j] = p;
    }
    e[i] = sent ? T(0) : p;
  }
};
struct kept_op {
  randk_positions at;
  randk_record* r;
  const randk_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (step->status == static_cast<std::int32_t>(gradcomp::errc::ok) && r->compressed != 0)
      r->kept = at.count(r->numel);
  }
};

}  // namespace randk_thrust

template <class System>
struct randk_ops<gradcomp::thrust_backend<System>> {
  template <class T>
  using view = gradcomp::thrust_view<T, System>;

  template <class T>
  static void measure(const gradcomp::thrust_backend<System>& on, view<const T> g, view<const T> e,
                      view<randk_record> records, std::size_t t) {
    namespace impl = gradcomp::detail::thrust_impl;
    impl::scratch<std::uint32_t, System> bits(on.stream, 1);
    const auto each = thrust::make_transform_iterator(
        thrust::counting_iterator<std::size_t>(0), randk_thrust::bad_bits<T>{g.data(), e.empty() ? nullptr : e.data()});
    impl::execution<System>::reduce_into(on.stream, each, g.size(), 0u, randk_thrust::bit_or{}, bits.data());
    impl::run_once<System>(on.stream, randk_thrust::record_bits{bits.data(), records.data() + t});
  }
  static void plan(const gradcomp::thrust_backend<System>& on, view<const randk_record> records,
                   view<randk_step_record> step) {
    gradcomp::detail::thrust_impl::run_once<System>(on.stream,
                                                    randk_thrust::plan_op{records.data(), records.size(), step.data()});
  }
  template <class T>
  static void apply(const gradcomp::thrust_backend<System>& on, randk_positions at, view<const T> g, view<T> e,
                    view<std::uint32_t> idx, view<T> values, view<randk_record> records, std::size_t t,
                    view<const randk_step_record> step) {
    namespace impl = gradcomp::detail::thrust_impl;
    thrust::for_each_n(impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       randk_thrust::apply_op<T>{at, g.data(), e.empty() ? nullptr : e.data(), idx.data(),
                                                 values.data(), records.data() + t, step.data()});
    impl::run_once<System>(on.stream, randk_thrust::kept_op{at, records.data() + t, step.data()});
  }
};

}  // namespace gradcomp_test
