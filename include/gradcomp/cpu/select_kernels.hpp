// CPU selection kernels: radix select on magnitude keys, threshold compaction and the DGC
// sampled-threshold loop. Arguments are validated by the public functions in select/.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#endif

#include "../detail/magnitude.hpp"
#include "../detail/rng.hpp"
#include "../detail/workspace.hpp"
#include "../error.hpp"
#include "../selection_types.hpp"
#include "../span.hpp"
#include "../detail/simd.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

inline constexpr int radix_digit_bits = 11;
inline constexpr std::size_t take_all_equal = std::numeric_limits<std::size_t>::max();

// The k-th largest key of a set, expressed as the rule "take every key > key, then the first
// take_equal keys == key in index order"; with that rule exactly k elements are taken.
template <class Key>
struct kth_key {
  Key key = 0;
  std::size_t take_equal = 0;
  bool nan = false;
};

// Radix select over `count` keys given by key_at(i), 1 <= k <= count. One histogram pass per
// 11-bit digit (3 for float, 6 for double), most significant first; each pass only counts keys
// whose higher digits match the prefix found so far. Stops early when the prefix bin holds exactly
// the elements still needed.
template <class T, class KeyAt>
kth_key<key_t<T>> radix_kth_largest(std::size_t count, std::size_t k, KeyAt key_at) {
  using key_type = key_t<T>;
  kth_key<key_type> res;
  std::uint32_t hist[std::size_t(1) << radix_digit_bits];
  key_type prefix = 0;
  key_type mask = 0;
  std::size_t need = k;
  int shift = magnitude_traits<T>::key_bits;
  bool first = true;
  while (shift > 0) {
    const int bits = std::min(radix_digit_bits, shift);
    shift -= bits;
    const std::size_t bins = std::size_t(1) << bits;
    const key_type digit_mask = static_cast<key_type>(bins - 1);
    std::fill(hist, hist + bins, 0u);
    if (first) {
      for (std::size_t i = 0; i < count; ++i) ++hist[(key_at(i) >> shift) & digit_mask];
      // NaN keys sort above infinity: only the top bins can hold them.
      const std::size_t inf_bin = static_cast<std::size_t>(magnitude_traits<T>::inf_key >> shift);
      bool maybe_nan = false;
      for (std::size_t b = inf_bin; b < bins; ++b) maybe_nan |= hist[b] != 0;
      if (maybe_nan) {
        for (std::size_t i = 0; i < count; ++i) {
          if (is_nan_key<T>(key_at(i))) {
            res.nan = true;
            return res;
          }
        }
      }
      first = false;
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        const key_type key = key_at(i);
        if ((key & mask) == prefix) ++hist[(key >> shift) & digit_mask];
      }
    }
    std::size_t above = 0;
    std::size_t d = bins - 1;
    while (above + hist[d] < need) above += hist[d--];
    need -= above;
    prefix |= static_cast<key_type>(d) << shift;
    mask |= digit_mask << shift;
    if (hist[d] == need) {  // the whole bin is taken: every key >= prefix is selected
      res.key = prefix;
      res.take_equal = take_all_equal;
      return res;
    }
  }
  res.key = prefix;
  res.take_equal = need;
  return res;
}

// Writes index_at(i) for the elements selected by `kth`, in ascending i; returns the count.
template <class T, class KeyAt, class IndexAt>
std::size_t emit_selected(std::size_t count, const kth_key<key_t<T>>& kth, KeyAt key_at,
                          IndexAt index_at, std::uint32_t* out) {
  std::size_t j = 0;
  std::size_t equal_left = kth.take_equal;
  for (std::size_t i = 0; i < count; ++i) {
    const key_t<T> key = key_at(i);
    if (key > kth.key) {
      out[j++] = index_at(i);
    } else if (key == kth.key && equal_left != 0) {
      out[j++] = index_at(i);
      if (equal_left != take_all_equal) --equal_left;
    }
  }
  return j;
}

template <class T>
bool contains_nan(span<const T> values) {
  bool nan = false;
  for (std::size_t i = 0; i < values.size(); ++i) nan |= is_nan_key<T>(magnitude_key(values[i]));
  return nan;
}

