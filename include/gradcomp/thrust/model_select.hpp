// The exact top-k of every tensor of a model at once on the portable Thrust backend: for each
// tensor, the k largest magnitudes of its error buffer, with the CPU's indices and threshold
// (whose bits depend on the path the CPU takes: thrust/select.hpp), in a fixed number of launches
// whatever the tensors. The caller's mode says, per tensor and on the device, what it selects: k
// and the path (cpu::exact_topk's plan: the plain radix select or the sample-guided one; the plain
// radix select alone; or the radix select over the elements at or above a given cut, as the sampled
// threshold's candidates), so that nothing is uploaded when k changes.
//
// The passes read one sequence of positions: first the compacted candidates of the tensors whose
// sample-guided plan kept them (a region with room for every plan's capacity), then every element
// of every tensor, read only for the tensors that select over all their elements (the plain radix
// select, and the sample-guided plan's fallbacks). A tensor's positions there are consecutive and
// in ascending index order, so every step of the single-tensor algorithm becomes one launch over
// the sequence (a position finds its tensor: stored with a candidate, by binary search for an
// element) or one launch over the tensors:
// - each tensor's mode, and for the planned path cpu::plan_topk, on the device;
// - the samples of every sample-guided tensor, one sort by tensor and descending key, each cut,
//   the elements passing each cut (counted before anything is compacted), each plan's choice, the
//   candidates compacted in tensor order and ascending index order, each tensor's range of them;
// - per 11-bit digit: every tensor's histogram (one per tensor), every tensor's decision;
// - the keys equal to each tensor's k-th: per-block counts over the sequence, their inclusive
//   scan, each tensor's last one taken;
// - the selection compacted into (tensor, index) entries, each tensor's entries consecutive and
//   ascending, and each tensor's range of them.
// Every decision runs on the device; the host issues the launches without waiting. The sizes of
// the scratch (samples, candidates, entries) are bounded on the host by the mode, per tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include "../cpu/select_kernels.hpp"
#include "model_table.hpp"
#include "select.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// A key with its tensor and, for a candidate, its index in the tensor.
template <class Key>
struct model_key {
  Key key;
  std::uint32_t index;
  std::uint32_t tensor;
};

// Tensor first, then the larger key.
template <class Key>
struct by_tensor_then_larger_key {
  GRADCOMP_HD bool operator()(const model_key<Key>& a, const model_key<Key>& b) const {
    return a.tensor < b.tensor || (a.tensor == b.tensor && a.key > b.key);
  }
};

// What a tensor selects in a model-wide top-k.
enum class model_topk_kind : std::uint32_t {
  none = 0,     // nothing (skipped: nothing selected, nothing reported)
  radix = 1,    // the plain radix select over all its elements
  planned = 2,  // cpu::exact_topk: cpu::plan_topk's choice of the plain or the sample-guided path
  at_cut = 3,   // the radix select over its elements at or above `cut` (at least k of them)
};

// A tensor's mode, from the caller's mode function on the device.
struct model_topk_mode {
  std::uint64_t k = 0;
  model_topk_kind kind = model_topk_kind::none;
  std::uint64_t cut = 0;  // a key (at_cut)
};

// At most what a tensor's selection uses, from the caller's mode function on the host.
struct model_topk_bounds {
  std::uint64_t k = 0;
  std::uint64_t samples = 0;     // sampled keys of the sample-guided path
  std::uint64_t candidates = 0;  // candidates compacted (sample-guided path or at_cut)
};

// The samples of cpu::plan_topk's sample-guided path over n elements (0 for the plain radix
// select): positions stride/2, stride/2 + stride, ... below n.
GRADCOMP_HD inline std::uint64_t planned_samples(const cpu::topk_plan& plan, std::uint64_t n) {
  return plan.radix_only ? 0 : (n - plan.stride / 2 + plan.stride - 1) / plan.stride;
}
// The bounds of the planned path for k of n.
inline model_topk_bounds planned_bounds(std::size_t n, std::size_t k) {
  const cpu::topk_plan plan = cpu::plan_topk(n, k);
  model_topk_bounds b;
  b.k = k;
  b.samples = planned_samples(plan, n);
  b.candidates = plan.radix_only ? 0 : plan.candidate_cap;
  return b;
}

