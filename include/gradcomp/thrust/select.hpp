// The exact top-k of the portable Thrust backend: the CPU's algorithm (cpu/select_kernels.hpp)
// step for step over Thrust algorithms, so that the selected indices and the reported threshold
// are bitwise the CPU's (the threshold is the radix select's key prefix, which depends on the
// path the CPU takes, so the path is the CPU's too).
//
// - Plan: cpu::plan_topk(n, k) decides between the plain radix select and the sample-guided one.
// - Sample-guided: the magnitude keys of a strided sample, sorted in descending order, give the
//   cut (the rank-th largest sampled key); the elements at or above it are counted, and when at
//   least k and at most the plan's capacity pass, they are compacted (ascending, with their keys)
//   and the radix select runs over them; otherwise over the whole input.
// - Radix select: one histogram pass per 11-bit digit of the key, most significant first, over
//   the keys whose higher digits match the prefix found so far (atomic increments: the counts do
//   not depend on the order), then a single-thread step that takes the CPU's decision from the
//   histogram; the state lives in the workspace, so the digit loop runs without reading anything
//   back. A NaN key anywhere is flagged in the first pass.
// - Output: the elements above the k-th key, and the first `take_equal` of those equal to it in
//   index order (found through per-block counts of equal keys, their inclusive scan and a
//   search), compacted in ascending index order by one stable copy_if.
//
// Every decision is taken on the device, from state kept in the workspace (the radix state:
// the cut, the count passing it, the plan's choice, each digit, the NaN verdict, the k-th key,
// the count), and the sizes a pass covers are read there too: the host issues a fixed sequence of
// operations and never waits for one. Counts and compactions whose results the next operations
// need go to the system's memory (execution::reduce_into, execution::select_into). A gate (the
// step's verdict) can stop a whole selection, which then writes nothing but its state. The host
// reads the outcome once, where it asks for it (exact_topk); the DGC step publishes it into the
// tensor's record on the device instead. The CUDA system runs the same decisions on hand-written
// kernels (thrust/cuda_select.cuh).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "../config.hpp"
#include "../cpu/select_kernels.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/workspace.hpp"
#include "../error.hpp"
#include "../selection_types.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// An addition to a count (32 or 64 bits) by many threads at once.
template <class U, class X>
GRADCOMP_HD inline void atomic_add(U* p, X x) noexcept {
  static_assert(std::is_same<U, std::uint32_t>::value || std::is_same<U, std::uint64_t>::value,
                "a 32- or 64-bit count");
#if defined(__CUDA_ARCH__)
  using word = std::conditional_t<sizeof(U) == 4, unsigned int, unsigned long long>;
  static_assert(sizeof(word) == sizeof(U), "an atomic word of the count's size");
  atomicAdd(reinterpret_cast<word*>(p), static_cast<word>(x));
#else
  __atomic_fetch_add(p, static_cast<U>(x), __ATOMIC_RELAXED);
#endif
}

// One increment of a histogram bin by many threads at once.
GRADCOMP_HD inline void atomic_increment(std::uint32_t* p) noexcept { atomic_add(p, 1u); }

// A flag set by many threads at once: its low bit (a bitwise or, so that it never carries).
GRADCOMP_HD inline void atomic_set(std::uint32_t* p) noexcept {
#if defined(__CUDA_ARCH__)
  atomicOr(p, 1u);
#else
  __atomic_fetch_or(p, 1u, __ATOMIC_RELAXED);
#endif
}

constexpr int radix_bits = cpu::radix_digit_bits;
constexpr std::size_t radix_bins = std::size_t(1) << radix_bits;
constexpr std::size_t equal_block = 1024;  // elements per block of the equal-key counts
// Entries of the per-block counts for `count` keys (the CUDA kernels keep two per 2,048 keys).
constexpr std::size_t block_count_entries(std::size_t count) { return count / equal_block + 2; }
// The histogram's entries: the bins, a NaN flag, and the CUDA kernels' ticket counter (the last
// block of a pass takes the digit's decision).
constexpr std::size_t nan_flag_entry = radix_bins;
constexpr std::size_t ticket_entry = radix_bins + 1;
constexpr std::size_t hist_entries = radix_bins + 2;

// Whether work gated by `gate` runs: no gate, or a gate holding errc::ok (a step's verdict).
GRADCOMP_HD inline bool gate_open(const std::int32_t* gate) noexcept { return gate == nullptr || *gate == 0; }