// Exact top-k by magnitude over a subset given by key_at/index_at; writes ascending indices.
template <class T, class KeyAt, class IndexAt>
result<std::size_t> exact_topk_over(std::size_t count, std::size_t k, KeyAt key_at,
                                    IndexAt index_at, std::uint32_t* out, T* threshold) {
  if (k == 0) {
    *threshold = std::numeric_limits<T>::infinity();
    return std::size_t(0);
  }
  const kth_key<key_t<T>> kth = radix_kth_largest<T>(count, k, key_at);
  if (kth.nan) return fail(errc::nan_input);
  *threshold = value_of_key<T>(kth.key);
  return emit_selected<T>(count, kth, key_at, index_at, out);
}

// Exact top-k by radix select over the whole input (3 histogram passes for float, then one
// output pass); needs no workspace.
template <class T>
result<std::size_t> exact_topk_radix(span<const T> values, std::size_t k, span<std::uint32_t> out,
                                     T* threshold) {
  const T* v = values.data();
  return exact_topk_over<T>(
      values.size(), k, [v](std::size_t i) { return magnitude_key(v[i]); },
      [](std::size_t i) { return static_cast<std::uint32_t>(i); }, out.data(), threshold);
}

// Geometry of the sample-guided exact top-k for (n, k), shared by the workspace query and the
// kernel so that the two can never disagree.
struct topk_plan {
  bool radix_only = true;         // small input or large k: plain radix select
  std::size_t stride = 0;         // one sample every `stride` elements
  std::size_t samples = 0;
  std::size_t rank = 0;           // the cut is the rank-th largest sampled key (1-based)
  std::size_t candidate_cap = 0;  // candidates kept by the filter pass
};

inline constexpr std::size_t topk_min_sampled_n = std::size_t(1) << 15;
inline constexpr std::size_t topk_target_samples = 8192;

// The plan of an exact top-k of k of n keys; the same on the host and in device code (the Thrust
// backend's model-wide top-k plans every tensor's on the device).
GRADCOMP_HD inline topk_plan plan_topk(std::size_t n, std::size_t k) {
  topk_plan p;
  if (k == 0 || n < topk_min_sampled_n || k > n / 16) return p;
  p.stride = n / topk_target_samples;
  p.samples = (n + p.stride - 1) / p.stride;
  // About k * samples / n sampled keys lie above the k-th largest key. Cutting at a rank three
  // standard deviations (plus a few) higher makes "fewer than k pass" rare; about
  // rank * n / samples elements then pass, and twice that is kept.
  const double expected = static_cast<double>(k) * static_cast<double>(p.samples) / static_cast<double>(n);
  const double margin = rounded(3.0 * sqrt(expected));
  const auto rank = static_cast<std::size_t>(ceil(expected + margin + 4.0));
  p.rank = rank < p.samples ? rank : p.samples;
  const double passing = static_cast<double>(p.rank) * static_cast<double>(n) / static_cast<double>(p.samples);
  const std::size_t cap = static_cast<std::size_t>(2.0 * passing) + 1024;
  p.candidate_cap = cap < n ? cap : n;
  p.radix_only = false;
  return p;
}

template <class T>
std::size_t exact_topk_workspace_bytes(std::size_t n, std::size_t k) {
  const topk_plan p = plan_topk(n, k);
  if (p.radix_only) return 0;
  return workspace_slot_bytes<key_t<T>>(std::max(p.samples, p.candidate_cap)) +
         workspace_slot_bytes<std::uint32_t>(p.candidate_cap);
}

inline constexpr std::size_t filter_block = 16;

