// DGC's sampled-threshold selection on the portable Thrust backend: the CPU's algorithm
// (cpu::sampled_threshold_select) step for step, so that the indices and every field of the
// selection_result (count, threshold, sample size, rounds, exactness) are bitwise the CPU's.
//
// - Plan: cpu::plan_sampling(cfg, n, k); inputs too small to sample take the plain radix select.
// - Sample: the strided positions from the CPU's offset (a function of the seed), or the uniform
//   positions of the CPU's generator (drawn on the host: its rejection step makes it sequential),
//   gathered as magnitude keys and sorted in descending order; the threshold is the CPU's
//   ceil(s * k / n)-th largest.
// - Rounds: the elements at or above the threshold are counted; more than the candidate capacity
//   -> the exact top-k of the whole input; otherwise they are compacted (ascending, with their
//   keys), a NaN among them is refused, and the CPU's decision follows: the exact top-k of the
//   candidates, the first k by index, acceptance, or a lower threshold (the CPU's arithmetic)
//   and another round.
//
// The host takes the decisions between the steps from values it copies back (the threshold key,
// each round's count, the NaN verdict).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "../config.hpp"
#include "../cpu/select_kernels.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/rng.hpp"
#include "../detail/workspace.hpp"
#include "../error.hpp"
#include "../select/selection_types.hpp"
#include "select.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class T>
struct strided_sample_key {
  const T* v;
  std::size_t offset;
  std::size_t stride;
  GRADCOMP_HD key_t<T> operator()(std::size_t j) const { return magnitude_key(v[offset + j * stride]); }
};

// The workspace of sampled_threshold_select for (n, k): the sample's keys (then the candidates'),
// the candidates, the uniform sample's positions and the radix select over the candidates; or
// the exact top-k's over the whole input, which reuses all of it.
template <class T, class System>
std::size_t sampled_threshold_workspace_bytes(const sampled_threshold_config& cfg, std::size_t n, std::size_t k) {
  const cpu::sample_plan p = cpu::plan_sampling(cfg, n, k);
  if (p.exact) return radix_workspace_bytes<T>(n);
  std::size_t sampled = workspace_slot_bytes<key_t<T>>(std::max(p.max_samples, p.candidate_cap)) +
                        workspace_slot_bytes<std::uint32_t>(p.candidate_cap) +
                        radix_workspace_bytes<T>(p.candidate_cap);
  if (cfg.sampling == sampling_mode::uniform) sampled += workspace_slot_bytes<std::uint32_t>(p.max_samples);
  return std::max(sampled, exact_topk_workspace_bytes<T, System>(n, k));
}