// The radix select's state between passes (in backend memory).
template <class Key>
struct radix_state {
  Key prefix;
  Key mask;
  std::uint64_t need;
  std::uint64_t take_equal;  // cpu::take_all_equal: every key equal to `prefix`
  std::uint64_t limit;       // position of the last equal key taken
  std::int32_t shift;        // bits below the current digit
  std::int32_t bits;         // bits of the current digit
  std::uint32_t done;
  std::uint32_t nan;
  std::uint64_t count;       // the selected count
  // The sample-guided plan's cut, passing count and choice, decided on the device.
  std::uint64_t passing;
  std::uint64_t cut;         // a key; 64 bits so that the struct has no padding for either key
  std::uint32_t full;        // resolve every digit (the cut's exact key), no NaN verdict (CUDA)
  std::uint32_t candidates;  // the selection runs over the compacted candidates
  std::uint32_t skipped;     // the gate was closed: nothing selected, nothing reported
  std::uint32_t reserved;
};

// The keys a selection reads: `size()` of them (a value on the device), key(i) and index(i).
// A fixed number of them:
template <class KeyAt, class IndexAt>
struct fixed_source {
  KeyAt key_at;
  IndexAt index_at;
  std::size_t n;
  GRADCOMP_HD std::size_t size() const { return n; }
  GRADCOMP_HD auto key(std::size_t i) const { return key_at(i); }
  GRADCOMP_HD std::uint32_t index(std::size_t i) const { return index_at(i); }
};

// The sample-guided plan's selection: the compacted candidates, or the whole input where the plan
// fell back to it (decided on the device: radix_state::candidates).
template <class T>
struct chosen_source {
  const T* values;
  const key_t<T>* keys;
  const std::uint32_t* idx;
  std::size_t n;
  const radix_state<key_t<T>>* s;
  GRADCOMP_HD std::size_t size() const { return s->candidates != 0 ? s->passing : n; }
  GRADCOMP_HD key_t<T> key(std::size_t i) const { return s->candidates != 0 ? keys[i] : magnitude_key(values[i]); }
  GRADCOMP_HD std::uint32_t index(std::size_t i) const {
    return s->candidates != 0 ? idx[i] : static_cast<std::uint32_t>(i);
  }
};

// index(i) of a source, 0 past its size (a compaction may read every position it scans).
template <class Source>
struct source_index {
  Source src;
  GRADCOMP_HD std::uint32_t operator()(std::size_t i) const { return i < src.size() ? src.index(i) : 0u; }
};

template <class T>
struct key_of_values {
  const T* v;
  GRADCOMP_HD key_t<T> operator()(std::size_t i) const { return magnitude_key(v[i]); }
};
struct index_of_position {
  GRADCOMP_HD std::uint32_t operator()(std::size_t i) const { return static_cast<std::uint32_t>(i); }
};

// Sets up the first digit; a closed gate marks the selection skipped (and done).
template <class T>
struct radix_start {
  radix_state<key_t<T>>* s;
  std::uint64_t k;
  std::uint32_t full = 0;
  const std::int32_t* gate = nullptr;
  GRADCOMP_HD void operator()(std::size_t) const {
    s->count = 0;
    s->full = full;
    s->prefix = 0;
    s->mask = 0;
    s->need = k;
    s->take_equal = 0;
    s->limit = 0;
    const int key_bits = magnitude_traits<T>::key_bits;
    s->bits = key_bits < radix_bits ? key_bits : radix_bits;
    s->shift = key_bits - s->bits;
    s->skipped = gate_open(gate) ? 0u : 1u;
    s->done = s->skipped;
    s->nan = 0;
    s->reserved = 0;
  }
};

// k = 0: nothing selected, the threshold infinite (the CPU's result), no pass over the keys.
template <class T>
struct radix_empty {
  radix_state<key_t<T>>* s;
  const std::int32_t* gate;
  GRADCOMP_HD void operator()(std::size_t) const {
    radix_start<T>{s, 0, 0u, gate}(0);
    s->done = 1;
    s->prefix = magnitude_key(static_cast<T>(HUGE_VAL));
    s->passing = 0;
    s->cut = 0;
    s->candidates = 0;
  }
};

