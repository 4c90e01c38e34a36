// detail::qsgd_ops<thrust_backend<System>>: QSGD's kernels on the portable Thrust backend, one
// thread per bucket with the CPU's arithmetic (qsgd/step_plan.hpp: each bucket's squares summed
// in element order, one Philox block per four elements), so every message is bitwise the CPU
// backend's.
#pragma once

#include "step_plan.hpp"
#include "../thrust/kernel_support.hpp"
#include "../thrust/model_table.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// The first and last element of bucket k.
GRADCOMP_HD inline void qsgd_bucket_range(std::size_t k, std::size_t bucket, std::size_t n, std::size_t& first,
                                          std::size_t& last) noexcept {
  first = k * bucket;
  last = n - first < bucket ? n : first + bucket;
}

template <class T>
struct qsgd_measure_op {
  const T* g;
  std::size_t n;
  std::size_t bucket;
  qsgd_norm kind;
  float* measured;
  GRADCOMP_HD void operator()(std::size_t k) const {
    std::size_t first = 0, last = 0;
    qsgd_bucket_range(k, bucket, n, first, last);
    measured[k] = qsgd_bucket_norm(g, first, last, kind);
  }
};

struct qsgd_flags_op {
  const float* measured;
  std::size_t count;
  qsgd_record* r;
  GRADCOMP_HD void operator()(std::size_t) const { qsgd_flags(measured, count, *r); }
};

// One bucket per thread, where the verdict allows: its norm into the message, its values.
template <class T>
struct qsgd_step_op {
  qsgd_step_params p;
  std::uint32_t tensor;
  const T* g;
  T* values;
  std::size_t n;
  const float* measured;
  float* scales;
  const qsgd_step_record* step;
  GRADCOMP_HD void operator()(std::size_t k) const {
    if (step->status != static_cast<std::int32_t>(errc::ok)) return;
    std::size_t first = 0, last = 0;
    qsgd_bucket_range(k, p.bucket, n, first, last);
    scales[k] = measured[k];
    qsgd_apply_bucket(p, tensor, measured[k], g, values, first, last);
  }
};

// A tensor sent whole, where the verdict allows.
template <class T>
struct qsgd_copy_op {
  const T* g;
  T* values;
  const qsgd_step_record* step;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (step->status == static_cast<std::int32_t>(errc::ok)) values[i] = g[i];
  }
};

// Bucket k of compressed tensor t of a model: its norm into the tensor's norms (aux[0]).
template <class T>
struct qsgd_model_measure_op {
  std::size_t bucket;
  qsgd_norm kind;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t, std::uint64_t k) const {
    qsgd_measure_op<T>{m.g, m.numel, bucket, kind, static_cast<float*>(m.aux[0])}(k);
  }
};

// Compressed tensor t's record from its norms.
template <class T>
struct qsgd_model_flags_op {
  qsgd_record* records;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t) const {
    if (records[t].compressed != 0) qsgd_flags_op{static_cast<const float*>(m.aux[0]), m.items[1], records + t}(0);
  }
};

// Item j of tensor t of a model: bucket j of a compressed tensor (qsgd_step_op), element j of one
// sent whole (qsgd_copy_op).
template <class T>
struct qsgd_model_step_op {
  qsgd_step_params p;
  const qsgd_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t, std::uint64_t j) const {
    if (m.aux[0] == nullptr) qsgd_copy_op<T>{m.g, m.values, step}(j);
    else qsgd_step_op<T>{p, t, m.g, m.values, m.numel, static_cast<const float*>(m.aux[0]), m.scales, step}(j);
  }
};

}  // namespace thrust_impl

/// QSGD's kernels on the Thrust backend: the norms, the records and the verdict stay in the
/// system's memory, and the host issues a step without waiting. A whole model's step (its
/// `model<T>`, thrust/model_table.hpp: a compressed tensor's norms in its first aux buffer) is one
/// launch for every bucket's norm, one for the records, one for the plan and one for every bucket
/// of every compressed tensor and every element of the others; a separate backend issues the same
/// work tensor by tensor.
template <class System>
struct qsgd_ops<thrust_backend<System>> {
  template <class T>
  using model = thrust_impl::model_table<T, System>;

  template <class T>
  static void measure(const thrust_backend<System>& on, const qsgd_step_params& p, const model<T>& m,
                      thrust_view<qsgd_record, System> records) {
    m.for_each_item(on.stream, 1, thrust_impl::qsgd_model_measure_op<T>{p.bucket, p.norm});
    m.for_each_tensor(on.stream, thrust_impl::qsgd_model_flags_op<T>{records.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, const qsgd_step_params& p, const model<T>& m,
                    thrust_view<const qsgd_step_record, System> step) {
    m.for_each_item(on.stream, 0, thrust_impl::qsgd_model_step_op<T>{p, step.data()});
  }

  // One tensor at a time (a separate backend's kernels).
  template <class T>
  static void measure(const thrust_backend<System>& on, const qsgd_step_params& p, thrust_view<const T, System> g,
                      thrust_view<float, System> measured, thrust_view<qsgd_record, System> records, std::size_t t) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                       measured.size(),
                       thrust_impl::qsgd_measure_op<T>{g.data(), g.size(), p.bucket, p.norm, measured.data()});
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::qsgd_flags_op{measured.data(), measured.size(), records.data() + t});
  }
  static void plan(const thrust_backend<System>& on, thrust_view<const qsgd_record, System> records,
                   thrust_view<qsgd_step_record, System> step) {
    thrust_impl::run_plan<System>(on.stream, records.data(), records.size(), step.data());
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, const qsgd_step_params& p, thrust_view<const T, System> g,
                    thrust_view<const float, System> measured, thrust_view<float, System> scales,
                    thrust_view<T, System> values, thrust_view<const qsgd_record, System>, std::size_t t,
                    thrust_view<const qsgd_step_record, System> step) {
    if (measured.empty()) {  // sent whole
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                         thrust_impl::qsgd_copy_op<T>{g.data(), values.data(), step.data()});
      return;
    }
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                       measured.size(),
                       thrust_impl::qsgd_step_op<T>{p, static_cast<std::uint32_t>(t), g.data(), values.data(),
                                                    g.size(), measured.data(), scales.data(), step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
