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
#include "../thrust/model_table.hpp"

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

// A tensor of a model in AdaComp's whole-model launches: its bin size (param), bins (aux[0],
// items in space 1) and chunks of bins (aux[1], items in space 2).
template <class T>
GRADCOMP_HD adacomp_bin<T>* adacomp_model_bins(const model_tensor<T>& m) noexcept {
  return static_cast<adacomp_bin<T>*>(m.aux[0]);
}

// Bin j of a model's tensor: adacomp_bin_op.
template <class T>
struct adacomp_model_bin_op {
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t, std::uint64_t j) const {
    adacomp_bin_op<T>{m.g, m.e, m.numel, m.param, adacomp_model_bins(m)}(j);
  }
};

// Chunk c of a model's tensor: adacomp_chunk_op.
template <class T>
struct adacomp_model_chunk_op {
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t, std::uint64_t c) const {
    adacomp_chunk_op<T>{adacomp_model_bins(m), m.items[1], static_cast<adacomp_chunk<T>*>(m.aux[1])}(c);
  }
};

// The tensor of bin k of the model (the keys of the scan of the counts).
template <class T>
struct adacomp_model_key_op {
  const model_tensor<T>* tensors;
  std::uint32_t count;
  GRADCOMP_HD std::uint32_t operator()(std::size_t k) const { return tensor_of_item(tensors, count, 1, k); }
};

// The count of bin k of the model.
template <class T>
struct adacomp_model_count_op {
  const model_tensor<T>* tensors;
  std::uint32_t count;
  GRADCOMP_HD std::uint32_t operator()(std::size_t k) const {
    const model_tensor<T>& m = tensors[tensor_of_item(tensors, count, 1, k)];
    return adacomp_model_bins(m)[k - m.first[1]].count;
  }
};

// Tensor t's record from its chunks.
template <class T>
struct adacomp_model_fold_op {
  adacomp_record* records;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t) const {
    adacomp_fold_op<T>{static_cast<const adacomp_chunk<T>*>(m.aux[1]), m.items[2], m.items[1], records + t}(0);
  }
};

// Item j of tensor t of a model: bin j of a compressed tensor (adacomp_apply_op, its selection at
// the model's offsets of its bins), element j of one sent whole (adacomp_dense_op).
template <class T>
struct adacomp_model_step_op {
  const std::uint32_t* offsets;  // every bin's of the model
  const adacomp_record* records;
  const adacomp_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t, std::uint64_t j) const {
    if (m.e == nullptr) {
      adacomp_dense_op<T>{m.g, m.values, step}(j);
      return;
    }
    adacomp_apply_op<T>{m.g,          m.e,     m.indices,          m.values, m.numel, m.param, adacomp_model_bins(m),
                        offsets + m.first[1], records + t, step}(j);
  }
};

// A compressed tensor's kept entries, where the verdict allows.
template <class T>
struct adacomp_model_publish_op {
  adacomp_record* records;
  const adacomp_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t) const {
    if (m.e != nullptr) adacomp_publish_op{records + t, step}(0);
  }
};

}  // namespace thrust_impl

/// AdaComp's kernels on the Thrust backend: the bins, the records and the verdict stay in the
/// system's memory, and the host issues a step without waiting. A whole model's step (its
/// `model<T>`, thrust/model_table.hpp: a tensor's bins and chunks in its own buffers, its bin size
/// as its constant) is one launch for every bin, one for every chunk, one segmented scan of every
/// bin's count (into the offsets of the whole model's bins), one for the records, one for the
/// plan, one for every bin of a compressed tensor and every element of the others, one to publish
/// the counts; a separate backend issues the same work tensor by tensor.
template <class System>
struct adacomp_ops<thrust_backend<System>> {
  template <class T>
  using model = thrust_impl::model_table<T, System>;

  // `offsets` holds every bin of the model, in the order of the tensors.
  template <class T>
  static void measure(const thrust_backend<System>& on, const model<T>& m, thrust_view<std::uint32_t, System> offsets,
                      thrust_view<adacomp_record, System> records) {
    m.for_each_item(on.stream, 1, thrust_impl::adacomp_model_bin_op<T>{});
    m.for_each_item(on.stream, 2, thrust_impl::adacomp_model_chunk_op<T>{});
    if (!offsets.empty()) {
      const thrust::counting_iterator<std::size_t> at(0);
      const auto keys = thrust::make_transform_iterator(at, thrust_impl::adacomp_model_key_op<T>{m.tensors(), m.size()});
      const auto counts =
          thrust::make_transform_iterator(at, thrust_impl::adacomp_model_count_op<T>{m.tensors(), m.size()});
      thrust::exclusive_scan_by_key(thrust_impl::exec<System>(on.stream), keys,
                                    keys + static_cast<std::ptrdiff_t>(offsets.size()), counts, offsets.data(),
                                    std::uint32_t(0));
    }
    m.for_each_tensor(on.stream, thrust_impl::adacomp_model_fold_op<T>{records.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, const model<T>& m,
                    thrust_view<const std::uint32_t, System> offsets, thrust_view<adacomp_record, System> records,
                    thrust_view<const adacomp_step_record, System> step) {
    m.for_each_item(on.stream, 0,
                    thrust_impl::adacomp_model_step_op<T>{offsets.data(), records.data(), step.data()});
    m.for_each_tensor(on.stream, thrust_impl::adacomp_model_publish_op<T>{records.data(), step.data()});
  }

  // One tensor at a time (a separate backend's kernels).
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
        using count_of = thrust_impl::member_of<adacomp_bin<T>, std::uint32_t, &adacomp_bin<T>::count>;
        const auto counts =
            thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0), count_of{bins.data()});
        thrust::exclusive_scan(thrust_impl::exec<System>(on.stream), counts, counts + nb, offsets.data(),
                               std::uint32_t(0));
      }
    }
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::adacomp_fold_op<T>{chunks.data(), nc, nb, records.data() + t});
  }
  static void plan(const thrust_backend<System>& on, thrust_view<const adacomp_record, System> records,
                   thrust_view<adacomp_step_record, System> step) {
    thrust_impl::run_plan<System>(on.stream, records.data(), records.size(), step.data());
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