// Counts the keys that match the prefix into the current digit's bins; flags NaN keys.
template <class T, class Source>
struct radix_histogram {
  const radix_state<key_t<T>>* s;
  Source src;
  std::uint32_t* hist;
  std::uint32_t* nan;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (s->done != 0 || i >= src.size()) return;
    const key_t<T> key = src.key(i);
    if (s->mask == 0 && is_nan_key<T>(key)) atomic_set(nan);
    if ((key & s->mask) == s->prefix) {
      const key_t<T> digit_mask = static_cast<key_t<T>>((key_t<T>(1) << s->bits) - 1);
      atomic_increment(hist + static_cast<std::size_t>((key >> s->shift) & digit_mask));
    }
  }
};

// The CPU's decision for one digit (cpu::radix_kth_largest), on one thread.
template <class T>
struct radix_decide {
  radix_state<key_t<T>>* s;
  const std::uint32_t* hist;
  const std::uint32_t* nan;
  GRADCOMP_HD void operator()(std::size_t) const {
    using key_type = key_t<T>;
    if (s->done != 0) return;
    if (s->mask == 0 && *nan != 0) {
      s->nan = 1;
      s->done = 1;
      return;
    }
    const std::size_t bins = std::size_t(1) << s->bits;
    const key_type digit_mask = static_cast<key_type>(bins - 1);
    std::uint64_t above = 0;
    std::size_t d = bins - 1;
    while (above + hist[d] < s->need) above += hist[d--];
    s->need -= above;
    s->prefix |= static_cast<key_type>(d) << s->shift;
    s->mask |= digit_mask << s->shift;
    if (hist[d] == s->need) {  // the whole bin is taken: every key >= prefix is selected
      s->take_equal = cpu::take_all_equal;
      s->done = 1;
      return;
    }
    if (s->shift == 0) {
      s->take_equal = s->need;
      s->done = 1;
      return;
    }
    s->bits = s->shift < radix_bits ? s->shift : radix_bits;
    s->shift -= s->bits;
  }
};

// Whether a selection emits nothing: skipped, or refused for a NaN.
template <class Key>
GRADCOMP_HD bool emits_nothing(const radix_state<Key>* s) noexcept {
  return s->skipped != 0 || s->nan != 0;
}

// Per block of `equal_block` positions: how many keys equal the k-th key.
template <class T, class Source>
struct count_equal_in_block {
  const radix_state<key_t<T>>* s;
  Source src;
  std::uint32_t* out;
  GRADCOMP_HD void operator()(std::size_t b) const {
    const std::size_t count = emits_nothing(s) ? 0 : src.size();
    const std::size_t first = b * equal_block;
    const std::size_t last = first + equal_block < count ? first + equal_block : count;
    std::uint32_t c = 0;
    for (std::size_t i = first; i < last; ++i) c += src.key(i) == s->prefix ? 1u : 0u;
    out[b] = c;
  }
};

// The position of the take_equal-th key equal to the k-th key, from the inclusive scan of the
// per-block counts: a binary search for the block, then a walk through it. One thread.
template <class T, class Source>
struct find_equal_limit {
  radix_state<key_t<T>>* s;
  Source src;
  const std::uint32_t* inclusive;
  std::size_t blocks;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (emits_nothing(s)) return;
    const std::size_t count = src.size();
    if (s->take_equal == cpu::take_all_equal) {
      s->limit = count;
      return;
    }
    std::size_t lo = 0, hi = blocks - 1;  // the first block whose inclusive count reaches take_equal
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (inclusive[mid] >= s->take_equal) hi = mid;
      else lo = mid + 1;
    }
    std::uint64_t seen = lo == 0 ? 0 : inclusive[lo - 1];
    const std::size_t first = lo * equal_block;
    const std::size_t last = first + equal_block < count ? first + equal_block : count;
    for (std::size_t i = first; i < last; ++i)
      if (src.key(i) == s->prefix && ++seen == s->take_equal) {
        s->limit = i;
        return;
      }
    s->limit = count;  // not reached: take_equal never exceeds the equal keys
  }
};

template <class T, class Source>
struct selected {
  const radix_state<key_t<T>>* s;
  Source src;
  GRADCOMP_HD bool operator()(std::size_t i) const {
    if (emits_nothing(s) || i >= src.size()) return false;
    const key_t<T> key = src.key(i);
    return key > s->prefix || (key == s->prefix && i <= s->limit);
  }
};