// cpu::sampled_threshold_select over values[0, n) in System's memory: ascending indices into
// `out` (k entries), `workspace` at least sampled_threshold_workspace_bytes<T, System>(cfg, n, k) bytes.
template <class T, class System>
result<selection_result<T>> sampled_threshold_select(const T* values, std::size_t n, std::size_t k,
                                                     const sampled_threshold_config& cfg, std::uint64_t seed,
                                                     std::uint32_t* out, std::byte* workspace,
                                                     std::size_t workspace_bytes) {
  using key_type = key_t<T>;
  const auto sys = exec<System>();
  const thrust::counting_iterator<std::size_t> first(0);
  const cpu::sample_plan plan = cpu::plan_sampling(cfg, n, k);
  workspace_carver carver(span<std::byte>(workspace, workspace_bytes));
  selection_result<T> res;
  res.target = k;
  if (plan.exact) {
    const auto r = exact_topk_over<T, System>(n, k, key_of_values<T>{values}, index_of_position{}, out, carver,
                                              &res.threshold);
    if (!r) return fail(r.error());
    res.count = *r;
    res.exact = true;
    return res;
  }
  key_type* keys = carver.take<key_type>(std::max(plan.max_samples, plan.candidate_cap));
  std::uint32_t* candidates = carver.take<std::uint32_t>(plan.candidate_cap);
  std::uint32_t* positions =
      cfg.sampling == sampling_mode::uniform ? carver.take<std::uint32_t>(plan.max_samples) : nullptr;
  if (keys == nullptr || candidates == nullptr || (cfg.sampling == sampling_mode::uniform && positions == nullptr))
    return fail(errc::workspace_too_small);

  // 1. The sample's keys, from the CPU's positions.
  std::size_t s = 0;
  if (cfg.sampling == sampling_mode::strided) {
    const std::size_t offset = cpu::strided_sample_offset(seed, plan.stride);
    s = offset < n ? (n - 1 - offset) / plan.stride + 1 : 0;
    thrust::transform(sys, first, first + static_cast<std::ptrdiff_t>(s), keys,
                      strided_sample_key<T>{values, offset, plan.stride});
  } else {
    std::vector<std::uint32_t> drawn(plan.max_samples);
    splitmix64 rng(seed);
    for (auto& p : drawn) p = static_cast<std::uint32_t>(rng.below(n));
    s = drawn.size();
    copy_bytes_to_system<System>(drawn.data(), positions, s * sizeof(std::uint32_t));
    thrust::transform(sys, positions, positions + s, keys, candidate_key<T>{values});
  }
  res.sample_count = s;
  if (s == 0) return fail(errc::invalid_argument);  // not reached: the plan samples at least once

  // 2. The threshold: the sample's top-th largest key.
  thrust::sort(sys, keys, keys + s, thrust::greater<key_type>());
  key_type threshold_key = read_value<System>(keys + (cpu::sample_rank(s, k, n) - 1));

  // 3. The adaptation loop.
  const double kd = static_cast<double>(k);
  const auto positions_of_all = thrust::make_transform_iterator(first, index_of_position{});
  for (int round = 1;; ++round) {
    const at_least_key<T> passes{values, threshold_key};
    const auto count =
        static_cast<std::size_t>(thrust::count_if(sys, first, first + static_cast<std::ptrdiff_t>(n), passes));
    res.rounds = round;
    res.threshold = value_of_key<T>(threshold_key);
    if (count > plan.candidate_cap) {
      // Far more than the workspace holds: the exact top-k of the whole input (which also finds
      // a NaN), reusing the workspace.
      const auto r = exact_topk<T, System>(values, n, k, out, workspace, workspace_bytes, &res.threshold);
      if (!r) return fail(r.error());
      res.count = *r;
      res.exact = true;
      return res;
    }
    thrust::copy_if(sys, positions_of_all, positions_of_all + static_cast<std::ptrdiff_t>(n), first, candidates,
                    passes);
    thrust::transform(sys, candidates, candidates + count, keys, candidate_key<T>{values});
    // NaN keys lie above every threshold: a NaN is always a candidate, and the largest key tells.
    // (A maximum, not thrust::any_of, whose result on the CUDA system is a padded pair read back
    // with its padding.)
    if (count != 0 && is_nan_key<T>(thrust::reduce(sys, keys, keys + count, key_type(0), thrust::maximum<key_type>())))
      return fail(errc::nan_input);
    if (count > k) {
      if (count <= plan.upper && cfg.truncation == truncation_mode::index_order) {
        thrust::copy_n(sys, candidates, k, out);
        res.count = k;
        return res;
      }
      const auto r = exact_topk_over<T, System>(count, k, key_of_candidates<key_type>{keys},
                                                index_of_candidates{candidates}, out, carver, &res.threshold);
      if (!r) return fail(r.error());
      res.count = *r;
      res.exact = true;
      return res;
    }
    if (static_cast<double>(count) >= cfg.lower_bound * kd || round >= cfg.max_rounds) {
      thrust::copy_n(sys, candidates, count, out);
      res.count = count;
      return res;
    }
    threshold_key = magnitude_key(static_cast<T>(value_of_key<T>(threshold_key) * cfg.threshold_decay));
  }
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