// A selected element: its tensor and its index there.
struct model_entry {
  std::uint32_t tensor;
  std::uint32_t index;
};

// One tensor's selection, in System's memory.
template <class T>
struct model_topk_tensor {
  radix_state<key_t<T>> s;  // thrust/select.hpp: the digits, the sample-guided plan's cut and choice
  cpu::topk_plan plan;
  std::uint64_t k;
  model_topk_kind kind;
  std::uint32_t reserved;
  std::uint64_t samples;       // its sampled keys (0: no sample)
  std::uint64_t source_first;  // its positions in the sequence the radix passes read
  std::uint64_t source_end;
  std::uint64_t out_first;  // its entries in the selection
  std::uint64_t out_end;
};

// The selection's counts of the whole model, in System's memory: the candidates compacted, and
// whether any tensor selects over its candidates or over all its elements (the passes skip what
// no tensor reads without finding its tensor).
struct model_topk_counts {
  std::uint64_t candidates;
  std::uint32_t any_candidates;
  std::uint32_t any_full;
};

// Whether a tensor's selection emits nothing: k = 0, skipped, or refused for a NaN.
template <class T>
GRADCOMP_HD bool selects_nothing(const model_topk_tensor<T>& y) noexcept {
  return y.k == 0 || emits_nothing(&y.s);
}

template <class V>
struct value_at {
  const V* v;
  GRADCOMP_HD V operator()(std::uint32_t t) const { return v[t]; }
};

// Whether reader.at(i, v) finds something at position i, and what (a value-initialised V where
// nothing).
template <class Reader, class V>
struct found_at {
  Reader reader;
  GRADCOMP_HD bool operator()(std::size_t i) const {
    V v{};
    return reader.at(i, v);
  }
};
template <class Reader, class V>
struct found_value {
  Reader reader;
  GRADCOMP_HD V operator()(std::size_t i) const {
    V v{};
    reader.at(i, v);
    return v;
  }
};

// A tensor's range of a compaction: two of its members.
template <class Tensor, std::uint64_t Tensor::*First, std::uint64_t Tensor::*End>
struct member_range {
  Tensor* sel;
  GRADCOMP_HD std::uint64_t& first(std::uint32_t t) const { return sel[t].*First; }
  GRADCOMP_HD std::uint64_t& end(std::uint32_t t) const { return sel[t].*End; }
};

// The first and one past the last of the consecutive runs of each tensor in `items[0, *count)`
// (`Item` has a `tensor`): written into range.first(tensor) and range.end(tensor).
template <class Item, class Range>
struct tensor_runs_op {
  const Item* items;
  const std::uint64_t* count;
  Range range;
  GRADCOMP_HD void operator()(std::size_t j) const {
    if (j >= *count) return;
    const std::uint32_t t = items[j].tensor;
    if (j == 0 || items[j - 1].tensor != t) range.first(t) = j;
    if (j + 1 == *count || items[j + 1].tensor != t) range.end(t) = j + 1;
  }
};

// out[t] = f(0) + ... + f(t - 1) for `count` tensors: one dispatch.
template <class System, class F>
void exclusive_scan_tensors(stream_t stream, std::uint32_t count, F f, std::uint64_t* out) {
  const thrust::counting_iterator<std::size_t> first(0);
  thrust::exclusive_scan(exec<System>(stream), thrust::make_transform_iterator(first, f),
                         thrust::make_transform_iterator(first + count, f), out, std::uint64_t(0));
}

// Sample q of the model: key_at(t, j) for sample j of its tensor t; past every tensor's sample
// (the host's bound), a key of no tensor, sorted last.
template <class Key, class SamplesOf, class KeyAt>
struct sample_key_op {
  SamplesOf samples_of;
  KeyAt key_at;
  const std::uint64_t* sample_first;
  std::uint32_t count;
  model_key<Key>* out;
  GRADCOMP_HD void operator()(std::size_t q) const {
    if (q >= sample_first[count - 1] + samples_of(count - 1)) {
      out[q] = model_key<Key>{0, 0u, ~std::uint32_t(0)};
      return;
    }
    const std::uint32_t t = segment_of(value_at<std::uint64_t>{sample_first}, count, q);
    out[q] = model_key<Key>{key_at(t, q - sample_first[t]), 0u, t};
  }
};