// True when some element of v[0, filter_block) has a magnitude key >= cut. Keys and the cut are
// below 2^(bits-1), so key >= cut exactly when (cut - 1 - key) is negative; OR-ing those
// differences tests a block without branches. On x86-64 with SSE2 (every x86-64 CPU) the block
// is tested with vector instructions; elsewhere the compiler vectorises what it can.
template <class T>
inline bool block_has_key_at_least(const T* v, key_t<T> cut) noexcept {
  using signed_key = std::make_signed_t<key_t<T>>;
  const signed_key cut_minus_one = static_cast<signed_key>(cut) - 1;
#if defined(__SSE2__) || defined(_M_X64)
  if constexpr (std::is_same_v<T, float>) {
    const __m128i magnitude = _mm_set1_epi32(0x7fffffff);
    const __m128i c = _mm_set1_epi32(static_cast<int>(cut_minus_one));
    __m128i acc = _mm_setzero_si128();
    for (std::size_t j = 0; j < filter_block; j += 4) {
      const __m128i bits = _mm_castps_si128(_mm_loadu_ps(v + j));
      acc = _mm_or_si128(acc, _mm_sub_epi32(c, _mm_and_si128(bits, magnitude)));
    }
    return _mm_movemask_ps(_mm_castsi128_ps(acc)) != 0;
  } else {
    const __m128i magnitude = _mm_set1_epi64x(0x7fffffffffffffffLL);
    const __m128i c = _mm_set1_epi64x(static_cast<long long>(cut_minus_one));
    __m128i acc = _mm_setzero_si128();
    for (std::size_t j = 0; j < filter_block; j += 2) {
      const __m128i bits = _mm_castpd_si128(_mm_loadu_pd(v + j));
      acc = _mm_or_si128(acc, _mm_sub_epi64(c, _mm_and_si128(bits, magnitude)));
    }
    return _mm_movemask_pd(_mm_castsi128_pd(acc)) != 0;
  }
#else
  signed_key any = 0;
  for (std::size_t j = 0; j < filter_block; ++j)
    any |= cut_minus_one - static_cast<signed_key>(magnitude_key(v[j]));
  return any < 0;
#endif
}

// Appends to (idx, keys) every element of v[first, last) whose key is >= cut, counting past
// `cap` without storing. Blocks without any such key (the common case) are skipped after one
// vector test. Entries past the returned count (below cap) may be overwritten: they are scratch.
template <class T>
std::size_t filter_at_least(const T* v, std::size_t first, std::size_t last, key_t<T> cut,
                            std::uint32_t* idx, key_t<T>* keys, std::size_t count, std::size_t cap) {
  std::size_t i = first;
#if GRADCOMP_HAVE_AVX2_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx2()) {
      i = first + ((last - first) & ~std::size_t(31));
      count = filter_at_least_avx2(v, first, i, cut, idx, keys, count, cap);
      if (count > cap) return count;
    }
  }
#endif
  constexpr std::size_t block = filter_block;
  for (; i + block <= last; i += block) {
    if (!block_has_key_at_least(v + i, cut)) continue;
    for (std::size_t j = 0; j < block; ++j) {
      const key_t<T> key = magnitude_key(v[i + j]);
      if (key >= cut) {
        if (count < cap) {
          idx[count] = static_cast<std::uint32_t>(i + j);
          keys[count] = key;
        }
        ++count;
      }
    }
    if (count > cap) return count;
  }
  for (; i < last; ++i) {
    const key_t<T> key = magnitude_key(v[i]);
    if (key >= cut) {
      if (count < cap) {
        idx[count] = static_cast<std::uint32_t>(i);
        keys[count] = key;
      }
      ++count;
    }
  }
  return count;
}

// Exact top-k, sample-guided: the keys of a strided sample give a cut that a little more than k
// elements pass; one filter pass keeps those elements (ascending, with their keys), and a radix
// select over them finds the k-th largest key. Every element at or above that key is a
// candidate, so the result is the exact top-k with ties to the lower index, as with the plain
// radix select, which runs instead when the input is small, k is large, or the cut lets fewer
// than k or more than the workspace holds pass (adversarial inputs: the result is the same).
template <class T>
result<std::size_t> exact_topk(span<const T> values, std::size_t k, span<std::uint32_t> out,
                               span<std::byte> workspace, T* threshold) {
  using key_type = key_t<T>;
  const std::size_t n = values.size();
  const topk_plan plan = plan_topk(n, k);
  if (plan.radix_only) return exact_topk_radix<T>(values, k, out, threshold);
  workspace_carver carver(workspace);
  key_type* keys = carver.take<key_type>(std::max(plan.samples, plan.candidate_cap));
  std::uint32_t* idx = carver.take<std::uint32_t>(plan.candidate_cap);
  if (keys == nullptr || idx == nullptr) return fail(errc::workspace_too_small);

  const T* v = values.data();
  std::size_t s = 0;
  for (std::size_t i = plan.stride / 2; i < n; i += plan.stride) keys[s++] = magnitude_key(v[i]);
  std::nth_element(keys, keys + (plan.rank - 1), keys + s, std::greater<key_type>());
  const key_type cut = keys[plan.rank - 1];
  if (cut == 0) return exact_topk_radix<T>(values, k, out, threshold);  // mostly zeros

  const std::size_t count = filter_at_least(v, 0, n, cut, idx, keys, 0, plan.candidate_cap);
  if (count < k || count > plan.candidate_cap) return exact_topk_radix<T>(values, k, out, threshold);
  return exact_topk_over<T>(
      count, k, [keys](std::size_t j) { return keys[j]; }, [idx](std::size_t j) { return idx[j]; },
      out.data(), threshold);
}

