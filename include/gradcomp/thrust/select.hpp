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
// The host reads four values between the steps, through copies from the system's memory (the
// sample's cut, the count passing it, the NaN verdict, the k-th key); the CUDA system's kernels
// (thrust/cuda_select.cuh) take these decisions on the device and copy back once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

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
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One increment of a histogram bin by many threads at once.
GRADCOMP_HD inline void atomic_increment(std::uint32_t* p) noexcept {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, 1u);
#else
  __atomic_fetch_add(p, 1u, __ATOMIC_RELAXED);
#endif
}

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
  // Used by the CUDA kernels (thrust/cuda_select.cuh) only: the selected count, and the
  // sample-guided plan's cut, passing count and choice, decided on the device.
  std::uint64_t count;
  std::uint64_t passing;
  std::uint64_t cut;         // a key; 64 bits so that the struct has no padding for either key
  std::uint32_t full;        // resolve every digit (the cut's exact key), no NaN verdict
  std::uint32_t candidates;  // the selection runs over the compacted candidates
};

template <class T>
struct key_of_values {
  const T* v;
  GRADCOMP_HD key_t<T> operator()(std::size_t i) const { return magnitude_key(v[i]); }
};
struct index_of_position {
  GRADCOMP_HD std::uint32_t operator()(std::size_t i) const { return static_cast<std::uint32_t>(i); }
};
template <class Key>
struct key_of_candidates {
  const Key* keys;
  GRADCOMP_HD Key operator()(std::size_t j) const { return keys[j]; }
};
struct index_of_candidates {
  const std::uint32_t* idx;
  GRADCOMP_HD std::uint32_t operator()(std::size_t j) const { return idx[j]; }
};

// Sets up the first digit.
template <class T>
struct radix_start {
  radix_state<key_t<T>>* s;
  std::uint64_t k;
  std::uint32_t full = 0;
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
    s->done = 0;
    s->nan = 0;
  }
};