// Every tensor's sample, sorted: samples_of(t) keys of tensor t, key j by key_at(t, j), their
// first at sample_first[t], into keys[0, bound) (keys of no tensor past them), then sorted by
// tensor and descending key. Three dispatches.
template <class System, class Key, class SamplesOf, class KeyAt>
void sort_samples(stream_t stream, std::uint32_t count, SamplesOf samples_of, KeyAt key_at,
                  std::uint64_t* sample_first, model_key<Key>* keys, std::uint64_t bound) {
  exclusive_scan_tensors<System>(stream, count, samples_of, sample_first);
  thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), bound,
                     sample_key_op<Key, SamplesOf, KeyAt>{samples_of, key_at, sample_first, count, keys});
  thrust::sort(exec<System>(stream), keys, keys + bound, by_tensor_then_larger_key<Key>{});
}

// Compacts what `reader` finds at positions [0, n) into out (in position order, each with its
// `tensor`; at most `most` of them), their count into *count, then writes each tensor's run of
// them into `range`: two dispatches and one launch, nothing waits.
template <class System, class V, class Reader, class Range>
void compact_runs(stream_t stream, Reader reader, std::uint64_t n, V* out, std::uint64_t* count, std::uint64_t most,
                  Range range) {
  const thrust::counting_iterator<std::size_t> first(0);
  execution<System>::select_into(stream, thrust::make_transform_iterator(first, found_value<Reader, V>{reader}), n,
                                 found_at<Reader, V>{reader}, out, count);
  thrust::for_each_n(exec<System>(stream), first, most, tensor_runs_op<V, Range>{out, count, range});
}

// Tensor t's mode and plan, its state started (a closed gate skips it, as does the mode `none`
// or a tensor without an error buffer); the first thread clears the counts.
template <class T, class Mode>
struct model_topk_plan_op {
  model_topk_tensor<T>* sel;
  std::size_t space;
  Mode mode;
  const std::int32_t* gate;
  model_topk_counts* counts;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t) const {
    if (t == 0) *counts = model_topk_counts{0, 0u, 0u};
    model_topk_tensor<T> y{};
    const std::uint64_t n = x.items[space];
    const model_topk_mode m = x.e == nullptr ? model_topk_mode{} : mode(x, t, static_cast<std::size_t>(n));
    y.kind = m.kind;
    y.k = m.kind == model_topk_kind::none ? 0 : m.k;
    if (m.kind == model_topk_kind::none) {
      radix_start<T>{&y.s, 0, 0u, nullptr}(0);
      y.s.skipped = 1;
      y.s.done = 1;
    } else if (y.k == 0) {
      radix_empty<T>{&y.s, gate}(0);
    } else {
      radix_start<T>{&y.s, y.k, 0u, gate}(0);
      if (m.kind == model_topk_kind::planned) {
        y.plan = cpu::plan_topk(static_cast<std::size_t>(n), static_cast<std::size_t>(y.k));
        y.samples = planned_samples(y.plan, n);
      } else if (m.kind == model_topk_kind::at_cut) {
        y.s.cut = m.cut;
      }
    }
    sel[t] = y;
  }
};

// Key j of a sample-guided tensor t's sample: positions stride/2, stride/2 + stride, ...
template <class T>
struct planned_sample_key {
  const model_tensor<T>* tensors;
  const model_topk_tensor<T>* sel;
  GRADCOMP_HD key_t<T> operator()(std::uint32_t t, std::uint64_t j) const {
    const std::uint64_t stride = sel[t].plan.stride;
    return magnitude_key(tensors[t].e[stride / 2 + j * stride]);
  }
};

// A sample-guided tensor's cut: the rank-th largest of its sorted samples.
template <class T>
struct model_cut_op {
  model_topk_tensor<T>* sel;
  const model_key<key_t<T>>* sorted;
  const std::uint64_t* sample_first;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    model_topk_tensor<T>& y = sel[t];
    if (y.samples != 0 && y.s.skipped == 0) y.s.cut = sorted[sample_first[t] + y.plan.rank - 1].key;
  }
};

