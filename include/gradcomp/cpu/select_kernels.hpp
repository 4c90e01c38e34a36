// CPU selection kernels: radix select on magnitude keys, threshold compaction and the DGC
// sampled-threshold loop. Arguments are validated by the public functions in select/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>

#include "../detail/magnitude.hpp"
#include "../detail/rng.hpp"
#include "../detail/workspace.hpp"
#include "../error.hpp"
#include "../select/selection_types.hpp"
#include "../span.hpp"

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

template <class T>
result<std::size_t> exact_topk(span<const T> values, std::size_t k, span<std::uint32_t> out,
                               T* threshold) {
  const T* v = values.data();
  return exact_topk_over<T>(
      values.size(), k, [v](std::size_t i) { return magnitude_key(v[i]); },
      [](std::size_t i) { return static_cast<std::uint32_t>(i); }, out.data(), threshold);
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
  std::size_t candidate_cap = 0; // candidates kept while counting (floor(upper_bound * k))
};

inline sample_plan plan_sampling(const sampled_threshold_config& cfg, std::size_t n,
                                 std::size_t k) {
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
  const std::size_t ratio_samples =
      static_cast<std::size_t>(std::ceil(cfg.sample_ratio * static_cast<double>(n)));
  const std::size_t need = std::max(ratio_samples, min_samples);
  if (cfg.sampling == sampling_mode::strided) {
    std::size_t stride =
        static_cast<std::size_t>(std::ceil(static_cast<double>(n) / static_cast<double>(need) / 32.0)) *
            32 + 1;
    while (stride > 1 && n / stride < need) stride -= 8;  // 32a+1 - 8j reaches 1 exactly
    p.stride = stride;
    p.max_samples = (n + stride - 1) / stride;
  } else {
    p.max_samples = need;
  }
  p.candidate_cap = std::min(
      n, static_cast<std::size_t>(std::floor(cfg.upper_bound * static_cast<double>(k))));
  return p;
}

template <class T>
std::size_t sampled_threshold_workspace_bytes(const sampled_threshold_config& cfg, std::size_t n,
                                              std::size_t k) {
  const sample_plan p = plan_sampling(cfg, n, k);
  if (p.exact) return 0;
  return workspace_slot_bytes<key_t<T>>(p.max_samples) +
         workspace_slot_bytes<std::uint32_t>(p.candidate_cap);
}

template <class T>
result<selection_result<T>> sampled_threshold_select(span<const T> values, std::size_t k,
                                                     const sampled_threshold_config& cfg,
                                                     std::uint64_t seed,
                                                     span<std::uint32_t> out,
                                                     span<std::byte> workspace) {
  using key_type = key_t<T>;
  const std::size_t n = values.size();
  selection_result<T> res;
  res.target = k;
  const sample_plan plan = plan_sampling(cfg, n, k);
  if (plan.exact) {
    auto r = exact_topk<T>(values, k, out, &res.threshold);
    if (!r) return fail(r.error());
    res.count = *r;
    res.exact = true;
    return res;
  }
  workspace_carver carver(workspace);
  key_type* samples = carver.take<key_type>(plan.max_samples);
  std::uint32_t* candidates = carver.take<std::uint32_t>(plan.candidate_cap);
  if (samples == nullptr || candidates == nullptr) return fail(errc::workspace_too_small);

  // 1. Sample magnitudes with a generator that depends on the seed only, so every worker draws
  //    the same positions.
  splitmix64 rng(seed);
  const T* v = values.data();
  std::size_t s = 0;
  if (cfg.sampling == sampling_mode::strided) {
    for (std::size_t i = rng.below(plan.stride); i < n; i += plan.stride)
      samples[s++] = magnitude_key(v[i]);
  } else {
    for (; s < plan.max_samples; ++s) samples[s] = magnitude_key(v[rng.below(n)]);
  }
  res.sample_count = s;

  // 2. The threshold is the ceil(s * density)-th largest sampled magnitude.
  std::size_t top = static_cast<std::size_t>(
      std::ceil(static_cast<double>(s) * static_cast<double>(k) / static_cast<double>(n)));
  top = std::min(std::max<std::size_t>(top, 1), s);
  std::nth_element(samples, samples + (top - 1), samples + s, std::greater<key_type>());
  key_type threshold_key = samples[top - 1];

  // 3. Adaptation loop.
  const double kd = static_cast<double>(k);
  for (int round = 1;; ++round) {
    bool nan = false;
    const std::size_t count = threshold_scan(values, threshold_key, candidates, plan.candidate_cap, &nan);
    if (nan) return fail(errc::nan_input);
    res.rounds = round;
    res.threshold = value_of_key<T>(threshold_key);
    if (count > plan.candidate_cap) {
      // Far too many to keep: the exact top-k of the input is the exact top-k of the candidates.
      auto r = exact_topk<T>(values, k, out, &res.threshold);
      if (!r) return fail(r.error());
      res.count = *r;
      res.exact = true;
      return res;
    }
    if (count > k) {
      if (cfg.truncation == truncation_mode::index_order) {
        std::copy(candidates, candidates + k, out.data());
        res.count = k;
        return res;
      }
      auto r = exact_topk_over<T>(
          count, k, [v, candidates](std::size_t j) { return magnitude_key(v[candidates[j]]); },
          [candidates](std::size_t j) { return candidates[j]; }, out.data(), &res.threshold);
      if (!r) return fail(r.error());
      res.count = *r;
      res.exact = true;  // every element above the cut is a candidate, so this is the top-k
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

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