// Counts the keys that match the prefix into the current digit's bins; flags NaN keys.
template <class T, class KeyAt>
struct radix_histogram {
  const radix_state<key_t<T>>* s;
  KeyAt key_at;
  std::uint32_t* hist;
  std::uint32_t* nan;
  GRADCOMP_HD void operator()(std::size_t i) const {
    if (s->done != 0) return;
    const key_t<T> key = key_at(i);
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

// Per block of `equal_block` positions: how many keys equal the k-th key.
template <class T, class KeyAt>
struct count_equal_in_block {
  const radix_state<key_t<T>>* s;
  KeyAt key_at;
  std::size_t count;
  std::uint32_t* out;
  GRADCOMP_HD void operator()(std::size_t b) const {
    const std::size_t first = b * equal_block;
    const std::size_t last = first + equal_block < count ? first + equal_block : count;
    std::uint32_t c = 0;
    for (std::size_t i = first; i < last; ++i) c += key_at(i) == s->prefix ? 1u : 0u;
    out[b] = c;
  }
};

// The position of the take_equal-th key equal to the k-th key, from the inclusive scan of the
// per-block counts: a binary search for the block, then a walk through it. One thread.
template <class T, class KeyAt>
struct find_equal_limit {
  radix_state<key_t<T>>* s;
  KeyAt key_at;
  std::size_t count;
  const std::uint32_t* inclusive;
  std::size_t blocks;
  GRADCOMP_HD void operator()(std::size_t) const {
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
      if (key_at(i) == s->prefix && ++seen == s->take_equal) {
        s->limit = i;
        return;
      }
    s->limit = count;  // not reached: take_equal never exceeds the equal keys
  }
};

template <class T, class KeyAt>
struct selected {
  const radix_state<key_t<T>>* s;
  KeyAt key_at;
  GRADCOMP_HD bool operator()(std::size_t i) const {
    const key_t<T> key = key_at(i);
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
struct candidate_key {
  const T* v;
  GRADCOMP_HD key_t<T> operator()(std::uint32_t i) const { return magnitude_key(v[i]); }
};

template <class T>
struct at_least_key {
  const T* v;
  key_t<T> cut;
  GRADCOMP_HD bool operator()(std::size_t i) const { return magnitude_key(v[i]) >= cut; }
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

// Radix select over `count` keys (key_at), k >= 1, then the output (index_at) into `out`.
// Returns the count written, or errc::nan_input; *threshold receives the k-th key's value.
template <class T, class System, class KeyAt, class IndexAt>
result<std::size_t> radix_select_and_emit(std::size_t count, std::size_t k, KeyAt key_at, IndexAt index_at,
                                          std::uint32_t* out, radix_state<key_t<T>>* state, std::uint32_t* hist,
                                          std::uint32_t* block_counts, T* threshold) {
  using key_type = key_t<T>;
  if constexpr (execution<System>::hand_kernels) {
    return execution<System>::template radix_select_and_emit<T>(count, k, key_at, index_at, out, state, hist,
                                                                block_counts, threshold);
  }
  const auto sys = exec<System>();
  const thrust::counting_iterator<std::size_t> first(0);
  std::uint32_t* nan = hist + nan_flag_entry;
  thrust::for_each_n(sys, first, 1, radix_start<T>{state, k});
  thrust::fill_n(sys, nan, 1, 0u);
  const int digits = (magnitude_traits<T>::key_bits + radix_bits - 1) / radix_bits;
  for (int d = 0; d < digits; ++d) {
    thrust::fill_n(sys, hist, radix_bins, 0u);
    thrust::for_each_n(sys, first, count, radix_histogram<T, KeyAt>{state, key_at, hist, nan});
    thrust::for_each_n(sys, first, 1, radix_decide<T>{state, hist, nan});
  }
  if (read_value<System>(state).nan != 0) return fail(errc::nan_input);
  const std::size_t blocks = (count + equal_block - 1) / equal_block;
  thrust::for_each_n(sys, first, blocks, count_equal_in_block<T, KeyAt>{state, key_at, count, block_counts});
  thrust::inclusive_scan(sys, block_counts, block_counts + blocks, block_counts);
  thrust::for_each_n(sys, first, 1, find_equal_limit<T, KeyAt>{state, key_at, count, block_counts, blocks});
  const auto indices = thrust::make_transform_iterator(first, index_at);
  std::uint32_t* end = thrust::copy_if(sys, indices, indices + static_cast<std::ptrdiff_t>(count), first, out,
                                       selected<T, KeyAt>{state, key_at});
  *threshold = value_of_key<T>(static_cast<key_type>(read_value<System>(state).prefix));
  return static_cast<std::size_t>(end - out);
}

// cpu::exact_topk_over: the exact top-k of `count` keys (key_at) by radix select, ascending
// indices (index_at) into `out`; the radix state is carved from `carver`.
template <class T, class System, class KeyAt, class IndexAt>
result<std::size_t> exact_topk_over(std::size_t count, std::size_t k, KeyAt key_at, IndexAt index_at,
                                    std::uint32_t* out, workspace_carver& carver, T* threshold) {
  if (k == 0) {
    *threshold = std::numeric_limits<T>::infinity();
    return std::size_t(0);
  }
  auto* state = carver.take<radix_state<key_t<T>>>(1);
  auto* hist = carver.take<std::uint32_t>(hist_entries);
  auto* block_counts = carver.take<std::uint32_t>(block_count_entries(count));
  if (state == nullptr || hist == nullptr || block_counts == nullptr) return fail(errc::workspace_too_small);
  return radix_select_and_emit<T, System>(count, k, key_at, index_at, out, state, hist, block_counts, threshold);
}

// The exact top-k of values[0, n) (the CPU's result, threshold included): ascending indices
// into `out`, `workspace` at least exact_topk_workspace_bytes<T, System>(n, k) bytes.
template <class T, class System>
result<std::size_t> exact_topk(const T* values, std::size_t n, std::size_t k, std::uint32_t* out,
                               std::byte* workspace, std::size_t workspace_bytes, T* threshold) {
  using key_type = key_t<T>;
  if (k == 0) {
    *threshold = std::numeric_limits<T>::infinity();
    return std::size_t(0);
  }
  const auto sys = exec<System>();
  workspace_carver carver(span<std::byte>(workspace, workspace_bytes));
  auto* state = carver.take<radix_state<key_type>>(1);
  auto* hist = carver.take<std::uint32_t>(hist_entries);
  auto* block_counts = carver.take<std::uint32_t>(block_count_entries(n));
  if (state == nullptr || hist == nullptr || block_counts == nullptr) return fail(errc::workspace_too_small);
  auto radix_over_all = [&] {
    return radix_select_and_emit<T, System>(n, k, key_of_values<T>{values}, index_of_position{}, out, state, hist,
                                            block_counts, threshold);
  };
  const cpu::topk_plan plan = cpu::plan_topk(n, k);
  if (plan.radix_only) return radix_over_all();
  key_type* keys = carver.take<key_type>(plan.samples > plan.candidate_cap ? plan.samples : plan.candidate_cap);
  std::uint32_t* idx = carver.take<std::uint32_t>(plan.candidate_cap);
  if (keys == nullptr || idx == nullptr) return fail(errc::workspace_too_small);
  if constexpr (execution<System>::hand_kernels) {
    std::uint32_t* bitmap = carver.take<std::uint32_t>(execution<System>::candidate_bitmap_words(n));
    if (bitmap == nullptr) return fail(errc::workspace_too_small);
    return execution<System>::template sample_guided_topk<T>(values, n, k, plan, out, state, hist, block_counts, keys,
                                                             idx, bitmap, threshold);
  }

  // The sample: positions stride/2, stride/2 + stride, ... below n.
  const thrust::counting_iterator<std::size_t> first(0);
  const std::size_t samples = (n - plan.stride / 2 + plan.stride - 1) / plan.stride;
  thrust::transform(sys, first, first + static_cast<std::ptrdiff_t>(samples), keys,
                    sample_key<T>{values, plan.stride});
  thrust::sort(sys, keys, keys + samples, thrust::greater<key_type>());
  const key_type cut = read_value<System>(keys + (plan.rank - 1));
  if (cut == 0) return radix_over_all();  // mostly zeros
  // Counted before they are compacted: more than the capacity must not be written.
  const auto passing = static_cast<std::size_t>(
      thrust::count_if(sys, first, first + static_cast<std::ptrdiff_t>(n), at_least_key<T>{values, cut}));
  if (passing < k || passing > plan.candidate_cap) return radix_over_all();
  const auto positions = thrust::make_transform_iterator(first, index_of_position{});
  thrust::copy_if(sys, positions, positions + static_cast<std::ptrdiff_t>(n), first, idx, at_least_key<T>{values, cut});
  thrust::transform(sys, idx, idx + passing, keys, candidate_key<T>{values});
  return radix_select_and_emit<T, System>(passing, k, key_of_candidates<key_type>{keys}, index_of_candidates{idx},
                                          out, state, hist, block_counts, threshold);
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp

#if defined(__CUDACC__)
#include "cuda_select.cuh"
#endif