// Whether a tensor compacts candidates at a cut: the sample-guided path's (a zero cut: none), or
// at_cut's.
template <class T>
GRADCOMP_HD bool cuts(const model_topk_tensor<T>& y) noexcept {
  return y.s.skipped == 0 && (y.kind == model_topk_kind::at_cut || (y.samples != 0 && y.s.cut != 0));
}

// The elements of the model (in the space of the selection) and each tensor's selection.
template <class T>
struct model_elements {
  const model_tensor<T>* tensors;
  std::uint32_t count;
  std::size_t space;
  const model_topk_tensor<T>* sel;
  GRADCOMP_HD std::uint32_t tensor_of(std::uint64_t i) const { return tensor_of_item(tensors, count, space, i); }
  // Element i, of tensor t: its key, index and tensor.
  GRADCOMP_HD model_key<key_t<T>> key(std::uint32_t t, std::uint64_t i) const {
    const std::uint64_t j = i - tensors[t].first[space];
    return model_key<key_t<T>>{magnitude_key(tensors[t].e[j]), static_cast<std::uint32_t>(j), t};
  }
};

// The key of element i of the model where its tensor's cut reads it and passes it; false
// elsewhere, without reading it.
template <class T>
struct model_cut_reader {
  model_elements<T> elements;
  GRADCOMP_HD bool at(std::uint64_t i, model_key<key_t<T>>& out) const {
    const std::uint32_t t = elements.tensor_of(i);
    const model_topk_tensor<T>& y = elements.sel[t];
    if (!cuts(y)) return false;
    out = elements.key(t, i);
    return out.key >= static_cast<key_t<T>>(y.s.cut);
  }
};

// The elements at or above a sample-guided tensor's cut, counted (atomic additions: the counts do
// not depend on the order).
template <class T>
struct model_passing_op {
  model_cut_reader<T> reader;
  model_topk_tensor<T>* sel;
  GRADCOMP_HD void operator()(std::size_t i) const {
    model_key<key_t<T>> k;
    if (reader.at(i, k) && sel[k.tensor].kind == model_topk_kind::planned) atomic_add(&sel[k.tensor].s.passing, 1);
  }
};

// Each plan's choice (thrust/select.hpp, choose_candidates; at_cut: always its candidates); a
// tensor that selects over all its elements reads them in the second region of the sequence.
template <class T>
struct model_choose_op {
  model_topk_tensor<T>* sel;
  std::size_t space;
  std::uint64_t capacity;
  model_topk_counts* counts;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t) const {
    model_topk_tensor<T>& y = sel[t];
    if (y.kind == model_topk_kind::at_cut)
      y.s.candidates = cuts(y) ? 1u : 0u;
    else
      y.s.candidates = cuts(y) && y.s.passing >= y.k && y.s.passing <= y.plan.candidate_cap;
    if (y.s.candidates != 0) {
      atomic_set(&counts->any_candidates);
      return;
    }
    y.source_first = capacity + x.first[space];
    y.source_end = y.source_first + x.items[space];
    if (y.k != 0 && y.s.skipped == 0) atomic_set(&counts->any_full);
  }
};

// The candidates: the elements at or above the cut of a tensor whose plan chose them.
template <class T>
struct model_candidate_reader {
  model_cut_reader<T> reader;
  const model_topk_counts* counts;
  GRADCOMP_HD bool at(std::uint64_t i, model_key<key_t<T>>& out) const {
    return counts->any_candidates != 0 && reader.at(i, out) && reader.elements.sel[out.tensor].s.candidates != 0;
  }
};
template <class T>
using source_range =
    member_range<model_topk_tensor<T>, &model_topk_tensor<T>::source_first, &model_topk_tensor<T>::source_end>;
template <class T>
using out_range = member_range<model_topk_tensor<T>, &model_topk_tensor<T>::out_first, &model_topk_tensor<T>::out_end>;

// The sequence the radix passes read: the candidates, then the elements of the tensors that
// select over all of theirs.
template <class T>
struct model_sequence {
  model_elements<T> elements;
  const model_key<key_t<T>>* candidates;
  const model_topk_counts* counts;
  std::uint64_t capacity;  // the candidates' region
  std::uint64_t length;    // the whole sequence

