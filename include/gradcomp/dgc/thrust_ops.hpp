// detail::dgc_ops<thrust_backend<System>>: the DGC step's kernels on the portable Thrust backend
// (dgc/step_plan.hpp). The step-level decisions run as single-thread operations over the records
// in the system's memory; every per-tensor kernel reads the verdict there, so the host issues a
// whole step without waiting for any of it. The arithmetic is the CPU backend's
// (thrust/dgc_kernels.hpp), so every result is bitwise its.
#pragma once

#include <cstddef>
#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "../thrust/kernel_support.hpp"
#include "../thrust/model_sampled.hpp"
#include "../thrust/model_select.hpp"
#include "../thrust/model_table.hpp"
#include "../thrust/system_backend.hpp"
#include "step_plan.hpp"
#include "warmup_schedule.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// The step-level decisions of dgc/step_plan.hpp, run as single-thread steps.
template <class T>
struct plan_step_op {
  dgc_tensor_record<T>* records;
  std::size_t count;
  dgc_step_plan plan;
  dgc_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_dgc_step(records, count, plan, step); }
};
template <class T>
struct settle_guard_op {
  const dgc_tensor_record<T>* records;
  std::size_t count;
  dgc_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { settle_dgc_guard(records, count, step); }
};
template <class T>
struct commit_step_op {
  dgc_tensor_record<T>* records;
  std::size_t count;
  dgc_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { commit_dgc_step(records, count, step); }
};

// --- The DGC step on the device: each operation reads the step's verdict and the tensor's record
// where they are, and writes the record there; the host issues them without waiting. ----------

// The gradient's norm (cpu::norm_result) into the tensor's record.
template <class T>
struct record_norm {
  const cpu::norm_result* n;
  dgc_tensor_record<T>* r;
  GRADCOMP_HD void operator()(std::size_t) const {
    r->norm_scale = n->finite ? n->scale : 1.0;
    r->norm_root = n->finite ? n->root : quiet_nan();
    r->largest = n->scale == 1.0 ? r->norm_root : n->scale;
  }
};

// The gradient's largest magnitude (NaN for a NaN or an infinity) into the tensor's record.
template <class T>
struct record_largest {
  const key_t<T>* key;
  dgc_tensor_record<T>* r;
  GRADCOMP_HD void operator()(std::size_t) const { r->largest = value_of_largest_key<T>(*key); }
};

// The exact magnitudes of a tensor the overflow guard marked (detail::settle_exact_bounds).
template <class T>
struct record_exact_bounds {
  const key_pair<key_t<T>>* keys;
  dgc_tensor_record<T>* r;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (r->status != static_cast<std::int32_t>(errc::state_overflow)) return;
    const state_magnitudes e = magnitudes_of<T>(*keys);
    settle_exact_bounds(*r, e.u, e.v, e.finite);
  }
};

// A dense tensor's clipped gradient, where the verdict allows.
template <class T>
struct dense_step_op {
  const T* g;
  T* values;
  const dgc_tensor_record<T>* r;
  const dgc_step_record* step;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (step_may_run(*step)) values[i] = static_cast<T>(r->coef) * g[i];
  }
};
template <class T>
struct record_kept {
  dgc_tensor_record<T>* r;
  const dgc_step_record* step;
  std::uint64_t kept;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (step_may_run(*step)) r->kept = kept;
  }
};

// Momentum correction into the accumulator with the record's clip coefficient, where the verdict
// allows.
template <class T>
struct step_accumulate_op {
  momentum_accumulate_op<T> op;
  const dgc_tensor_record<T>* r;
  const dgc_step_record* step;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (!step_may_run(*step)) return;
    momentum_accumulate_op<T> o = op;
    o.c = static_cast<T>(r->coef);
    o(i);
  }
};

