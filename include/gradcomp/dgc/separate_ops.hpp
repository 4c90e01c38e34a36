// detail::dgc_ops<separate_backend<Kernels>>: the DGC step's kernels on a separate backend, each
// dgc_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// dgc/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../momentum_kind.hpp"
#include "../selection_types.hpp"
#include "../separate_backend.hpp"
#include "step_plan.hpp"
#include "warmup_schedule.hpp"

namespace gradcomp {
namespace detail {

// The Thrust backend keeps no per-tensor state between steps.
struct dgc_separate_state {};

// The kernels on T (dgc_ops' members of the same names).
template <class Kernels, class T>
struct dgc_separate_kernels {
  using backend = separate_backend<Kernels>;
  template <class U>
  using view = separate_view<U, Kernels>;
  template <class U>
  using model = separate_model<Kernels, U>;

  // A whole model at once (dgc_ops<thrust_backend<System>>'s operations of the same names).
  static void read_gradients(const backend& on, gradient_read read, const model<T>& m,
                             view<dgc_tensor_record<T>> records);
  static void exact_bounds(const backend& on, momentum_kind kind, T mom, const model<T>& m,
                           view<dgc_tensor_record<T>> records);
  static void dense_steps(const backend& on, const model<T>& m, view<dgc_tensor_record<T>> records,
                          view<const dgc_step_record> step);
  static void accumulate(const backend& on, const dgc_tensor_plan<T>& p, const model<T>& m,
                         view<dgc_tensor_record<T>> records, view<const dgc_step_record> step);
  static void select_exact(const backend& on, const dgc_tensor_plan<T>& p, kept_rule k_of, const model<T>& m,
                           view<dgc_tensor_record<T>> records, view<const dgc_step_record> step);
  static void select_sampled(const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg,
                             kept_rule k_of, std::uint64_t seed, std::uint64_t step_number, const model<T>& m,
                             view<dgc_tensor_record<T>> records, view<const dgc_step_record> step);

  // One tensor at a time.
  static std::size_t workspace_bytes(const sampled_threshold_config& cfg, std::size_t n, std::size_t k);
  static void read_gradient(const backend& on, gradient_read read, view<const T> g, view<dgc_tensor_record<T>> records,
                            std::size_t t);
  static void plan(const backend& on, view<dgc_tensor_record<T>> records, const dgc_step_plan& plan,
                   view<dgc_step_record> step);
  static void exact_bounds(const backend& on, momentum_kind kind, T m, view<const T> g, view<const T> u,
                           view<const T> v, view<dgc_tensor_record<T>> records, std::size_t t);
  static void settle_guard(const backend& on, view<const dgc_tensor_record<T>> records, view<dgc_step_record> step);
  static void dense_step(const backend& on, view<const T> g, view<T> values, view<dgc_tensor_record<T>> records,
                         std::size_t t, view<const dgc_step_record> step);
  static void compressed_step(const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg,
                              view<const T> g, view<T> u, view<T> v, view<std::uint32_t> idx, view<T> values,
                              view<std::byte> workspace, dgc_separate_state& state, view<dgc_tensor_record<T>> records,
                              std::size_t t, view<const dgc_step_record> step);
  static void commit(const backend& on, view<dgc_tensor_record<T>> records, view<dgc_step_record> step);
};

template <class Kernels>
struct dgc_ops<separate_backend<Kernels>> : separate_method_ops<dgc_separate_kernels, Kernels> {
  using base = separate_method_ops<dgc_separate_kernels, Kernels>;
  template <class T>
  using model = separate_model<Kernels, T>;
  template <class T>
  using selection_state = dgc_separate_state;
  template <class T>
  static std::size_t workspace_bytes(const separate_backend<Kernels>&, const sampled_threshold_config& cfg,
                                     std::size_t n, std::size_t k) {
    return dgc_separate_kernels<Kernels, T>::workspace_bytes(cfg, n, k);
  }
  using base::f::read_gradient, base::d::read_gradient, base::f::plan, base::d::plan, base::f::exact_bounds,
      base::d::exact_bounds, base::f::settle_guard, base::d::settle_guard, base::f::dense_step, base::d::dense_step,
      base::f::compressed_step, base::d::compressed_step, base::f::commit, base::d::commit, base::f::read_gradients,
      base::d::read_gradients, base::f::dense_steps, base::d::dense_steps, base::f::accumulate, base::d::accumulate,
      base::f::select_exact, base::d::select_exact, base::f::select_sampled, base::d::select_sampled;
};

}  // namespace detail
}  // namespace gradcomp