// Counts |v| >= threshold (as keys) and stores the first `capacity` passing indices.
template <class T>
std::size_t threshold_scan(span<const T> values, key_t<T> threshold_key, std::uint32_t* out,
                           std::size_t capacity, bool* nan) {
  std::size_t count = 0;
  bool saw_nan = false;
  const T* v = values.data();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const key_t<T> key = magnitude_key(v[i]);
    saw_nan |= is_nan_key<T>(key);
    if (key >= threshold_key) {
      if (count < capacity) out[count] = static_cast<std::uint32_t>(i);
      ++count;
    }
  }
  *nan = saw_nan;
  return count;
}

// Sample geometry of the sampled-threshold selector for (n, k), shared by the workspace query
// and the selection itself so the two can never disagree.
struct sample_plan {
  bool exact = false;            // n too small for sampling: run the exact top-k
  std::size_t stride = 0;        // strided mode
  std::size_t max_samples = 0;   // upper bound of the samples drawn
  std::size_t upper = 0;         // floor(upper_bound * k): more is "far too many"
  std::size_t candidate_cap = 0; // candidates kept while counting (4 * upper + 1024 at most n)
};

// The plan of a sampled threshold of k of n keys; the same on the host and in device code (the
// Thrust backend's model-wide selection plans every tensor's on the device).
GRADCOMP_HD inline sample_plan plan_sampling(const sampled_threshold_config& cfg, std::size_t n, std::size_t k) {
  sample_plan p;
  if (k == 0 || k >= n) {
    p.exact = true;
    return p;
  }
  // ceil(2 / density) with density = k / n.
  const std::size_t min_samples = (2 * n + k - 1) / k;
  if (n <= min_samples) {
    p.exact = true;
    return p;
  }
  const auto ratio_samples = static_cast<std::size_t>(ceil(cfg.sample_ratio * static_cast<double>(n)));
  const std::size_t need = ratio_samples > min_samples ? ratio_samples : min_samples;
  if (cfg.sampling == sampling_mode::strided) {
    std::size_t stride =
        static_cast<std::size_t>(ceil(static_cast<double>(n) / static_cast<double>(need) / 32.0)) * 32 + 1;
    while (stride > 1 && n / stride < need) stride -= 8;  // 32a+1 - 8j reaches 1 exactly
    p.stride = stride;
    p.max_samples = (n + stride - 1) / stride;
  } else {
    p.max_samples = need;
  }
  const auto upper = static_cast<std::size_t>(floor(cfg.upper_bound * static_cast<double>(k)));
  p.upper = upper < n ? upper : n;
  // Room for an overshoot well past `upper`: the exact top-k of the candidates then costs little,
  // where the exact top-k of the whole input would cost a second pass over it.
  const std::size_t cap = 4 * p.upper + 1024;
  p.candidate_cap = cap < n ? cap : n;
  return p;
}

template <class T>
std::size_t sampled_threshold_workspace_bytes(const sampled_threshold_config& cfg, std::size_t n,
                                              std::size_t k) {
  const sample_plan p = plan_sampling(cfg, n, k);
  if (p.exact) return 0;
  // The sample and the candidates, or (when far too many pass) the exact top-k's own workspace.
  return std::max(workspace_slot_bytes<key_t<T>>(std::max(p.max_samples, p.candidate_cap)) +
                      workspace_slot_bytes<std::uint32_t>(p.candidate_cap),
                  exact_topk_workspace_bytes<T>(n, k));
}

// The sampled-threshold selection in parts, so that the fused DGC step (fused_kernels.hpp) can
// sample and count the accumulator while it updates it.
template <class T>
struct sampled_state {
  sample_plan plan;
  key_t<T>* samples = nullptr;  // the sample's keys, then the candidates' keys
  std::uint32_t* candidates = nullptr;
  key_t<T> threshold_key = 0;
  std::size_t sample_count = 0;
};