// A tensor whose selection could not be issued (a workspace too small), where the verdict allows.
template <class T>
struct fail_tensor {
  dgc_tensor_record<T>* r;
  const dgc_step_record* step;
  errc e;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (step_may_run(*step)) r->status = static_cast<std::int32_t>(e);
  }
};

// The selected entries moved out of the accumulator (and masked in the momentum): entry j of the
// selection, where the verdict allows and the selection succeeded with more than j entries.
template <class T>
struct step_gather_op {
  gather_and_zero_op<T> op;
  const dgc_tensor_record<T>* r;
  const dgc_step_record* step;
  GRADCOMP_HD void operator()(std::size_t j) const {
    if (step_may_run(*step) && r->status == static_cast<std::int32_t>(errc::ok) && j < r->kept) op(j);
  }
};

// The magnitude keys one accumulation would leave at i, writing nothing; zero keys where the
// tensor's record does not ask for them (dgc_ops::exact_bounds: only a tensor marked by the overflow
// guard).
template <class T>
struct marked_accumulated_keys {
  accumulated_keys_op<T> op;
  const dgc_tensor_record<T>* r;
  GRADCOMP_HD key_pair<key_t<T>> operator()(std::size_t i) const {
    if (r->status != static_cast<std::int32_t>(errc::state_overflow)) return key_pair<key_t<T>>{0, 0};
    accumulated_keys_op<T> o = op;
    o.c = static_cast<T>(r->coef);
    return o(i);
  }
};

// --- The same over a whole model (thrust/model_table.hpp): a tensor's momentum is its first own
// buffer, its accumulator its error buffer (null for a tensor sent dense). -------------------

// The terms of every tensor's reductions: squares (and, for double, the fallback's keys and
// scaled squares where the plain sum overflowed), magnitude keys, the marked accumulations.
template <class T>
struct model_square_leaf {
  const model_tensor<T>* tensors;
  GRADCOMP_HD double operator()(std::uint32_t t, std::uint64_t i) const { return square_leaf<T>{tensors[t].g}(i); }
};
template <class T>
struct model_overflowed_key_leaf {
  const model_tensor<T>* tensors;
  const double* sums;
  GRADCOMP_HD key_t<T> operator()(std::uint32_t t, std::uint64_t i) const {
    return key_if_overflowed<T>{tensors[t].g, sums + t}(i);
  }
};
template <class T>
struct model_scaled_square_leaf {
  const model_tensor<T>* tensors;
  const double* sums;
  const key_t<T>* largest;
  GRADCOMP_HD double operator()(std::uint32_t t, std::uint64_t i) const {
    return scaled_square_if_overflowed<T>{tensors[t].g, sums + t, largest + t}(i);
  }
};
template <class T>
struct model_key_leaf {
  const model_tensor<T>* tensors;
  GRADCOMP_HD key_t<T> operator()(std::uint32_t t, std::uint64_t i) const {
    return key_of_values<T>{tensors[t].g}(i);
  }
};
template <class T>
struct model_marked_keys_leaf {
  momentum_kind kind;
  T m;
  const model_tensor<T>* tensors;
  const dgc_tensor_record<T>* records;
  GRADCOMP_HD key_pair<key_t<T>> operator()(std::uint32_t t, std::uint64_t i) const {
    const model_tensor<T>& x = tensors[t];
    if (x.e == nullptr) return key_pair<key_t<T>>{0, 0};
    return marked_accumulated_keys<T>{
        accumulated_keys_op<T>{kind, m, T(0), x.g, static_cast<const T*>(x.aux[0]), x.e}, records + t}(i);
  }
};

// Tensor t's norm from its sums (with the fallback for double), into its record.
template <class T>
struct model_norm_record_op {
  const double* sums;
  const key_t<T>* largest;  // null: no fallback
  const double* scaled;
  cpu::norm_result* results;
  dgc_tensor_record<T>* records;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    norm_combine{sums + t, results + t}(0);
    if (largest != nullptr) norm_fallback<T>{sums + t, largest + t, scaled + t, results + t}(0);
    record_norm<T>{results + t, records + t}(0);
  }
};