  // Position p's key, tensor and index; false where no selection reads it (without reading it).
  GRADCOMP_HD bool at(std::uint64_t p, model_key<key_t<T>>& out) const {
    if (p < capacity) {
      if (p >= counts->candidates) return false;
      out = candidates[p];
      return true;
    }
    if (counts->any_full == 0) return false;
    const std::uint64_t i = p - capacity;
    const std::uint32_t t = elements.tensor_of(i);
    const model_topk_tensor<T>& y = elements.sel[t];
    if (y.k == 0 || y.s.skipped != 0 || y.s.candidates != 0) return false;
    out = elements.key(t, i);
    return true;
  }
  // Whether position p holds a key equal to its tensor's k-th, in a selection that emits.
  GRADCOMP_HD bool equal_at(std::uint64_t p) const {
    model_key<key_t<T>> k;
    if (!at(p, k)) return false;
    const model_topk_tensor<T>& y = elements.sel[k.tensor];
    return !selects_nothing(y) && k.key == y.s.prefix;
  }
};

// One digit's histograms (radix_histogram, each tensor into its own).
template <class T>
struct model_histogram_op {
  model_sequence<T> seq;
  std::uint32_t* hist;
  GRADCOMP_HD void operator()(std::size_t p) const {
    model_key<key_t<T>> k;
    if (!seq.at(p, k)) return;
    const radix_state<key_t<T>>& s = seq.elements.sel[k.tensor].s;
    if (s.done != 0) return;
    std::uint32_t* h = hist + static_cast<std::size_t>(k.tensor) * hist_entries;
    if (s.mask == 0 && is_nan_key<T>(k.key)) atomic_set(h + nan_flag_entry);
    if ((k.key & s.mask) == s.prefix) {
      const key_t<T> digit_mask = static_cast<key_t<T>>((key_t<T>(1) << s.bits) - 1);
      atomic_increment(h + static_cast<std::size_t>((k.key >> s.shift) & digit_mask));
    }
  }
};
template <class T>
struct model_decide_op {
  model_topk_tensor<T>* sel;
  const std::uint32_t* hist;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    const std::uint32_t* h = hist + static_cast<std::size_t>(t) * hist_entries;
    radix_decide<T>{&sel[t].s, h, h + nan_flag_entry}(0);
  }
};

// Per block of `equal_block` positions of the sequence: the keys equal to their tensor's k-th.
template <class T>
struct model_count_equal_op {
  model_sequence<T> seq;
  std::uint64_t* out;
  GRADCOMP_HD void operator()(std::size_t b) const {
    const std::uint64_t first = b * equal_block;
    const std::uint64_t last = first + equal_block < seq.length ? first + equal_block : seq.length;
    std::uint64_t c = 0;
    for (std::uint64_t p = first; p < last; ++p) c += seq.equal_at(p) ? 1u : 0u;
    out[b] = c;
  }
};

// Tensor t's position of its take_equal-th key equal to its k-th (find_equal_limit): the equal
// keys before its first position, then a binary search of the inclusive counts and a walk through
// one block.
template <class T>
struct model_limit_op {
  model_sequence<T> seq;
  model_topk_tensor<T>* sel;
  const std::uint64_t* inclusive;
  std::uint64_t blocks;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    model_topk_tensor<T>& y = sel[t];
    if (selects_nothing(y)) return;
    if (y.s.take_equal == cpu::take_all_equal) {
      y.s.limit = y.source_end;
      return;
    }
    const std::uint64_t b0 = y.source_first / equal_block;
    std::uint64_t seen = b0 == 0 ? 0 : inclusive[b0 - 1];
    for (std::uint64_t p = b0 * equal_block; p < y.source_first; ++p) seen += seq.equal_at(p) ? 1u : 0u;
    const std::uint64_t target = seen + y.s.take_equal;
    std::uint64_t lo = b0, hi = blocks - 1;
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (inclusive[mid] >= target) hi = mid;
      else lo = mid + 1;
    }
    seen = lo == 0 ? 0 : inclusive[lo - 1];
    const std::uint64_t first = lo * equal_block;
    const std::uint64_t last = first + equal_block < seq.length ? first + equal_block : seq.length;
    for (std::uint64_t p = first; p < last; ++p)
      if (seq.equal_at(p) && ++seen == target) {
        y.s.limit = p;
        return;
      }
    y.s.limit = y.source_end;  // not reached: take_equal never exceeds the equal keys
  }
};