template <class T>
struct sample_key {
  const T* v;
  std::size_t stride;
  GRADCOMP_HD key_t<T> operator()(std::size_t s) const { return magnitude_key(v[stride / 2 + s * stride]); }
};

template <class T>
struct at_least_key {
  const T* v;
  key_t<T> cut;
  GRADCOMP_HD bool operator()(std::size_t i) const { return magnitude_key(v[i]) >= cut; }
};

template <class T>
struct candidate_key {
  const T* v;
  GRADCOMP_HD key_t<T> operator()(std::uint32_t i) const { return magnitude_key(v[i]); }
};

// The sample-guided plan on one thread: the cut (the sorted sample's rank-th key), the plan's
// fields cleared.
template <class T>
struct take_cut {
  radix_state<key_t<T>>* s;
  const key_t<T>* cut;
  const std::int32_t* gate;
  GRADCOMP_HD void operator()(std::size_t) const {
    radix_start<T>{s, 0, 0u, gate}(0);
    s->cut = s->skipped != 0 ? 0 : *cut;
    s->passing = 0;
    s->candidates = 0;
  }
};

// 1 for a key at or above the cut (none when the cut is zero or the selection is skipped).
template <class T>
struct at_or_above_cut {
  const T* v;
  const radix_state<key_t<T>>* s;
  GRADCOMP_HD std::uint64_t operator()(std::size_t i) const {
    const auto cut = static_cast<key_t<T>>(s->cut);
    return cut != 0 && magnitude_key(v[i]) >= cut ? 1u : 0u;
  }
};

// The plan's choice: the candidates when the cut is not zero and at least k, at most `cap` pass.
template <class T>
struct choose_candidates {
  radix_state<key_t<T>>* s;
  std::uint64_t k;
  std::uint64_t cap;
  GRADCOMP_HD void operator()(std::size_t) const {
    s->candidates = s->cut != 0 && s->passing >= k && s->passing <= cap ? 1u : 0u;
  }
};

template <class T>
struct is_candidate {
  const T* v;
  const radix_state<key_t<T>>* s;
  GRADCOMP_HD bool operator()(std::size_t i) const {
    return s->candidates != 0 && magnitude_key(v[i]) >= static_cast<key_t<T>>(s->cut);
  }
};

// keys[j] = the key of candidate j, for the candidates the plan uses.
template <class T>
struct candidate_keys_op {
  const T* v;
  const std::uint32_t* idx;
  key_t<T>* keys;
  const radix_state<key_t<T>>* s;
  GRADCOMP_HD void operator()(std::size_t j) const {
    if (s->candidates != 0 && j < s->passing) keys[j] = magnitude_key(v[idx[j]]);
  }
};

// Where a selection's outcome goes in System's memory: the result, the status (an errc, written
// only for a refusal) and, where not null, the count once more (a DGC record's `kept`).
template <class T>
struct selection_sink {
  selection_result<T>* result;
  std::int32_t* status;
  std::uint64_t* kept;
};

// The exact top-k's outcome into a sink, on one thread: nothing for a skipped selection, the
// NaN refusal, or the count and threshold (with the sampled selection's sample and rounds where
// it ran the exact top-k).
template <class T>
struct publish_exact {
  const radix_state<key_t<T>>* s;
  selection_sink<T> sink;
  std::uint64_t k;
  std::uint64_t sample_count = 0;
  const std::int32_t* rounds = nullptr;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (s->skipped != 0) return;
    if (s->nan != 0) {
      *sink.status = static_cast<std::int32_t>(errc::nan_input);
      return;
    }
    selection_result<T> r;
    r.count = static_cast<std::size_t>(s->count);
    r.target = static_cast<std::size_t>(k);
    r.threshold = value_of_key<T>(static_cast<key_t<T>>(s->prefix));
    r.sample_count = static_cast<std::size_t>(sample_count);
    r.rounds = rounds != nullptr ? *rounds : 0;
    r.exact = true;
    *sink.result = r;
    if (sink.kept != nullptr) *sink.kept = s->count;
  }
};

// The workspace of the radix select over `count` keys: its state, a histogram (and the NaN
// flag), the per-block counts of equal keys.
template <class T>
std::size_t radix_workspace_bytes(std::size_t count) {
  return workspace_slot_bytes<radix_state<key_t<T>>>(1) + workspace_slot_bytes<std::uint32_t>(hist_entries) +
         workspace_slot_bytes<std::uint32_t>(block_count_entries(count));
}