// Tensor t's largest magnitude into its record.
template <class T>
struct model_largest_record_op {
  dgc_tensor_record<T>* records;
  GRADCOMP_HD void operator()(const key_t<T>& key, std::uint32_t t) const { record_largest<T>{&key, records + t}(0); }
};

// A compressed tensor's exact magnitudes into its record, where the guard marked it.
template <class T>
struct model_exact_bounds_op {
  dgc_tensor_record<T>* records;
  GRADCOMP_HD void operator()(const key_pair<key_t<T>>& keys, std::uint32_t t) const {
    record_exact_bounds<T>{&keys, records + t}(0);
  }
};

// Element i of a dense tensor t (space 0): dense_step_op; its kept count (one thread a tensor).
template <class T>
struct model_dense_op {
  const dgc_tensor_record<T>* records;
  const dgc_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t, std::uint64_t i) const {
    dense_step_op<T>{x.g, x.values, records + t, step}(i);
  }
};
template <class T>
struct model_dense_kept_op {
  dgc_tensor_record<T>* records;
  const dgc_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t) const {
    if (x.e == nullptr) record_kept<T>{records + t, step, x.numel}(0);
  }
};

// Element i of a compressed tensor t (space 1): step_accumulate_op.
template <class T>
struct model_accumulate_op {
  momentum_kind kind;
  T m;
  const dgc_tensor_record<T>* records;
  const dgc_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t, std::uint64_t i) const {
    step_accumulate_op<T>{momentum_accumulate_op<T>{kind, m, T(0), x.g, static_cast<T*>(x.aux[0]), x.e}, records + t,
                          step}(i);
  }
};

// A compressed tensor's exact top-k at the step's kept_rule: cpu::exact_topk's path.
struct dgc_exact_mode {
  kept_rule k_of;
  template <class T>
  GRADCOMP_HD model_topk_mode operator()(const model_tensor<T>&, std::uint32_t, std::size_t n) const {
    return model_topk_mode{k_of(n), model_topk_kind::planned, 0};
  }
  template <class T>
  model_topk_bounds bounds(const model_tensor<T>&, std::size_t n) const {
    return planned_bounds(n, k_of(n));
  }
};

// Where tensor t's selection outcome goes: its record.
template <class T>
struct record_sink {
  dgc_tensor_record<T>* records;
  GRADCOMP_HD selection_sink<T> operator()(std::uint32_t t) const {
    return selection_sink<T>{&records[t].selection, &records[t].status, &records[t].kept};
  }
};

// Entry j of tensor t's selection (element `index`): moved out of the accumulator into the
// message (gather_and_zero_op), and masked in the momentum where asked.
template <class T>
struct model_take_op {
  bool masking;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t, std::uint64_t j, std::uint32_t index) const {
    x.indices[j] = index;
    gather_and_zero_op<T>{x.e, x.indices, x.values, masking ? static_cast<T*>(x.aux[0]) : nullptr}(j);
  }
};

// A compressed tensor's exact top-k into its record (publish_exact).
template <class T>
struct model_publish_op {
  const model_topk_tensor<T>* sel;
  record_sink<T> sink;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t) const {
    if (x.e != nullptr) publish_exact<T>{&sel[t].s, sink(t), sel[t].k}(0);
  }
};

}  // namespace thrust_impl

template <class System>
struct dgc_ops<thrust_backend<System>> {
  using backend = thrust_backend<System>;
  template <class T>
  using view = thrust_view<T, System>;

  // The step-level functions run in single-thread operations; the per-tensor ones read the
  // verdict and their tensor's record in the system's memory and write the record there. The
  // compressed step runs its parts one after the other (no per-tensor state between steps).
  struct selection_state_none {};
  template <class T>
  using selection_state = selection_state_none;