// Position p's entry where it is selected: above its tensor's k-th key, or equal to it up to the
// limit.
template <class T>
struct model_selected_reader {
  model_sequence<T> seq;
  GRADCOMP_HD bool at(std::uint64_t p, model_entry& out) const {
    model_key<key_t<T>> k;
    if (!seq.at(p, k)) return false;
    const model_topk_tensor<T>& y = seq.elements.sel[k.tensor];
    if (selects_nothing(y) || !(k.key > y.s.prefix || (k.key == y.s.prefix && p <= y.s.limit))) return false;
    out = model_entry{k.tensor, k.index};
    return true;
  }
};

// Each tensor's count of selected entries.
template <class T>
struct model_count_op {
  model_topk_tensor<T>* sel;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    sel[t].s.count = sel[t].out_end - sel[t].out_first;
  }
};

// Every entry of a tensor's run is taken.
struct all_taken {
  GRADCOMP_HD std::uint64_t operator()(std::uint32_t) const { return ~std::uint64_t(0); }
};

// f(tensor, t, j, index) for entry j of tensor t's run in a compaction of entries (range.first(t)
// its first), where j is below taken(t).
template <class T, class Range, class Taken, class F>
struct model_entries_op {
  const model_tensor<T>* tensors;
  const model_entry* entries;
  const std::uint64_t* count;
  Range range;
  Taken taken;
  F f;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (i >= *count) return;
    const model_entry e = entries[i];
    const std::uint64_t j = i - range.first(e.tensor);
    if (j < taken(e.tensor)) f(tensors[e.tensor], e.tensor, j, e.index);
  }
};

// The exact top-k of every tensor of a model at once: the scratch of one selection, planned on the
// host, released after the launches that use it (in the stream's order).
//
// Mode: `model_topk_mode operator()(const model_tensor<T>& x, std::uint32_t t, std::size_t n)`
// on the device, tensor t's mode (k <= n, the n items it has in space `space`: its elements);
// `model_topk_bounds bounds(const model_tensor<T>& x, std::size_t n)` on the host, at most what
// any mode the device may give it uses. Tensors without an error buffer select nothing.
template <class T, class System, class Mode>
class model_topk {
 public:
  model_topk(stream_t stream, const model_table<T, System>& m, std::size_t space, Mode mode)
      : model_topk(stream, m, space, mode, sizes_of(m, space, mode)) {}

  // Issues the selection: each tensor's indices in `entries()` (its entries consecutive, in
  // ascending index order), its outcome in `tensors()[t].s` (thrust/select.hpp's radix_state: the
  // NaN verdict, the k-th key, the count; `skipped` where the gate was closed).
  void issue(stream_t stream, const model_table<T, System>& m, const std::int32_t* gate) {
    using key_type = key_t<T>;
    const std::uint32_t count = m.size();
    if (count == 0) return;
    const auto sys = exec<System>(stream);
    const thrust::counting_iterator<std::size_t> first(0);
    model_topk_tensor<T>* sel = sel_.data();
    model_topk_counts* counts = counts_.data();
    m.for_each_tensor(stream, model_topk_plan_op<T, Mode>{sel, space_, mode_, gate, counts});
    const model_elements<T> elements{m.tensors(), count, space_, sel};
    const model_cut_reader<T> reader{elements};
    if (sizes_.samples != 0) {
      model_key<key_type>* keys = samples_.data();
      using samples_of = member_of<model_topk_tensor<T>, std::uint64_t, &model_topk_tensor<T>::samples>;
      sort_samples<System>(stream, count, samples_of{sel}, planned_sample_key<T>{m.tensors(), sel},
                           sample_first_.data(), keys, sizes_.samples);
      m.for_each_tensor(stream, model_cut_op<T>{sel, keys, sample_first_.data()});
      thrust::for_each_n(sys, first, sizes_.items, model_passing_op<T>{reader, sel});
    }
    m.for_each_tensor(stream, model_choose_op<T>{sel, space_, sizes_.capacity, counts});
    if (sizes_.capacity != 0)
      compact_runs<System>(stream, model_candidate_reader<T>{reader, counts}, sizes_.items, candidates_.data(),
                           &counts->candidates, sizes_.capacity, source_range<T>{sel});
    const model_sequence<T> seq{elements, candidates_.data(), counts, sizes_.capacity,
                                sizes_.capacity + sizes_.items};
    const int digits = (magnitude_traits<T>::key_bits + radix_bits - 1) / radix_bits;
    for (int d = 0; d < digits; ++d) {
      thrust::fill_n(sys, hist_.data(), static_cast<std::size_t>(count) * hist_entries, 0u);
      thrust::for_each_n(sys, first, seq.length, model_histogram_op<T>{seq, hist_.data()});
      m.for_each_tensor(stream, model_decide_op<T>{sel, hist_.data()});
    }
    thrust::for_each_n(sys, first, blocks_, model_count_equal_op<T>{seq, block_counts_.data()});
    thrust::inclusive_scan(sys, block_counts_.data(), block_counts_.data() + blocks_, block_counts_.data());
    m.for_each_tensor(stream, model_limit_op<T>{seq, sel, block_counts_.data(), blocks_});
    compact_runs<System>(stream, model_selected_reader<T>{seq}, seq.length, entries_.data(), entry_count_.data(),
                         sizes_.selected, out_range<T>{sel});
    m.for_each_tensor(stream, model_count_op<T>{sel});
  }