// The workspace of the Thrust exact top-k for (n, k) on System: the radix select's over n keys,
// and, for the sample-guided plan, the sample and candidate keys and indices (and, on the CUDA
// system, the bitmap of the candidates).
template <class T, class System>
std::size_t exact_topk_workspace_bytes(std::size_t n, std::size_t k) {
  const cpu::topk_plan p = cpu::plan_topk(n, k);
  std::size_t bytes = radix_workspace_bytes<T>(n);
  if (!p.radix_only) {
    bytes += workspace_slot_bytes<key_t<T>>(p.samples > p.candidate_cap ? p.samples : p.candidate_cap) +
             workspace_slot_bytes<std::uint32_t>(p.candidate_cap);
    if constexpr (execution<System>::hand_kernels)
      bytes += workspace_slot_bytes<std::uint32_t>(execution<System>::candidate_bitmap_words(n));
  }
  return bytes;
}

// Issues the radix select of k >= 1 keys of `src` (at most `most` of them) and its output into
// `out` (ascending index order); the outcome (NaN verdict, k-th key, count) stays in *state.
// Nothing waits.
template <class T, class System, class Source>
void issue_radix_select(stream_t stream, const Source& src, std::size_t most, std::size_t k, std::uint32_t* out,
                        radix_state<key_t<T>>* state, std::uint32_t* hist, std::uint32_t* block_counts,
                        const std::int32_t* gate) {
  if constexpr (execution<System>::hand_kernels) {
    execution<System>::template issue_radix_select<T>(stream, src, most, k, out, state, hist, block_counts, gate);
  } else {
    const auto sys = exec<System>(stream);
    const thrust::counting_iterator<std::size_t> first(0);
    std::uint32_t* nan = hist + nan_flag_entry;
    run_once<System>(stream, radix_start<T>{state, k, 0u, gate});
    thrust::fill_n(sys, nan, 1, 0u);
    const int digits = (magnitude_traits<T>::key_bits + radix_bits - 1) / radix_bits;
    for (int d = 0; d < digits; ++d) {
      thrust::fill_n(sys, hist, radix_bins, 0u);
      thrust::for_each_n(sys, first, most, radix_histogram<T, Source>{state, src, hist, nan});
      run_once<System>(stream, radix_decide<T>{state, hist, nan});
    }
    const std::size_t blocks = (most + equal_block - 1) / equal_block;
    thrust::for_each_n(sys, first, blocks, count_equal_in_block<T, Source>{state, src, block_counts});
    thrust::inclusive_scan(sys, block_counts, block_counts + blocks, block_counts);
    run_once<System>(stream, find_equal_limit<T, Source>{state, src, block_counts, blocks});
    execution<System>::select_into(stream, thrust::make_transform_iterator(first, source_index<Source>{src}), most,
                                   selected<T, Source>{state, src}, out, &state->count);
  }
}

// The radix select's state, histogram (with the NaN flag) and per-block counts for n keys.
template <class Key>
struct radix_workspace {
  radix_state<Key>* state;
  std::uint32_t* hist;
  std::uint32_t* block_counts;
};
template <class T>
result<radix_workspace<key_t<T>>> carve_radix(workspace_carver& carver, std::size_t n) {
  radix_workspace<key_t<T>> w{carver.take<radix_state<key_t<T>>>(1), carver.take<std::uint32_t>(hist_entries),
                              carver.take<std::uint32_t>(block_count_entries(n))};
  if (w.state == nullptr || w.hist == nullptr || w.block_counts == nullptr) return fail(errc::workspace_too_small);
  return w;
}

// Issues the plain radix select of the k largest of values[0, n) (k = 0: nothing selected, the
// threshold infinite), its outcome in w.state.
template <class T, class System>
void issue_radix_over_all(stream_t stream, const T* values, std::size_t n, std::size_t k, std::uint32_t* out,
                          const radix_workspace<key_t<T>>& w, const std::int32_t* gate) {
  if (k == 0) {
    run_once<System>(stream, radix_empty<T>{w.state, gate});
    return;
  }
  const fixed_source<key_of_values<T>, index_of_position> all{key_of_values<T>{values}, index_of_position{}, n};
  issue_radix_select<T, System>(stream, all, n, k, out, w.state, w.hist, w.block_counts, gate);
}