// First position of the strided sample drawn with `seed`.
GRADCOMP_HD inline std::size_t strided_sample_offset(std::uint64_t seed, std::size_t stride) {
  splitmix64 rng(seed);
  return rng.below(stride);
}

// Rank (1-based) of the sampled key that becomes the threshold: ceil(s * k / n), in [1, s].
GRADCOMP_HD inline std::size_t sample_rank(std::size_t s, std::size_t k, std::size_t n) {
  const auto top =
      static_cast<std::size_t>(ceil(static_cast<double>(s) * static_cast<double>(k) / static_cast<double>(n)));
  return top < 1 ? 1 : top > s ? s : top;
}

// Carves the workspace and computes the threshold from the sampled keys key_at(i) (1.-2.).
template <class T, class KeyAt>
result<void> sampled_threshold_prepare(std::size_t n, std::size_t k, const sampled_threshold_config& cfg,
                                       std::uint64_t seed, span<std::byte> workspace, KeyAt key_at,
                                       sampled_state<T>& st) {
  using key_type = key_t<T>;
  workspace_carver carver(workspace);
  st.samples = carver.take<key_type>(std::max(st.plan.max_samples, st.plan.candidate_cap));
  st.candidates = carver.take<std::uint32_t>(st.plan.candidate_cap);
  if (st.samples == nullptr || st.candidates == nullptr) return fail(errc::workspace_too_small);

  // 1. Sample magnitudes with a generator that depends on the seed only, so every worker given
  //    the same seed draws the same positions.
  std::size_t s = 0;
  if (cfg.sampling == sampling_mode::strided) {
    for (std::size_t i = strided_sample_offset(seed, st.plan.stride); i < n; i += st.plan.stride)
      st.samples[s++] = key_at(i);
  } else {
    splitmix64 rng(seed);
    for (; s < st.plan.max_samples; ++s) st.samples[s] = key_at(rng.below(n));
  }
  st.sample_count = s;

  // 2. The threshold is the ceil(s * density)-th largest sampled magnitude.
  const std::size_t top = sample_rank(s, k, n);
  std::nth_element(st.samples, st.samples + (top - 1), st.samples + s, std::greater<key_type>());
  st.threshold_key = st.samples[top - 1];
  return {};
}

// The elements of a larger set whose keys are >= `cut`, ascending by index: what a filter pass
// over the whole input with that cut collects. A later round whose threshold is >= cut filters
// these instead of the input (the same result, no pass over the data). The pool's filter emits
// slots (positions in the pool, ascending with the indices), so that a selection made from them
// says where each selected entry is in the pool; to_indices() or settle() turns them into
// indices. Any read of the input puts the pool back first, and the candidates then hold indices
// again (`slots` tells which).
//
// The fused DGC step also moves elements out of the data while collecting them (move_out): every
// entry records its value (and momentum), and those with key >= move_cut, the step's guess of
// the selection, are zeroed in the data until put_back() restores them or settle() hands the
// selection out.
template <class T>
struct candidate_pool {
  std::uint32_t* idx = nullptr;  // nullptr: no pool
  key_t<T>* keys = nullptr;
  std::size_t count = 0;
  key_t<T> cut = 0;
  bool slots = false;  // the last filter's output holds slots, not indices

  T* data = nullptr;              // the data entries are moved out of
  T* momentum = nullptr;          // zeroed with them (momentum factor masking), or nullptr
  T* values = nullptr;            // data[idx[j]] before the move
  T* momentum_values = nullptr;   // momentum[idx[j]] before the move
  key_t<T> move_cut = 0;          // entries with key >= move_cut are moved out
  std::size_t moved = 0;          // entries [0, moved) have been through move_out

  bool covers(key_t<T> threshold_key) const noexcept { return idx != nullptr && threshold_key >= cut; }

  // Records entries [moved, upto) and zeroes those with key >= move_cut in the data, without a
  // branch. The fused pass calls it after each block, whose elements are then in the L1 cache.
  void move_out(std::size_t upto) noexcept {
    for (; moved < upto; ++moved) {
      const std::uint32_t i = idx[moved];
      const bool out = keys[moved] >= move_cut;
      const T x = data[i];
      values[moved] = x;
      data[i] = out ? T(0) : x;
      if (momentum != nullptr) {
        const T y = momentum[i];
        momentum_values[moved] = y;
        momentum[i] = out ? T(0) : y;
      }
    }
  }

