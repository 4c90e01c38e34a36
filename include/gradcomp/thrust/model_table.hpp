// A model's tensors for the launches that do a whole model's work at once on the Thrust backend,
// for the method kernels that have them (<method>/thrust_ops.hpp, their `model<T>`): a table in
// the system's memory with each tensor's buffers (the step's gradient, the buffers its compressor
// keeps) and its place among the model's work items; the ordered sums of every tensor's elements,
// planned once from the sizes (segmented_sum.hpp); one launch over every item of every tensor in
// one item space (model_items, backend.hpp), one over the tensors. The places are planned at
// registration; each step binds every tensor's buffers on the host, and the table is uploaded only
// when an entry changed since the step before (gradients that moved, a copied compressor): an
// upload in the stream's order that the host does not wait for (from page-locked memory on the
// CUDA system), so a training loop whose gradients stay where they are copies nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "../backend.hpp"
#include "kernel_support.hpp"
#include "segmented_sum.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// The segment that position k belongs to, of `count` consecutive segments with first(s) their
// first positions (ascending): the last segment whose first position is at most k (an empty
// segment shares its first position with the next, and is never found).
template <class First>
GRADCOMP_HD std::uint32_t segment_of(First first, std::uint32_t count, std::uint64_t k) {
  std::uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (first(mid) <= k) lo = mid;
    else hi = mid;
  }
  return lo;
}

// The first item of each tensor in one space, of a table of entries with their first items per
// space (`first[space]`: model_tensor, or a method's own entry type).
template <class Entry>
struct first_item_of {
  const Entry* tensors;
  std::size_t space;
  GRADCOMP_HD std::uint64_t operator()(std::uint32_t t) const { return tensors[t].first[space]; }
};

// The tensor that item k of space `space` belongs to.
template <class Entry>
GRADCOMP_HD std::uint32_t tensor_of_item(const Entry* tensors, std::uint32_t count, std::size_t space,
                                         std::uint64_t k) {
  return segment_of(first_item_of<Entry>{tensors, space}, count, k);
}

// f(tensor, t, j) for item j of tensor t, item k of the model in space `space`.
template <class Entry, class F>
struct model_item_op {
  const Entry* tensors;
  std::uint32_t count;
  std::size_t space;
  F f;
  GRADCOMP_HD void operator()(std::size_t k) const {
    const std::uint32_t t = tensor_of_item(tensors, count, space, k);
    f(tensors[t], t, k - tensors[t].first[space]);
  }
};

// f(tensor, t) for tensor t.
template <class T, class F>
struct model_tensor_op {
  const model_tensor<T>* tensors;
  F f;
  GRADCOMP_HD void operator()(std::size_t t) const { f(tensors[t], static_cast<std::uint32_t>(t)); }
};

// record(sums[t], t) for tensor t.
template <class T, class State, class Record>
struct model_sum_record_op {
  const State* sums;
  Record record;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const { record(sums[t], t); }
};

// The tensors of a model on System, in registration order.
template <class T, class System>
class model_table {
 public:
  model_table() = default;

  // Tensors of numel[t] elements and items[t] work items; plans their sums (which waits for
  // copying the plan to the system). Their buffers are set by bind.
  model_table(span<const std::size_t> numel, span<const model_items> items)
      : sums_(numel), table_(numel.size()), host_(numel.size()) {
    for (std::size_t t = 0; t < numel.size(); ++t) {
      host_[t].numel = numel[t];
      for (std::size_t k = 0; k < model_items::spaces; ++k) {
        host_[t].first[k] = items_[k];
        host_[t].items[k] = items[t].count[k];
        items_[k] += items[t].count[k];
      }
    }
  }

  // The step's buffers: fill(t, entry) writes tensor t's gradient, buffers and own buffers into
  // its entry (the rest stays as planned), on `on`'s stream; the table is uploaded when an entry
  // changed since the last bind (a copied compressor's, or gradients that moved).
  template <class Fill>
  void bind(const thrust_backend<System>& on, Fill fill) {
    for (std::size_t t = 0; t < host_.size(); ++t) {
      model_tensor<T> entry = host_[t];
      fill(t, entry);
      if (std::memcmp(&entry, &host_[t], sizeof(entry)) != 0) {
        host_[t] = entry;
        dirty_ = true;
      }
    }
    if (!dirty_ || host_.size() == 0) return;
    execution<System>::upload(on.stream, host_.data(), table_.view().data(), host_.size() * sizeof(model_tensor<T>));
    dirty_ = false;
  }

  // The table in System's memory.
  const model_tensor<T>* tensors() const noexcept { return table_.view().data(); }
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(host_.size()); }
  // Tensor t's entry as last bound, on the host.
  const model_tensor<T>& host(std::size_t t) const noexcept { return host_[t]; }
  // The work items of every tensor in space `space`.
  std::uint64_t items(std::size_t space) const noexcept { return items_[space]; }
  // Every tensor's element sums in the order of detail/ordered_sum.hpp.
  const segmented_reduction<System>& sums() const noexcept { return sums_; }

  // record(s, t) for every tensor t, s the reduction by `merge` of leaf(t, i) over its elements
  // in the order of detail/ordered_sum.hpp: two launches per level of the sums, one more.
  template <class State, class Leaf, class Merge, class Record>
  void reduce_each(stream_t stream, Leaf leaf, Merge merge, Record record) const {
    if (host_.size() == 0) return;
    scratch<State, System> sums(stream, host_.size());
    sums_.issue(stream, leaf, merge, sums.data());
    for_each_tensor(stream, model_sum_record_op<T, State, Record>{sums.data(), record});
  }

  // f(tensor, t, j) for every item j in space `space` of every tensor t: one launch.
  template <class F>
  void for_each_item(stream_t stream, std::size_t space, F f) const {
    if (items_[space] == 0) return;
    thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), items_[space],
                       model_item_op<model_tensor<T>, F>{tensors(), size(), space, f});
  }
  // f(tensor, t) for every tensor t: one launch.
  template <class F>
  void for_each_tensor(stream_t stream, F f) const {
    if (host_.size() == 0) return;
    thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), host_.size(),
                       model_tensor_op<T, F>{tensors(), f});
  }

 private:
  segmented_reduction<System> sums_;
  system_buffer<model_tensor<T>, System> table_;
  staging_buffer<model_tensor<T>, System> host_;
  std::uint64_t items_[model_items::spaces] = {};  // in each space
  bool dirty_ = true;
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
