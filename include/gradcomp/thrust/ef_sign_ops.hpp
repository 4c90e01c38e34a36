// detail::ef_sign_ops<thrust_backend<System>>: EF-SignSGD's kernels on the portable Thrust backend,
// with the CPU's arithmetic (cpu/ef_sign_ops.hpp) and its order for the L1 norm (32 interleaved
// partial sums in double, each summed in element order, combined pairwise), so every message and
// error buffer is bitwise the CPU backend's.
#pragma once

#include <cmath>
#include <limits>

#include "../cpu/ef_sign_ops.hpp"
#include "../detail/magnitude.hpp"
#include "../ef_signsgd/step_plan.hpp"
#include "kernel_support.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One lane of EF-SignSGD's measure: the elements i = lane, lane + lanes, ... in order, as
// cpu::ef_sign_measure_portable takes them: |p| summed in double, the largest keys of g and p.
template <class T>
struct ef_sign_lane_op {
  T lr;
  const T* g;
  const T* e;  // null: p = lr * g
  std::size_t n;
  double* part;
  key_t<T>* top_g;
  key_t<T>* top_p;
  GRADCOMP_HD void operator()(std::size_t lane) const {
    double s = 0.0;
    key_t<T> kg = 0, kp = 0;
    for (std::size_t i = lane; i < n; i += cpu::ef_sign_lanes) {
      const T gi = g[i];
      const T p = e != nullptr ? static_cast<T>(e[i] + lr * gi) : static_cast<T>(lr * gi);
      const key_t<T> a = magnitude_key(gi), b = magnitude_key(p);
      kg = a > kg ? a : kg;
      kp = b > kp ? b : kp;
      s += std::fabs(static_cast<double>(p));
    }
    part[lane] = s;
    top_g[lane] = kg;
    top_p[lane] = kp;
  }
};

// sent = sign(p) * s, e = p - sent (cpu::ef_sign_apply_portable).
template <class T>
struct ef_sign_apply_op {
  T lr;
  T s;
  const T* g;
  T* e;
  T* values;
  GRADCOMP_HD void operator()(std::size_t i) const {
    const T p = static_cast<T>(e[i] + lr * g[i]);
    const T v = std::signbit(p) ? -s : s;
    values[i] = v;
    e[i] = static_cast<T>(p - v);
  }
};

template <class T>
struct ef_sign_dense_op {
  T lr;
  const T* g;
  T* values;
  GRADCOMP_HD void operator()(std::size_t i) const { values[i] = static_cast<T>(lr * g[i]); }
};

// One thread: the lanes' results combined in the CPU's order into the tensor's record.
template <class T>
struct ef_sign_measure_op {
  double* part;
  const key_t<T>* top_g;
  const key_t<T>* top_p;
  ef_sign_record* r;
  GRADCOMP_HD void operator()(std::size_t) const {
    constexpr std::size_t lanes = cpu::ef_sign_lanes;
    key_t<T> kg = 0, kp = 0;
    for (std::size_t j = 0; j < lanes; ++j) {
      kg = top_g[j] > kg ? top_g[j] : kg;
      kp = top_p[j] > kp ? top_p[j] : kp;
    }
    for (std::size_t width = lanes / 2; width > 0; width /= 2)
      for (std::size_t j = 0; j < width; ++j) part[j] += part[j + width];
    r->largest = is_finite_key<T>(kg) ? static_cast<double>(value_of_key<T>(kg)) : __builtin_nan("");
    r->p_finite = is_finite_key<T>(kp) ? 1 : 0;
    r->l1 = part[0];
  }
};

// A tensor's message (and error buffer), where the verdict allows: signs times the scale, or the
// scaled gradient of a dense tensor.
template <class T>
struct ef_sign_step_op {
  T lr;
  const T* g;
  T* e;
  T* values;
  const ef_sign_record* r;
  const ef_sign_step_record* step;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (step->status != static_cast<std::int32_t>(errc::ok)) return;
    if (r->compressed == 0) ef_sign_dense_op<T>{lr, g, values}(i);
    else ef_sign_apply_op<T>{lr, static_cast<T>(r->scale), g, e, values}(i);
  }
};

struct ef_sign_plan_op {
  ef_sign_record* records;
  std::size_t count;
  ef_sign_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_ef_sign_step(records, count, step); }
};

}  // namespace thrust_impl

/// EF-SignSGD's kernels on the Thrust backend: the lanes' results, the records and the verdict
/// stay in the system's memory, and the host issues a step without waiting.
template <class System>
struct ef_sign_ops<thrust_backend<System>> {
  using backend = thrust_backend<System>;
  template <class T>
  using view = span<T, thrust_space<System>>;

  template <class T>
  static void measure(const backend& on, T lr, view<const T> g, view<const T> e, view<ef_sign_record> records,
                      std::size_t t) {
    constexpr std::size_t lanes = cpu::ef_sign_lanes;
    thrust_impl::scratch<double, System> sums(on.stream, lanes);
    thrust_impl::scratch<key_t<T>, System> tops(on.stream, 2 * lanes);  // of g, then of p
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), lanes,
                       thrust_impl::ef_sign_lane_op<T>{lr, g.data(), e.empty() ? nullptr : e.data(), g.size(),
                                                       sums.data(), tops.data(), tops.data() + lanes});
    thrust_impl::run_once<System>(on.stream, thrust_impl::ef_sign_measure_op<T>{sums.data(), tops.data(),
                                                                               tops.data() + lanes, records.data() + t});
  }
  static void plan(const backend& on, view<ef_sign_record> records, view<ef_sign_step_record> step) {
    thrust_impl::run_once<System>(on.stream, thrust_impl::ef_sign_plan_op{records.data(), records.size(), step.data()});
  }
  template <class T>
  static void apply(const backend& on, T lr, view<const T> g, view<T> e, view<T> values,
                    view<const ef_sign_record> records, std::size_t t, view<const ef_sign_step_record> step) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::ef_sign_step_op<T>{lr, g.data(), e.empty() ? nullptr : e.data(), values.data(),
                                                       records.data() + t, step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