  // Restores every moved entry whose key is >= move_cut: the data is then as if nothing had
  // been moved (the pool's entries stay as they are), and what reads it next gets indices.
  void put_back() noexcept {
    for (std::size_t j = 0; j < moved; ++j) {
      const std::size_t ahead = j + gather_prefetch_distance;
      if (ahead < moved && keys[ahead] >= move_cut) prefetch(idx[ahead]);
      if (keys[j] < move_cut) continue;
      data[idx[j]] = values[j];
      if (momentum != nullptr) momentum[idx[j]] = momentum_values[j];
    }
    moved = 0;
    slots = false;
  }

  // Writes the slots of the pool's entries with key >= threshold_key to out_slots and their
  // keys to out_keys; returns their number (never more than count, so never more than the
  // pool's capacity). Branch-free: every entry is written at the next free position
  // (c <= j < count), which advances only when it is kept.
  std::size_t filter(key_t<T> threshold_key, std::uint32_t* out_slots, key_t<T>* out_keys) noexcept {
    std::size_t c = 0;
    for (std::size_t j = 0; j < count; ++j) {
      out_slots[c] = static_cast<std::uint32_t>(j);
      out_keys[c] = keys[j];
      c += keys[j] >= threshold_key ? 1 : 0;
    }
    slots = true;
    return c;
  }

  // Replaces the slots of a selection made from the pool by the entries' indices.
  void to_indices(std::uint32_t* sel, std::size_t count_sel) const noexcept {
    for (std::size_t c = 0; c < count_sel; ++c) sel[c] = idx[sel[c]];
  }

  // The step takes `sel` (slots from the pool's filter, ascending; replaced by their indices):
  // its values go to sel_values and it ends up out of the data (zeroed now where move_out left
  // it), every other entry ends up in the data (put back where move_out took it). Only entries
  // on the wrong side of move_cut touch the data: they are gathered at the front of the pool
  // with the value each must have there, then written with prefetching (scattered writes, each
  // a cache miss, overlap). Uses the pool up.
  void settle(std::uint32_t* sel, std::size_t count_sel, T* sel_values) noexcept {
    // Selected entries are marked in their keys: 0 (below every move_cut) where moved out
    // already, `left_in` (above every key) where still in the data.
    constexpr key_t<T> left_in = ~key_t<T>(0);
    assert(move_cut > 0);
    for (std::size_t c = 0; c < count_sel; ++c) {
      const std::uint32_t j = sel[c];
      assert(j < moved);
      sel[c] = idx[j];
      sel_values[c] = values[j];
      keys[j] = keys[j] >= move_cut ? key_t<T>(0) : left_in;
    }
    // Wrong side now means key >= move_cut: selected entries left in (to be zeroed) and moved
    // entries not selected (to go back). Branch-free: each entry is written at the next free
    // slot (w <= j), which advances only when it is one of them.
    const std::size_t w =
        momentum != nullptr ? gather_wrong_side<true>(left_in) : gather_wrong_side<false>(left_in);
    for (std::size_t j = 0; j < w; ++j) {
      if (j + gather_prefetch_distance < w) prefetch(idx[j + gather_prefetch_distance]);
      data[idx[j]] = values[j];
      if (momentum != nullptr) momentum[idx[j]] = momentum_values[j];
    }
    moved = 0;
    slots = false;
    idx = nullptr;  // used up
    count = 0;
  }

 private:
  void prefetch(std::uint32_t i) const noexcept {
    prefetch_for_write(data + i);
    if (momentum != nullptr) prefetch_for_write(momentum + i);
  }

  template <bool Momentum>
  std::size_t gather_wrong_side(key_t<T> left_in) noexcept {
    std::uint32_t* const pi = idx;  // locals: the stores below could alias the members
    const key_t<T>* const pk = keys;
    T* const pv = values;
    T* const pm = momentum_values;
    const key_t<T> mc = move_cut;
    const std::size_t np = moved;
    std::size_t w = 0;
    for (std::size_t j = 0; j < np; ++j) {
      const bool zero = pk[j] == left_in;
      pi[w] = pi[j];
      pv[w] = zero ? T(0) : pv[j];
      if constexpr (Momentum) pm[w] = zero ? T(0) : pm[j];
      w += pk[j] >= mc ? 1 : 0;
    }
    return w;
  }
};

