// detail::terngrad_ops<thrust_backend<System>>: TernGrad's kernels on the portable Thrust backend,
// with the CPU's arithmetic (terngrad/cpu_ops.hpp), its order for the sums
// (detail/ordered_sum.hpp) and its draws (one Philox block per four elements), so every message is
// bitwise the CPU backend's.
#pragma once

#include "cpu_ops.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/philox.hpp"
#include "step_plan.hpp"
#include "../thrust/kernel_support.hpp"
#include "../thrust/model_table.hpp"
#include "../thrust/ordered_sum.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One thread: the tensor's record from its measure.
template <class T>
struct terngrad_record_op {
  const cpu::terngrad_sums<T>* sums;
  terngrad_record* r;
  GRADCOMP_HD void operator()(std::size_t) const { cpu::terngrad_record_sums<T>(*sums, *r); }
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

// The measure's term of element i of tensor t of a model.
template <class T>
struct terngrad_model_leaf {
  const model_tensor<T>* tensors;
  GRADCOMP_HD cpu::terngrad_sums<T> operator()(std::uint32_t t, std::uint64_t i) const {
    return cpu::terngrad_leaf<T>{tensors[t].g}(i);
  }
};

// Tensor t's record from its measure.
template <class T>
struct terngrad_model_record_op {
  terngrad_record* records;
  GRADCOMP_HD void operator()(const cpu::terngrad_sums<T>& s, std::uint32_t t) const {
    cpu::terngrad_record_sums<T>(s, records[t]);
  }
};

// Block j (four elements) of tensor t of a model: terngrad_step_op.
template <class T>
struct terngrad_model_step_op {
  terngrad_step_params p;
  const terngrad_record* records;
  const terngrad_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t, std::uint64_t j) const {
    terngrad_step_op<T>{p, t, m.g, m.values, m.numel, records + t, step}(j);
  }
};

struct terngrad_plan_op {
  terngrad_record* records;
  std::size_t count;
  terngrad_step_params p;
  terngrad_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_step(records, count, p, step); }
};

}  // namespace thrust_impl

/// TernGrad's kernels on the Thrust backend: the measure's partial results, the records and the verdict
/// stay in the system's memory, and the host issues a step without waiting.
///
/// A whole model's step (its `model<T>`, thrust/model_table.hpp, whose work items are blocks of
/// four elements) is two launches per level of the measure's sums, one for the records, one for
/// the plan and one for every block of every tensor; a separate backend issues the same work
/// tensor by tensor.
template <class System>
struct terngrad_ops<thrust_backend<System>> {
  template <class T>
  using model = thrust_impl::model_table<T, System>;

  template <class T>
  static void measure(const thrust_backend<System>& on, const model<T>& m,
                      thrust_view<terngrad_record, System> records) {
    m.template reduce_each<cpu::terngrad_sums<T>>(on.stream, thrust_impl::terngrad_model_leaf<T>{m.tensors()},
                                                  cpu::terngrad_merge<T>{},
                                                  thrust_impl::terngrad_model_record_op<T>{records.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, const terngrad_step_params& p, const model<T>& m,
                    thrust_view<const terngrad_record, System> records,
                    thrust_view<const terngrad_step_record, System> step) {
    m.for_each_item(on.stream, 0, thrust_impl::terngrad_model_step_op<T>{p, records.data(), step.data()});
  }

  // One tensor at a time (a separate backend's kernels).
  template <class T>
  static void measure(const thrust_backend<System>& on, thrust_view<const T, System> g,
                      thrust_view<terngrad_record, System> records, std::size_t t) {
    thrust_impl::scratch<cpu::terngrad_sums<T>, System> sums(on.stream, 1);
    thrust_impl::issue_ordered_reduce<cpu::terngrad_sums<T>, System>(
        on.stream, g.size(), cpu::terngrad_leaf<T>{g.data()}, cpu::terngrad_merge<T>{}, sums.data());
    thrust_impl::run_once<System>(on.stream, thrust_impl::terngrad_record_op<T>{sums.data(), records.data() + t});
  }
  static void plan(const thrust_backend<System>& on, thrust_view<terngrad_record, System> records,
                   const terngrad_step_params& p, thrust_view<terngrad_step_record, System> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::terngrad_plan_op{records.data(), records.size(), p, step.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, const terngrad_step_params& p, thrust_view<const T, System> g,
                    thrust_view<T, System> values, thrust_view<const terngrad_record, System> records, std::size_t t,
                    thrust_view<const terngrad_step_record, System> step) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                       (g.size() + 3) / 4,
                       thrust_impl::terngrad_step_op<T>{p, static_cast<std::uint32_t>(t), g.data(), values.data(),
                                                        g.size(), records.data() + t, step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
