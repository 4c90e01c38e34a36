// detail::terngrad_ops<thrust_backend<System>>: TernGrad's kernels on the portable Thrust backend,
// with the CPU's arithmetic (cpu/terngrad_ops.hpp), its order for the sums (32 interleaved
// partial sums in double, each summed in element order, combined pairwise) and its draws (one
// Philox block per four elements), so every message is bitwise the CPU backend's.
#pragma once

#include "../cpu/terngrad_ops.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/philox.hpp"
#include "../terngrad/step_plan.hpp"
#include "kernel_support.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One lane of TernGrad's measure: the elements i = lane, lane + lanes, ... in order, as the CPU
// takes them: g and g^2 summed in double, the largest key of g.
template <class T>
struct terngrad_lane_op {
  const T* g;
  std::size_t n;
  double* sum;
  double* squares;
  key_t<T>* top;
  GRADCOMP_HD void operator()(std::size_t lane) const {
    double s = 0.0, q = 0.0;
    key_t<T> k = 0;
    for (std::size_t i = lane; i < n; i += cpu::terngrad_lanes) {
      const key_t<T> a = magnitude_key(g[i]);
      k = a > k ? a : k;
      const double x = static_cast<double>(g[i]);
      s += x;
      q += x * x;
    }
    sum[lane] = s;
    squares[lane] = q;
    top[lane] = k;
  }
};

// One thread: the lanes' results combined in the CPU's order into the tensor's record.
template <class T>
struct terngrad_measure_op {
  double* sum;
  double* squares;
  const key_t<T>* top;
  terngrad_record* r;
  GRADCOMP_HD void operator()(std::size_t) const {
    key_t<T> k = 0;
    for (std::size_t j = 0; j < cpu::terngrad_lanes; ++j) k = top[j] > k ? top[j] : k;
    cpu::terngrad_record_sums<T>(sum, squares, k, *r);
  }
};

// Four elements per thread (one Philox block), where the verdict allows: the ternary message of a
// compressed tensor, or g itself.
template <class T>
struct terngrad_step_op {
  terngrad_step_params p;
  std::uint32_t tensor;
  const T* g;
  T* values;
  std::size_t n;
  const terngrad_record* r;
  const terngrad_step_record* step;
  GRADCOMP_HD void operator()(std::size_t block) const {
    if (step->status != static_cast<std::int32_t>(errc::ok)) return;
    const std::size_t first = 4 * block, last = first + 4 < n ? first + 4 : n;
    if (r->compressed == 0) {
      for (std::size_t i = first; i < last; ++i) values[i] = g[i];
      return;
    }
    cpu::terngrad_apply_range(p, tensor, static_cast<T>(r->scale), g, values, first, last);
  }
};

struct terngrad_plan_op {
  terngrad_record* records;
  std::size_t count;
  terngrad_step_params p;
  terngrad_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_terngrad_step(records, count, p, step); }
};

}  // namespace thrust_impl

/// TernGrad's kernels on the Thrust backend: the lanes' results, the records and the verdict
/// stay in the system's memory, and the host issues a step without waiting.
template <class System>
struct terngrad_ops<thrust_backend<System>> {
  using backend = thrust_backend<System>;
  template <class T>
  using view = span<T, thrust_space<System>>;

  template <class T>
  static void measure(const backend& on, view<const T> g, view<terngrad_record> records, std::size_t t) {
    constexpr std::size_t lanes = cpu::terngrad_lanes;
    thrust_impl::scratch<double, System> sums(on.stream, 2 * lanes);  // of g, then of g^2
    thrust_impl::scratch<key_t<T>, System> top(on.stream, lanes);
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), lanes,
                       thrust_impl::terngrad_lane_op<T>{g.data(), g.size(), sums.data(), sums.data() + lanes,
                                                        top.data()});
    thrust_impl::run_once<System>(on.stream, thrust_impl::terngrad_measure_op<T>{sums.data(), sums.data() + lanes,
                                                                                top.data(), records.data() + t});
  }
  static void plan(const backend& on, view<terngrad_record> records, const terngrad_step_params& p,
                   view<terngrad_step_record> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::terngrad_plan_op{records.data(), records.size(), p, step.data()});
  }
  template <class T>
  static void apply(const backend& on, const terngrad_step_params& p, view<const T> g, view<T> values,
                    view<const terngrad_record> records, std::size_t t, view<const terngrad_step_record> step) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                       (g.size() + 3) / 4,
                       thrust_impl::terngrad_step_op<T>{p, static_cast<std::uint32_t>(t), g.data(), values.data(),
                                                        g.size(), records.data() + t, step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
