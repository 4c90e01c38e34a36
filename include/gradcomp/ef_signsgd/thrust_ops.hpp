// detail::ef_sign_ops<thrust_backend<System>>: EF-SignSGD's kernels on the portable Thrust backend,
// with the CPU's arithmetic (ef_signsgd/cpu_ops.hpp) and its order for the L1 norm
// (detail/ordered_sum.hpp), so every message and error buffer is bitwise the CPU backend's.
#pragma once

#include <cmath>

#include "cpu_ops.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/rounded.hpp"
#include "step_plan.hpp"
#include "../thrust/kernel_support.hpp"
#include "../thrust/model_table.hpp"
#include "../thrust/ordered_sum.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// sent = sign(p) * s, e = p - sent (cpu::ef_sign_apply_portable).
template <class T>
struct ef_sign_apply_op {
  T lr;
  T s;
  const T* g;
  T* e;
  T* values;
  GRADCOMP_HD void operator()(std::size_t i) const {
    const T p = static_cast<T>(e[i] + rounded(lr * g[i]));
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

// One thread: the tensor's record from its measure.
template <class T>
struct ef_sign_record_op {
  const cpu::ef_sign_sums<T>* sums;
  ef_sign_record* r;
  GRADCOMP_HD void operator()(std::size_t) const { cpu::ef_sign_record_sums(*sums, *r); }
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

// The measure's term of element i of tensor t of a model.
template <class T>
struct ef_sign_model_leaf {
  T lr;
  const model_tensor<T>* tensors;
  GRADCOMP_HD cpu::ef_sign_sums<T> operator()(std::uint32_t t, std::uint64_t i) const {
    return cpu::ef_sign_leaf<T>{lr, tensors[t].g, tensors[t].e}(i);
  }
};

// Tensor t's record from its measure.
template <class T>
struct ef_sign_model_record_op {
  ef_sign_record* records;
  GRADCOMP_HD void operator()(const cpu::ef_sign_sums<T>& s, std::uint32_t t) const {
    cpu::ef_sign_record_sums(s, records[t]);
  }
};

// Element i of tensor t of a model: ef_sign_step_op.
template <class T>
struct ef_sign_model_step_op {
  T lr;
  const ef_sign_record* records;
  const ef_sign_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t, std::uint64_t i) const {
    ef_sign_step_op<T>{lr, m.g, m.e, m.values, records + t, step}(i);
  }
};

}  // namespace thrust_impl

/// EF-SignSGD's kernels on the Thrust backend: the measure's partial results, the records and the
/// verdict stay in the system's memory, and the host issues a step without waiting. A whole
/// model's step (its `model<T>`, thrust/model_table.hpp) is two launches per level of the
/// measure's sums, one for the records, one for the plan and one for every element of every
/// tensor; a separate backend issues the same work tensor by tensor.
template <class System>
struct ef_sign_ops<thrust_backend<System>> {
  template <class T>
  using model = thrust_impl::model_table<T, System>;

  template <class T>
  static void measure(const thrust_backend<System>& on, T lr, const model<T>& m,
                      thrust_view<ef_sign_record, System> records) {
    m.template reduce_each<cpu::ef_sign_sums<T>>(on.stream, thrust_impl::ef_sign_model_leaf<T>{lr, m.tensors()},
                                                 cpu::ef_sign_merge<T>{},
                                                 thrust_impl::ef_sign_model_record_op<T>{records.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, T lr, const model<T>& m,
                    thrust_view<const ef_sign_record, System> records,
                    thrust_view<const ef_sign_step_record, System> step) {
    m.for_each_item(on.stream, 0, thrust_impl::ef_sign_model_step_op<T>{lr, records.data(), step.data()});
  }

  // One tensor at a time (a separate backend's kernels).
  template <class T>
  static void measure(const thrust_backend<System>& on, T lr, thrust_view<const T, System> g,
                      thrust_view<const T, System> e, thrust_view<ef_sign_record, System> records, std::size_t t) {
    thrust_impl::scratch<cpu::ef_sign_sums<T>, System> sums(on.stream, 1);
    thrust_impl::issue_ordered_reduce<cpu::ef_sign_sums<T>, System>(
        on.stream, g.size(), cpu::ef_sign_leaf<T>{lr, g.data(), e.empty() ? nullptr : e.data()},
        cpu::ef_sign_merge<T>{}, sums.data());
    thrust_impl::run_once<System>(on.stream, thrust_impl::ef_sign_record_op<T>{sums.data(), records.data() + t});
  }
  static void plan(const thrust_backend<System>& on, thrust_view<ef_sign_record, System> records,
                   thrust_view<ef_sign_step_record, System> step) {
    thrust_impl::run_plan<System>(on.stream, records.data(), records.size(), step.data());
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, T lr, thrust_view<const T, System> g, thrust_view<T, System> e,
                    thrust_view<T, System> values, thrust_view<const ef_sign_record, System> records, std::size_t t,
                    thrust_view<const ef_sign_step_record, System> step) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::ef_sign_step_op<T>{lr, g.data(), e.empty() ? nullptr : e.data(), values.data(),
                                                       records.data() + t, step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