  // --- A whole model at once (the compressor's table, thrust/model_table.hpp): the gradients'
  // reads, the overflow guard's exact pass and the dense tensors' steps, a fixed number of
  // launches whatever the tensors; each compressed tensor's selection is still its own
  // (select_step).
  template <class T>
  using model = thrust_impl::model_table<T, System>;

  template <class T>
  static void read_gradients(const backend& on, gradient_read read, const model<T>& m,
                             view<dgc_tensor_record<T>> records) {
    if (m.size() == 0 || read == gradient_read::none) return;
    if (read == gradient_read::largest) {
      m.template reduce_each<key_t<T>>(on.stream, thrust_impl::model_key_leaf<T>{m.tensors()},
                                       thrust_impl::key_max<key_t<T>>{},
                                       thrust_impl::model_largest_record_op<T>{records.data()});
      return;
    }
    thrust_impl::scratch<double, System> sums(on.stream, m.size());
    thrust_impl::scratch<cpu::norm_result, System> results(on.stream, m.size());
    m.sums().issue(on.stream, thrust_impl::model_square_leaf<T>{m.tensors()}, sum_merge{}, sums.data());
    if constexpr (thrust_impl::squares_may_overflow<T>) {
      thrust_impl::scratch<key_t<T>, System> largest(on.stream, m.size());
      thrust_impl::scratch<double, System> scaled(on.stream, m.size());
      m.sums().issue(on.stream, thrust_impl::model_overflowed_key_leaf<T>{m.tensors(), sums.data()},
                     thrust_impl::key_max<key_t<T>>{}, largest.data());
      m.sums().issue(on.stream, thrust_impl::model_scaled_square_leaf<T>{m.tensors(), sums.data(), largest.data()},
                     sum_merge{}, scaled.data());
      m.for_each_tensor(on.stream, thrust_impl::model_norm_record_op<T>{sums.data(), largest.data(), scaled.data(),
                                                                        results.data(), records.data()});
    } else {
      m.for_each_tensor(on.stream, thrust_impl::model_norm_record_op<T>{sums.data(), nullptr, nullptr, results.data(),
                                                                        records.data()});
    }
  }
  // The overflow guard's exact pass: every compressed tensor's, reading the data of the marked
  // ones only.
  template <class T>
  static void exact_bounds(const backend& on, momentum_kind kind, T mom, const model<T>& m,
                           view<dgc_tensor_record<T>> records) {
    m.template reduce_each<thrust_impl::key_pair<key_t<T>>>(
        on.stream, thrust_impl::model_marked_keys_leaf<T>{kind, mom, m.tensors(), records.data()},
        thrust_impl::key_pair_max<key_t<T>>{}, thrust_impl::model_exact_bounds_op<T>{records.data()});
  }
  // Every dense tensor's step.
  template <class T>
  static void dense_steps(const backend& on, const model<T>& m, view<dgc_tensor_record<T>> records,
                          view<const dgc_step_record> step) {
    m.for_each_item(on.stream, 0, thrust_impl::model_dense_op<T>{records.data(), step.data()});
    m.for_each_tensor(on.stream, thrust_impl::model_dense_kept_op<T>{records.data(), step.data()});
  }
  // Every compressed tensor's momentum correction into its accumulator.
  template <class T>
  static void accumulate(const backend& on, const dgc_tensor_plan<T>& p, const model<T>& m,
                         view<dgc_tensor_record<T>> records, view<const dgc_step_record> step) {
    m.for_each_item(on.stream, 1, thrust_impl::model_accumulate_op<T>{p.kind, p.momentum, records.data(), step.data()});
  }