// Issues the exact top-k of values[0, n) (the CPU's result): ascending indices into `out`, the
// outcome in the returned radix state (carved from `carver`), read by the host or published on
// the device. Nothing waits; where the gate is closed, nothing is selected (state->skipped).
template <class T, class System>
result<radix_state<key_t<T>>*> issue_exact_topk(stream_t stream, const T* values, std::size_t n, std::size_t k,
                                                std::uint32_t* out, workspace_carver& carver,
                                                const std::int32_t* gate) {
  using key_type = key_t<T>;
  const auto w = carve_radix<T>(carver, n);
  if (!w) return fail(w.error());
  radix_state<key_type>* state = w->state;
  std::uint32_t* hist = w->hist;
  std::uint32_t* block_counts = w->block_counts;
  const cpu::topk_plan plan = k == 0 ? cpu::topk_plan{} : cpu::plan_topk(n, k);
  if (k == 0 || plan.radix_only) {
    issue_radix_over_all<T, System>(stream, values, n, k, out, *w, gate);
    return state;
  }
  key_type* keys = carver.take<key_type>(plan.samples > plan.candidate_cap ? plan.samples : plan.candidate_cap);
  std::uint32_t* idx = carver.take<std::uint32_t>(plan.candidate_cap);
  if (keys == nullptr || idx == nullptr) return fail(errc::workspace_too_small);
  if constexpr (execution<System>::hand_kernels) {
    std::uint32_t* bitmap = carver.take<std::uint32_t>(execution<System>::candidate_bitmap_words(n));
    if (bitmap == nullptr) return fail(errc::workspace_too_small);
    execution<System>::template issue_sample_guided<T>(stream, values, n, k, plan, out, state, hist, block_counts, keys,
                                                       idx, bitmap, gate);
  } else {
    // The sample: positions stride/2, stride/2 + stride, ... below n; its rank-th largest key is
    // the cut.
    const auto sys = exec<System>(stream);
    const thrust::counting_iterator<std::size_t> first(0);
    const std::size_t samples = (n - plan.stride / 2 + plan.stride - 1) / plan.stride;
    thrust::transform(sys, first, first + static_cast<std::ptrdiff_t>(samples), keys,
                      sample_key<T>{values, plan.stride});
    thrust::sort(sys, keys, keys + samples, thrust::greater<key_type>());
    run_once<System>(stream, take_cut<T>{state, keys + (plan.rank - 1), gate});
    // Counted before they are compacted: more than the capacity must not be written.
    execution<System>::reduce_into(stream, thrust::make_transform_iterator(first, at_or_above_cut<T>{values, state}), n,
                                   std::uint64_t(0), thrust::plus<std::uint64_t>(), &state->passing);
    run_once<System>(stream, choose_candidates<T>{state, k, plan.candidate_cap});
    execution<System>::select_into(stream, thrust::make_transform_iterator(first, index_of_position{}), n,
                                   is_candidate<T>{values, state}, idx, &state->count);
    thrust::for_each_n(sys, first, plan.candidate_cap, candidate_keys_op<T>{values, idx, keys, state});
    const chosen_source<T> chosen{values, keys, idx, n, state};
    issue_radix_select<T, System>(stream, chosen, n, k, out, state, hist, block_counts, gate);
  }
  return state;
}

// The exact top-k of values[0, n) (the CPU's result, threshold included): ascending indices
// into `out`, `workspace` at least exact_topk_workspace_bytes<T, System>(n, k) bytes. The host
// waits for the outcome (one copy).
template <class T, class System>
result<std::size_t> exact_topk(stream_t stream, const T* values, std::size_t n, std::size_t k, std::uint32_t* out,
                               std::byte* workspace, std::size_t workspace_bytes, T* threshold) {
  if (k == 0) {
    *threshold = std::numeric_limits<T>::infinity();
    return std::size_t(0);
  }
  workspace_carver carver(span<std::byte>(workspace, workspace_bytes));
  const auto state = issue_exact_topk<T, System>(stream, values, n, k, out, carver, nullptr);
  if (!state) return fail(state.error());
  const radix_state<key_t<T>> st = read_value<System>(stream, *state);
  if (st.nan != 0) return fail(errc::nan_input);
  *threshold = value_of_key<T>(static_cast<key_t<T>>(st.prefix));
  return static_cast<std::size_t>(st.count);
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp

#if defined(__CUDACC__)
#include "cuda_select.cuh"
#endif
