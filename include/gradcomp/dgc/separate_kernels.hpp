// The definitions of dgc/separate_ops.hpp: each dgc_ops<thrust_backend<System>>'s, for the
// translation unit that compiles a separate backend's kernels (<gradcomp/separate_kernels.hpp>).
#pragma once

#include "../separate/thrust_kernels.hpp"
#include "separate_ops.hpp"
#include "thrust_ops.hpp"

/// @cond GRADCOMP_INTERNAL
namespace gradcomp {
namespace detail {

template <class Kernels>
using dgc_thrust_ops = dgc_ops<thrust_of_t<Kernels>>;

GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, read_gradients, void)(const backend& on, gradient_read read,
                                                                     const model<T>& m,
                                                                     view<dgc_tensor_record<T>> records) {
  dgc_thrust_ops<Kernels>::read_gradients(as_thrust(on), read, as_thrust(m), as_thrust(records));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, exact_bounds, void)(const backend& on, momentum_kind kind, T mom,
                                                                   const model<T>& m,
                                                                   view<dgc_tensor_record<T>> records) {
  dgc_thrust_ops<Kernels>::exact_bounds(as_thrust(on), kind, mom, as_thrust(m), as_thrust(records));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, dense_steps, void)(const backend& on, const model<T>& m,
                                                                  view<dgc_tensor_record<T>> records,
                                                                  view<const dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::dense_steps(as_thrust(on), as_thrust(m), as_thrust(records), as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, accumulate, void)(const backend& on, const dgc_tensor_plan<T>& p,
                                                                 const model<T>& m,
                                                                 view<dgc_tensor_record<T>> records,
                                                                 view<const dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::accumulate(as_thrust(on), p, as_thrust(m), as_thrust(records), as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, select_exact, void)(const backend& on, const dgc_tensor_plan<T>& p,
                                                                   kept_rule k_of, const model<T>& m,
                                                                   view<dgc_tensor_record<T>> records,
                                                                   view<const dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::select_exact(as_thrust(on), p, k_of, as_thrust(m), as_thrust(records), as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, select_sampled, void)(
    const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg, kept_rule k_of,
    std::uint64_t seed, std::uint64_t step_number, const model<T>& m, view<dgc_tensor_record<T>> records,
    view<const dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::select_sampled(as_thrust(on), p, cfg, k_of, seed, step_number, as_thrust(m),
                                          as_thrust(records), as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, workspace_bytes, std::size_t)(const sampled_threshold_config& cfg,
                                                                             std::size_t n, std::size_t k) {
  return dgc_thrust_ops<Kernels>::template workspace_bytes<T>(thrust_of_t<Kernels>{}, cfg, n, k);
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, read_gradient, void)(const backend& on, gradient_read read,
                                                                    view<const T> g, view<dgc_tensor_record<T>> records,
                                                                    std::size_t t) {
  dgc_thrust_ops<Kernels>::read_gradient(as_thrust(on), read, as_thrust(g), as_thrust(records), t);
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, plan, void)(const backend& on, view<dgc_tensor_record<T>> records,
                                                           const dgc_step_plan& plan, view<dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::plan(as_thrust(on), as_thrust(records), plan, as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, exact_bounds, void)(const backend& on, momentum_kind kind, T m,
                                                                   view<const T> g, view<const T> u, view<const T> v,
                                                                   view<dgc_tensor_record<T>> records, std::size_t t) {
  dgc_thrust_ops<Kernels>::exact_bounds(as_thrust(on), kind, m, as_thrust(g), as_thrust(u), as_thrust(v),
                                        as_thrust(records), t);
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, settle_guard, void)(const backend& on,
                                                                   view<const dgc_tensor_record<T>> records,
                                                                   view<dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::settle_guard(as_thrust(on), as_thrust(records), as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, dense_step, void)(const backend& on, view<const T> g, view<T> values,
                                                                 view<dgc_tensor_record<T>> records, std::size_t t,
                                                                 view<const dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::dense_step(as_thrust(on), as_thrust(g), as_thrust(values), as_thrust(records), t,
                                      as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, compressed_step, void)(
    const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg, view<const T> g, view<T> u,
    view<T> v, view<std::uint32_t> idx, view<T> values, view<std::byte> workspace, dgc_separate_state&,
    view<dgc_tensor_record<T>> records, std::size_t t, view<const dgc_step_record> step) {
  typename dgc_thrust_ops<Kernels>::template selection_state<T> state{};
  dgc_thrust_ops<Kernels>::compressed_step(as_thrust(on), p, cfg, as_thrust(g), as_thrust(u), as_thrust(v),
                                           as_thrust(idx), as_thrust(values), as_thrust(workspace), state,
                                           as_thrust(records), t, as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(dgc_separate_kernels, commit, void)(const backend& on, view<dgc_tensor_record<T>> records,
                                                             view<dgc_step_record> step) {
  dgc_thrust_ops<Kernels>::commit(as_thrust(on), as_thrust(records), as_thrust(step));
}

}  // namespace detail
}  // namespace gradcomp
/// @endcond