  // Every compressed tensor's exact top-k of its accumulator, k by the step's rule
  // (thrust/model_select.hpp), the selected entries moved out and momentum factor masking: a fixed
  // number of launches whatever the tensors; every part obeys the verdict on the device.
  template <class T>
  static void select_exact(const backend& on, const dgc_tensor_plan<T>& p, kept_rule k_of, const model<T>& m,
                           view<dgc_tensor_record<T>> records, view<const dgc_step_record> step) {
    using mode = thrust_impl::dgc_exact_mode;
    thrust_impl::model_topk<T, System, mode> topk(on.stream, m, 1, mode{k_of});
    topk.issue(on.stream, m, &step.data()->status);
    topk.for_each_selected(on.stream, m, thrust_impl::model_take_op<T>{p.masking});
    m.for_each_tensor(on.stream,
                      thrust_impl::model_publish_op<T>{topk.tensors(), thrust_impl::record_sink<T>{records.data()}});
  }
  // Every compressed tensor's sampled threshold of its accumulator, k by the step's rule
  // (thrust/model_sampled.hpp; seeds derived from `seed`, the tensor and `step_number`), the
  // selected entries moved out and momentum factor masking: a fixed number of launches whatever the
  // tensors; every part obeys the verdict on the device.
  template <class T>
  static void select_sampled(const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg,
                             kept_rule k_of, std::uint64_t seed, std::uint64_t step_number, const model<T>& m,
                             view<dgc_tensor_record<T>> records, view<const dgc_step_record> step) {
    thrust_impl::model_sampled<T, System, kept_rule> selection(on.stream, m, 1, k_of, cfg);
    selection.issue(on.stream, m, seed, step_number, &step.data()->status,
                    thrust_impl::record_sink<T>{records.data()}, thrust_impl::model_take_op<T>{p.masking});
  }

  template <class T>
  static std::size_t workspace_bytes(const backend&, const sampled_threshold_config& cfg, std::size_t n, std::size_t k) {
    return thrust_impl::sampled_threshold_workspace_bytes<T, System>(cfg, n, k);
  }