// 3. The adaptation loop, given the first round's count (candidates and their keys already in
// `st`, counted past the capacity). Later rounds filter `pool` instead of the input while their
// threshold stays at or above the pool's cut; a pool with moved-out entries is put back before
// anything reads the input.
template <class T>
result<selection_result<T>> sampled_threshold_finish(span<const T> values, std::size_t k,
                                                     const sampled_threshold_config& cfg,
                                                     sampled_state<T>& st, std::size_t count,
                                                     span<std::uint32_t> out,
                                                     span<std::byte> workspace,
                                                     candidate_pool<T>* pool = nullptr) {
  const std::size_t n = values.size();
  const T* v = values.data();
  key_t<T>* candidate_keys = st.samples;
  std::uint32_t* candidates = st.candidates;
  selection_result<T> res;
  res.target = k;
  res.sample_count = st.sample_count;
  key_t<T> threshold_key = st.threshold_key;
  const double kd = static_cast<double>(k);
  for (int round = 1;; ++round) {
    if (round > 1) {
      if (pool != nullptr && pool->covers(threshold_key)) {
        count = pool->filter(threshold_key, candidates, candidate_keys);
      } else {
        if (pool != nullptr) pool->put_back();  // the filter reads the data
        count = filter_at_least(v, 0, n, threshold_key, candidates, candidate_keys, 0,
                                st.plan.candidate_cap);
      }
    }
    res.rounds = round;
    res.threshold = value_of_key<T>(threshold_key);
    if (count > st.plan.candidate_cap) {
      // Far more than the workspace holds (typically after lowering the threshold): the exact
      // top-k of the whole input, which also finds any NaN, reusing the workspace.
      if (pool != nullptr) pool->put_back();
      auto r = exact_topk<T>(values, k, out, workspace, &res.threshold);
      if (!r) return fail(r.error());
      res.count = *r;
      res.exact = true;
      return res;
    }
    // NaN keys sort above every threshold, so a NaN is always a candidate.
    for (std::size_t j = 0; j < count; ++j)
      if (is_nan_key<T>(candidate_keys[j])) return fail(errc::nan_input);
    if (count > k) {
      if (count <= st.plan.upper && cfg.truncation == truncation_mode::index_order) {
        std::copy(candidates, candidates + k, out.data());
        res.count = k;
        return res;
      }
      // Too many (or truncation to the largest): every element above the cut is a candidate,
      // so the top-k of the candidates is the exact top-k.
      auto r = exact_topk_over<T>(
          count, k, [candidate_keys](std::size_t j) { return candidate_keys[j]; },
          [candidates](std::size_t j) { return candidates[j]; }, out.data(), &res.threshold);
      if (!r) return fail(r.error());
      res.count = *r;
      res.exact = true;
      return res;
    }
    if (static_cast<double>(count) >= cfg.lower_bound * kd || round >= cfg.max_rounds) {
      std::copy(candidates, candidates + count, out.data());
      res.count = count;
      return res;
    }
    threshold_key = magnitude_key(static_cast<T>(value_of_key<T>(threshold_key) * cfg.threshold_decay));
  }
}

template <class T>
result<selection_result<T>> sampled_threshold_select(span<const T> values, std::size_t k,
                                                     const sampled_threshold_config& cfg,
                                                     std::uint64_t seed,
                                                     span<std::uint32_t> out,
                                                     span<std::byte> workspace) {
  sampled_state<T> st;
  st.plan = plan_sampling(cfg, values.size(), k);
  if (st.plan.exact) {
    selection_result<T> res;
    res.target = k;
    auto r = exact_topk_radix<T>(values, k, out, &res.threshold);
    if (!r) return fail(r.error());
    res.count = *r;
    res.exact = true;
    return res;
  }
  const T* v = values.data();
  if (auto r = sampled_threshold_prepare<T>(values.size(), k, cfg, seed, workspace,
                                            [v](std::size_t i) { return magnitude_key(v[i]); }, st);
      !r)
    return fail(r.error());
  const std::size_t count = filter_at_least(v, 0, values.size(), st.threshold_key, st.candidates,
                                            st.samples, 0, st.plan.candidate_cap);
  return sampled_threshold_finish<T>(values, k, cfg, st, count, out, workspace);
}

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
