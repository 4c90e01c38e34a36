// detail::adacomp_ops<thrust_backend<System>>: AdaComp's kernels on the portable Thrust backend,
// with the CPU's arithmetic and its order for the scale's sum (adacomp/step_plan.hpp: chunks of
// bins, each summed in bin order, the chunks in order), so every message and residual is bitwise
// the CPU backend's. The bins are measured and applied in parallel; each bin writes its selection
// at the exclusive scan of the counts before it, which keeps the indices ascending.
#pragma once

#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>

#include "step_plan.hpp"
#include "../thrust/kernel_support.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One thread per bin: its gmax, largest key of g and count.
template <class T>
struct adacomp_bin_op {
  const T* g;
  const T* r;  // null: a tensor sent whole
  std::size_t n;
  std::size_t bin;
  adacomp_bin<T>* bins;
  GRADCOMP_HD void operator()(std::size_t b) const {
    const std::size_t begin = b * bin;
    bins[b] = adacomp_measure_bin(g, r, begin, begin + bin < n ? begin + bin : n);
  }
};

// One thread per chunk of bins: its sums in bin order.
template <class T>
struct adacomp_chunk_op {
  const adacomp_bin<T>* bins;
  std::size_t count;
  adacomp_chunk<T>* chunks;
  GRADCOMP_HD void operator()(std::size_t c) const { chunks[c] = adacomp_chunk_of(bins, count, c); }
};

template <class T>
struct adacomp_fold_op {
  const adacomp_chunk<T>* chunks;
  std::size_t count;
  std::size_t bins;
  adacomp_record* r;
  GRADCOMP_HD void operator()(std::size_t) const { adacomp_fold(chunks, count, bins, *r); }
};

template <class T>
struct adacomp_count_op {
  const adacomp_bin<T>* bins;
  GRADCOMP_HD std::uint32_t operator()(std::size_t b) const { return bins[b].count; }
};

struct adacomp_plan_op {
  const adacomp_record* records;
  std::size_t count;
  adacomp_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_adacomp_step(records, count, step); }
};

// One thread per bin, where the verdict allows: the bin's selection at its offset, its residuals.
template <class T>
struct adacomp_apply_op {
  const T* g;
  T* r;
  std::uint32_t* indices;
  T* values;
  std::size_t n;
  std::size_t bin;
  const adacomp_bin<T>* bins;
  const std::uint32_t* offsets;
  const adacomp_record* record;
  const adacomp_step_record* step;
  GRADCOMP_HD void operator()(std::size_t b) const {
    if (step->status != static_cast<std::int32_t>(errc::ok)) return;
    const std::size_t begin = b * bin;
    adacomp_apply_bin(g, r, begin, begin + bin < n ? begin + bin : n, bins[b].top_G, static_cast<T>(record->scale),
                      indices + offsets[b], values + offsets[b]);
  }
};

// One thread per element of a tensor sent whole, where the verdict allows.
template <class T>
struct adacomp_dense_op {
  const T* g;
  T* values;
  const adacomp_step_record* step;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (step->status == static_cast<std::int32_t>(errc::ok)) values[i] = g[i];
  }
};

// Publishes the count as the tensor's kept entries, where the verdict allows.
struct adacomp_publish_op {
  adacomp_record* r;
  const adacomp_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (step->status == static_cast<std::int32_t>(errc::ok)) r->kept = r->count;
  }
};

}  // namespace thrust_impl

/// AdaComp's kernels on the Thrust backend: the bins, the records and the verdict stay in the
/// system's memory, and the host issues a step without waiting.
template <class System>
struct adacomp_ops<thrust_backend<System>> {
  template <class T>
  static void measure(const thrust_backend<System>& on, thrust_view<const T, System> g,
                      thrust_view<const T, System> r, std::size_t bin, thrust_view<adacomp_bin<T>, System> bins,
                      thrust_view<adacomp_chunk<T>, System> chunks, thrust_view<std::uint32_t, System> offsets,
                      thrust_view<adacomp_record, System> records, std::size_t t) {
    const std::size_t nb = bins.size(), nc = chunks.size();
    if (nb != 0) {
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), nb,
                         thrust_impl::adacomp_bin_op<T>{g.data(), r.empty() ? nullptr : r.data(), g.size(), bin,
                                                        bins.data()});
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), nc,
                         thrust_impl::adacomp_chunk_op<T>{bins.data(), nb, chunks.data()});
      if (!offsets.empty()) {
        const auto counts = thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0),
                                                            thrust_impl::adacomp_count_op<T>{bins.data()});
        thrust::exclusive_scan(thrust_impl::exec<System>(on.stream), counts, counts + nb, offsets.data(),
                               std::uint32_t(0));
      }
    }
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::adacomp_fold_op<T>{chunks.data(), nc, nb, records.data() + t});
  }
  static void plan(const thrust_backend<System>& on, thrust_view<const adacomp_record, System> records,
                   thrust_view<adacomp_step_record, System> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::adacomp_plan_op{records.data(), records.size(), step.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, thrust_view<const T, System> g, thrust_view<T, System> r,
                    std::size_t bin, thrust_view<std::uint32_t, System> indices, thrust_view<T, System> values,
                    thrust_view<const adacomp_bin<T>, System> bins, thrust_view<const std::uint32_t, System> offsets,
                    thrust_view<adacomp_record, System> records, std::size_t t,
                    thrust_view<const adacomp_step_record, System> step) {
    if (r.empty()) {
      if (!g.empty())
        thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                           thrust_impl::adacomp_dense_op<T>{g.data(), values.data(), step.data()});
      return;
    }
    if (!bins.empty())
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), bins.size(),
                         thrust_impl::adacomp_apply_op<T>{g.data(), r.data(), indices.data(), values.data(), g.size(),
                                                          bin, bins.data(), offsets.data(), records.data() + t,
                                                          step.data()});
    thrust_impl::run_once<System>(on.stream, thrust_impl::adacomp_publish_op{records.data() + t, step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