  template <class T>
  static void read_gradient(const backend& on, gradient_read read, view<const T> g,
                                view<dgc_tensor_record<T>> records, std::size_t t) {
    dgc_tensor_record<T>* r = records.data() + t;
    if (read == gradient_read::norm) {
      thrust_impl::scratch<thrust_impl::norm_scratch<T>, System> w(on.stream, 1);
      thrust_impl::issue_l2_norm<T, System>(on.stream, g.data(), g.size(), w.data());
      thrust_impl::run_once<System>(on.stream, thrust_impl::record_norm<T>{&w.data()->result, r});
    } else if (read == gradient_read::largest) {
      thrust_impl::scratch<key_t<T>, System> key(on.stream, 1);
      const auto keys = thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0),
                                                        thrust_impl::key_of_values<T>{g.data()});
      thrust_impl::execution<System>::reduce_into(on.stream, keys, g.size(), key_t<T>(0),
                                                  thrust_impl::key_max<key_t<T>>{}, key.data());
      thrust_impl::run_once<System>(on.stream, thrust_impl::record_largest<T>{key.data(), r});
    }
  }
  template <class T>
  static void plan(const backend& on, view<dgc_tensor_record<T>> records, const dgc_step_plan& plan,
                       view<dgc_step_record> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::plan_step_op<T>{records.data(), records.size(), plan, step.data()});
  }
  // Where the guard marked the tensor: the step's exact magnitudes. The reduction runs for every
  // compressed tensor (the mark is on the device) and reads the data only for a marked one.
  template <class T>
  static void exact_bounds(const backend& on, momentum_kind kind, T m, view<const T> g, view<const T> u,
                               view<const T> v, view<dgc_tensor_record<T>> records, std::size_t t) {
    using pair = thrust_impl::key_pair<key_t<T>>;
    dgc_tensor_record<T>* r = records.data() + t;
    thrust_impl::scratch<pair, System> keys(on.stream, 1);
    const auto marked = thrust::make_transform_iterator(
        thrust::counting_iterator<std::size_t>(0),
        thrust_impl::marked_accumulated_keys<T>{
            thrust_impl::accumulated_keys_op<T>{kind, m, T(0), g.data(), u.data(), v.data()}, r});
    thrust_impl::execution<System>::reduce_into(on.stream, marked, g.size(), pair{0, 0},
                                                thrust_impl::key_pair_max<key_t<T>>{}, keys.data());
    thrust_impl::run_once<System>(on.stream, thrust_impl::record_exact_bounds<T>{keys.data(), r});
  }
  template <class T>
  static void settle_guard(const backend& on, view<const dgc_tensor_record<T>> records,
                               view<dgc_step_record> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::settle_guard_op<T>{records.data(), records.size(), step.data()});
  }
  // A dense tensor's step: the clipped gradient, whole.
  template <class T>
  static void dense_step(const backend& on, view<const T> g, view<T> values, view<dgc_tensor_record<T>> records,
                             std::size_t t, view<const dgc_step_record> step) {
    dgc_tensor_record<T>* r = records.data() + t;
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::dense_step_op<T>{g.data(), values.data(), r, step.data()});
    thrust_impl::run_once<System>(on.stream, thrust_impl::record_kept<T>{r, step.data(), g.size()});
  }
  // A compressed tensor's step: momentum correction into the accumulator, the selection (exact
  // top-k or sampled threshold, published into the record), the selected entries moved out and
  // momentum factor masking; every part obeys the verdict on the device.
  template <class T>
  static void compressed_step(const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg,
                                  view<const T> g, view<T> u, view<T> v, view<std::uint32_t> idx, view<T> values,
                                  view<std::byte> workspace, selection_state<T>&, view<dgc_tensor_record<T>> records,
                                  std::size_t t, view<const dgc_step_record> step) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::step_accumulate_op<T>{thrust_impl::momentum_accumulate_op<T>{
                                                              p.kind, p.momentum, T(0), g.data(), u.data(), v.data()},
                                                          records.data() + t, step.data()});
    select_step(on, p, cfg, u, v, idx, values, workspace, records, t, step);
  }
  // A compressed tensor's step after its accumulation: the selection (exact top-k or sampled
  // threshold, published into the record), the selected entries moved out and momentum factor
  // masking; every part obeys the verdict on the device.
  template <class T>
  static void select_step(const backend& on, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg,
                          view<T> u, view<T> v, view<std::uint32_t> idx, view<T> values, view<std::byte> workspace,
                          view<dgc_tensor_record<T>> records, std::size_t t, view<const dgc_step_record> step) {
    dgc_tensor_record<T>* r = records.data() + t;
    const std::int32_t* gate = &step.data()->status;
    const thrust::counting_iterator<std::size_t> first(0);
    const thrust_impl::selection_sink<T> sink{&r->selection, &r->status, &r->kept};
    workspace_carver carver(span<std::byte>(workspace.data(), workspace.size()));
    result<void> issued;
    if (p.exact) {
      const auto s =
          thrust_impl::issue_exact_topk<T, System>(on.stream, v.data(), v.size(), p.k, idx.data(), carver, gate);
      if (s) thrust_impl::run_once<System>(on.stream, thrust_impl::publish_exact<T>{*s, sink, p.k});
      else issued = fail(s.error());
    } else {
      issued = thrust_impl::issue_sampled_threshold<T, System>(on.stream, v.data(), v.size(), p.k, cfg, p.seed,
                                                               idx.data(), carver, sink, gate);
    }
    if (!issued) thrust_impl::run_once<System>(on.stream, thrust_impl::fail_tensor<T>{r, step.data(), issued.error()});
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), first, p.k,
                       thrust_impl::step_gather_op<T>{
                           thrust_impl::gather_and_zero_op<T>{v.data(), idx.data(), values.data(),
                                                              p.masking ? u.data() : nullptr},
                           r, step.data()});
  }
  template <class T>
  static void commit(const backend& on, view<dgc_tensor_record<T>> records, view<dgc_step_record> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::commit_step_op<T>{records.data(), records.size(), step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