  // f(tensor, t, j, index) for every entry j of every tensor t's selection (index `index` of its
  // elements): one launch.
  template <class F>
  void for_each_selected(stream_t stream, const model_table<T, System>& m, F f) const {
    if (sizes_.selected == 0) return;
    using op = model_entries_op<T, out_range<T>, all_taken, F>;
    thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), sizes_.selected,
                       op{m.tensors(), entries_.data(), entry_count_.data(), out_range<T>{sel_.data()}, all_taken{}, f});
  }

  // Every tensor's selection, in System's memory.
  const model_topk_tensor<T>* tensors() const noexcept { return sel_.data(); }

 private:
  struct sizes {
    std::uint64_t items = 0;     // elements of every tensor
    std::uint64_t samples = 0;   // sampled keys of every tensor, at most
    std::uint64_t capacity = 0;  // candidates of every tensor, at most
    std::uint64_t selected = 0;  // entries of every selection, at most
  };
  static sizes sizes_of(const model_table<T, System>& m, std::size_t space, const Mode& mode) {
    sizes z;
    z.items = m.items(space);
    for (std::uint32_t t = 0; t < m.size(); ++t) {
      const model_tensor<T>& x = m.host(t);
      if (x.e == nullptr) continue;
      const model_topk_bounds b = mode.bounds(x, static_cast<std::size_t>(x.items[space]));
      z.selected += b.k;
      z.samples += b.samples;
      z.capacity += b.candidates;
    }
    return z;
  }
  static std::size_t at_least_one(std::uint64_t n) { return n == 0 ? 1 : static_cast<std::size_t>(n); }

  model_topk(stream_t stream, const model_table<T, System>& m, std::size_t space, Mode mode, sizes z)
      : space_(space),
        mode_(mode),
        sizes_(z),
        blocks_((z.capacity + z.items + equal_block - 1) / equal_block),
        sel_(stream, at_least_one(m.size())),
        sample_first_(stream, at_least_one(m.size())),
        samples_(stream, at_least_one(z.samples)),
        candidates_(stream, at_least_one(z.capacity)),
        counts_(stream, 1),
        hist_(stream, at_least_one(static_cast<std::uint64_t>(m.size()) * hist_entries)),
        block_counts_(stream, at_least_one(blocks_)),
        entries_(stream, at_least_one(z.selected)),
        entry_count_(stream, 1) {}

  std::size_t space_;
  Mode mode_;
  sizes sizes_;
  std::uint64_t blocks_;
  scratch<model_topk_tensor<T>, System> sel_;
  scratch<std::uint64_t, System> sample_first_;
  scratch<model_key<key_t<T>>, System> samples_;
  scratch<model_key<key_t<T>>, System> candidates_;
  scratch<model_topk_counts, System> counts_;
  scratch<std::uint32_t, System> hist_;
  scratch<std::uint64_t, System> block_counts_;
  scratch<model_entry, System> entries_;
  scratch<std::uint64_t, System> entry_count_;
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
