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

struct terngrad_plan_op {
  terngrad_record* records;
  std::size_t count;
  terngrad_step_params p;
  terngrad_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_terngrad_step(records, count, p, step); }
};

}  // namespace thrust_impl

/// TernGrad's kernels on the Thrust backend: the measure's partial results, the records and the verdict
/// stay in the system's memory, and the host issues a step without waiting.
template <class System>
struct terngrad_ops<thrust_backend<System>> {
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
