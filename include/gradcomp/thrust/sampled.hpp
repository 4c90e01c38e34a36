// DGC's sampled-threshold selection on the portable Thrust backend: the CPU's algorithm
// (cpu::sampled_threshold_select), so that the indices and every field of the selection_result
// (count, threshold, sample size, rounds, exactness) are bitwise the CPU's, with every decision
// taken on the device: the host issues a fixed sequence of operations and never waits.
//
// - Plan: cpu::plan_sampling(cfg, n, k); inputs too small to sample take the plain radix select.
// - Sample: the strided positions from the CPU's offset (a function of the seed), or the uniform
//   positions of the CPU's generator: SplitMix64 is counter-based, so draw j is a function of j,
//   and the draws the bounded draw accepts (all but about one in 2^32) are compacted in order; in
//   the unlikely case that more than `uniform_slack` draws are rejected, one thread draws them in
//   sequence. The sample's magnitude keys are sorted in descending order; the threshold is the
//   CPU's ceil(s * k / n)-th largest.
// - Rounds: the CPU's thresholds of every round are known in advance (each is the one before it
//   times the decay, in the CPU's arithmetic), and they do not increase, so one pass counts, for
//   every element, the first round whose threshold it reaches (a histogram of max_rounds bins):
//   the count of round r is the sum of the first r bins. The histogram is a reduction (a sum of
//   one-hot counts, rounds_per_count bins per pass; the default ten rounds take one), not an
//   atomic increment per element: most elements reach the last round's threshold, and ten
//   counters updated by every thread of the device serialise. One thread then replays the CPU's loop
//   over these counts and decides: the exact top-k of the whole input (more than the candidate
//   capacity pass), the exact top-k of the candidates, the first k by index, or acceptance. A NaN
//   anywhere is refused (the CPU refuses it in its first round whichever way that round goes).
// - Then every path is issued, each gated by that decision on the device; the ones not chosen
//   return at once. The candidates are compacted (ascending) at the chosen round's threshold.
#pragma once


#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "../config.hpp"
#include "../cpu/select_kernels.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/rng.hpp"
#include "../detail/workspace.hpp"
#include "../error.hpp"
#include "../selection_types.hpp"
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

// Draws of the uniform sample beyond the needed ones, compacted with them in case some are
// rejected.
constexpr std::size_t uniform_slack = 64;

// Draw j of SplitMix64 seeded with `seed`, bounded to [0, n) (splitmix64::below), and whether
// below() accepts it.
struct uniform_draw {
  std::uint64_t seed;
  std::uint64_t n;
  GRADCOMP_HD std::uint64_t raw(std::size_t j) const {
    return splitmix64_mix(seed + (static_cast<std::uint64_t>(j) + 1) * 0x9e3779b97f4a7c15ull);
  }
  GRADCOMP_HD std::uint32_t operator()(std::size_t j) const { return static_cast<std::uint32_t>(raw(j) % n); }
};
struct uniform_accepted {
  uniform_draw draw;
  GRADCOMP_HD bool operator()(std::size_t j) const { return draw.raw(j) >= (0 - draw.n) % draw.n; }
};
// Where fewer than `samples` draws were accepted: the positions drawn in sequence.
struct uniform_fallback {
  std::uint64_t seed;
  std::uint64_t n;
  std::size_t samples;
  const std::uint64_t* accepted;
  std::uint32_t* positions;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (*accepted >= samples) return;
    splitmix64 rng(seed);
    for (std::size_t j = 0; j < samples; ++j) positions[j] = static_cast<std::uint32_t>(rng.below(n));
  }
};

// What the rounds decided.
enum class sampled_action : std::int32_t {
  skip,              // the gate was closed: nothing runs, nothing is reported
  undecided,
  refuse_nan,
  exact_all,         // the exact top-k of the whole input
  exact_candidates,  // the exact top-k of the candidates
  first_k,           // the first k candidates by index
  accept,            // every candidate
};

// The selection's state in the workspace.
struct sampled_device_state {
  std::uint64_t chosen;     // the chosen round's threshold key
  std::uint64_t count;      // elements at or above it
  std::uint64_t compacted;  // the compaction's count (the same)
  std::uint64_t accepted;   // uniform draws accepted
  std::int32_t action;      // a sampled_action
  std::int32_t rounds;
  std::int32_t exact_all_gate;         // 0 (errc::ok): the exact top-k of the whole input runs
  std::int32_t exact_candidates_gate;  // 0: the exact top-k of the candidates runs
};

// Rounds counted by one reduction pass over the input.
constexpr int rounds_per_count = 16;

// The counts of one pass: of the elements whose first round reached is `first + j` (j <
// rounds_per_count), and of NaNs (counted by the first pass only). Each is at most n < 2^32.
struct round_counts {
  std::uint32_t level[rounds_per_count];
  std::uint32_t nan;
};

struct add_round_counts {
  GRADCOMP_HD round_counts operator()(const round_counts& a, const round_counts& b) const {
    round_counts r;
    for (int j = 0; j < rounds_per_count; ++j) r.level[j] = a.level[j] + b.level[j];
    r.nan = a.nan + b.nan;
    return r;
  }
};

// The passes that count `rounds` rounds.
inline std::size_t round_count_passes(int rounds) {
  return (static_cast<std::size_t>(rounds) + rounds_per_count - 1) / rounds_per_count;
}

// One thread: the state set up, the thresholds of every round (the CPU's arithmetic).
template <class T>
struct sampled_start {
  sampled_device_state* s;
  const key_t<T>* rank_key;  // the sorted sample's rank-th key
  key_t<T>* thresholds;
  int rounds;
  double decay;
  const std::int32_t* gate;
  GRADCOMP_HD void operator()(std::size_t) const {
    s->count = 0;
    s->compacted = 0;
    s->rounds = 0;
    s->action = static_cast<std::int32_t>(gate_open(gate) ? sampled_action::undecided : sampled_action::skip);
    s->exact_all_gate = 1;
    s->exact_candidates_gate = 1;
    key_t<T> key = *rank_key;
    s->chosen = key;
    for (int r = 0; r < rounds; ++r) {
      thresholds[r] = key;
      key = magnitude_key(static_cast<T>(value_of_key<T>(key) * decay));
    }
  }
};

// Per element, as one pass's counts: a one at the first round whose threshold its key reaches
// (the thresholds do not increase) where that round is one of the pass's [first, last); a NaN
// counted by the first pass. Nothing where the gate was closed.
template <class T>
struct round_of_element {
  const T* v;
  const key_t<T>* thresholds;
  int first;
  int last;
  const sampled_device_state* s;
  GRADCOMP_HD round_counts operator()(std::size_t i) const {
    round_counts c = {};
    if (s->action == static_cast<std::int32_t>(sampled_action::skip)) return c;
    const key_t<T> key = magnitude_key(v[i]);
    if (is_nan_key<T>(key)) {
      c.nan = first == 0 ? 1 : 0;
      return c;
    }
    if (key < thresholds[last - 1] || (first > 0 && key >= thresholds[first - 1])) return c;
    int lo = first, hi = last - 1;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (key >= thresholds[mid]) hi = mid;
      else lo = mid + 1;
    }
    // Every bin written at a constant index (kept in registers on a GPU, not local memory).
    for (int j = 0; j < rounds_per_count; ++j) c.level[j] = j == lo - first ? 1 : 0;
    return c;
  }
};

// One thread: the CPU's adaptation loop over the rounds' counts.
template <class T>
struct sampled_decide {
  sampled_device_state* s;
  const key_t<T>* thresholds;
  const round_counts* counts;  // round_count_passes(rounds) of them
  int rounds;
  std::uint64_t k;
  std::uint64_t cap;
  std::uint64_t upper;
  double lower_bound;
  bool index_order;
  selection_sink<T> sink;
  std::size_t stride = 1;  // between one pass's counts and the next's
  GRADCOMP_HD void operator()(std::size_t) const {
    if (s->action == static_cast<std::int32_t>(sampled_action::skip)) return;
    if (counts[0].nan != 0) {
      s->action = static_cast<std::int32_t>(sampled_action::refuse_nan);
      *sink.status = static_cast<std::int32_t>(errc::nan_input);
      return;
    }
    const double kd = static_cast<double>(k);
    std::uint64_t count = 0;
    for (int r = 0; r < rounds; ++r) {
      count += counts[(r / rounds_per_count) * stride].level[r % rounds_per_count];
      s->rounds = r + 1;
      s->chosen = thresholds[r];
      s->count = count;
      sampled_action a = sampled_action::undecided;
      if (count > cap) {
        a = sampled_action::exact_all;
        s->exact_all_gate = 0;
      } else if (count > k) {
        if (count <= upper && index_order) {
          a = sampled_action::first_k;
        } else {
          a = sampled_action::exact_candidates;
          s->exact_candidates_gate = 0;
        }
      } else if (static_cast<double>(count) >= lower_bound * kd || r + 1 >= rounds) {
        a = sampled_action::accept;
      }
      if (a != sampled_action::undecided) {
        s->action = static_cast<std::int32_t>(a);
        return;
      }
    }
  }
};

GRADCOMP_HD inline bool uses_candidates(std::int32_t action) noexcept {
  return action == static_cast<std::int32_t>(sampled_action::exact_candidates) ||
         action == static_cast<std::int32_t>(sampled_action::first_k) ||
         action == static_cast<std::int32_t>(sampled_action::accept);
}

// The elements at or above the chosen round's threshold, where a path uses them.
template <class T>
struct sampled_candidate {
  const T* v;
  const sampled_device_state* s;
  GRADCOMP_HD bool operator()(std::size_t i) const {
    return uses_candidates(s->action) && magnitude_key(v[i]) >= static_cast<key_t<T>>(s->chosen);
  }
};

// keys[j] = the key of candidate j, where their exact top-k runs.
template <class T>
struct sampled_candidate_keys {
  const T* v;
  const std::uint32_t* candidates;
  key_t<T>* keys;
  const sampled_device_state* s;
  GRADCOMP_HD void operator()(std::size_t j) const {
    if (s->exact_candidates_gate == 0 && j < s->count) keys[j] = magnitude_key(v[candidates[j]]);
  }
};

// The candidates as a source of the radix select: their number is on the device.
template <class Key>
struct counted_source {
  const Key* keys;
  const std::uint32_t* idx;
  const std::uint64_t* count;
  GRADCOMP_HD std::size_t size() const { return static_cast<std::size_t>(*count); }
  GRADCOMP_HD Key key(std::size_t i) const { return keys[i]; }
  GRADCOMP_HD std::uint32_t index(std::size_t i) const { return idx[i]; }
};

// The first k candidates, or all of them, into `out`.
struct sampled_take {
  const std::uint32_t* candidates;
  std::uint32_t* out;
  const sampled_device_state* s;
  std::uint64_t k;
  GRADCOMP_HD void operator()(std::size_t j) const {
    const std::uint64_t taken = s->action == static_cast<std::int32_t>(sampled_action::first_k) ? k
                                : s->action == static_cast<std::int32_t>(sampled_action::accept) ? s->count
                                                                                                : 0;
    if (j < taken) out[j] = candidates[j];
  }
};

// One thread: the outcome of the first-k and accept paths.
template <class T>
struct publish_sampled {
  const sampled_device_state* s;
  selection_sink<T> sink;
  std::uint64_t k;
  std::uint64_t sample_count;
  GRADCOMP_HD void operator()(std::size_t) const {
    const bool first_k = s->action == static_cast<std::int32_t>(sampled_action::first_k);
    if (!first_k && s->action != static_cast<std::int32_t>(sampled_action::accept)) return;
    selection_result<T> r;
    r.count = static_cast<std::size_t>(first_k ? k : s->count);
    r.target = static_cast<std::size_t>(k);
    r.threshold = value_of_key<T>(static_cast<key_t<T>>(s->chosen));
    r.sample_count = static_cast<std::size_t>(sample_count);
    r.rounds = s->rounds;
    r.exact = false;
    *sink.result = r;
    if (sink.kept != nullptr) *sink.kept = r.count;
  }
};

// The fixed part of the workspace: the state, the rounds' thresholds and counts, the uniform
// sample's positions.
template <class T>
std::size_t sampled_fixed_bytes(const sampled_threshold_config& cfg, const cpu::sample_plan& p) {
  const auto rounds = static_cast<std::size_t>(cfg.max_rounds);
  std::size_t bytes = workspace_slot_bytes<sampled_device_state>(1) + workspace_slot_bytes<key_t<T>>(rounds) +
                      workspace_slot_bytes<round_counts>(round_count_passes(cfg.max_rounds));
  if (cfg.sampling == sampling_mode::uniform)
    bytes += workspace_slot_bytes<std::uint32_t>(p.max_samples + uniform_slack);
  return bytes;
}

// The workspace of sampled_threshold_select for (n, k): the fixed part, then either the sample's
// keys (then the candidates'), the candidates and the radix select over them, or the exact
// top-k's over the whole input, in the same bytes (one of the two runs); plus the outcome.
template <class T, class System>
std::size_t sampled_threshold_workspace_bytes(const sampled_threshold_config& cfg, std::size_t n, std::size_t k) {
  const cpu::sample_plan p = cpu::plan_sampling(cfg, n, k);
  const std::size_t outcome = workspace_slot_bytes<selection_result<T>>(1) + workspace_slot_bytes<std::int32_t>(1);
  if (p.exact) return outcome + radix_workspace_bytes<T>(n);
  const std::size_t candidates = workspace_slot_bytes<key_t<T>>(std::max(p.max_samples, p.candidate_cap)) +
                                 workspace_slot_bytes<std::uint32_t>(p.candidate_cap) +
                                 radix_workspace_bytes<T>(p.candidate_cap);
  return outcome + sampled_fixed_bytes<T>(cfg, p) + std::max(candidates, exact_topk_workspace_bytes<T, System>(n, k));
}

// Issues cpu::sampled_threshold_select over values[0, n) in System's memory: ascending indices
// into `out` (k entries), the outcome into `sink` (on the device); `carver` holds what
// sampled_threshold_workspace_bytes<T, System>(cfg, n, k) counts, less the outcome. Nothing waits;
// where the gate is closed, nothing runs. Fails on the host only for a workspace too small.
template <class T, class System>
result<void> issue_sampled_threshold(stream_t stream, const T* values, std::size_t n, std::size_t k,
                                     const sampled_threshold_config& cfg, std::uint64_t seed, std::uint32_t* out,
                                     workspace_carver carver, selection_sink<T> sink, const std::int32_t* gate) {
  using key_type = key_t<T>;
  const auto sys = exec<System>(stream);
  const thrust::counting_iterator<std::size_t> first(0);
  const cpu::sample_plan plan = cpu::plan_sampling(cfg, n, k);
  if (plan.exact) {  // the plain radix select over the whole input (the CPU's path)
    const auto w = carve_radix<T>(carver, n);
    if (!w) return fail(w.error());
    issue_radix_over_all<T, System>(stream, values, n, k, out, *w, gate);
    run_once<System>(stream, publish_exact<T>{w->state, sink, k});
    return {};
  }
  const int rounds = cfg.max_rounds;
  auto* st = carver.take<sampled_device_state>(1);
  key_type* thresholds = carver.take<key_type>(static_cast<std::size_t>(rounds));
  round_counts* counts = carver.take<round_counts>(round_count_passes(rounds));
  std::uint32_t* positions =
      cfg.sampling == sampling_mode::uniform ? carver.take<std::uint32_t>(plan.max_samples + uniform_slack) : nullptr;
  workspace_carver exact_part = carver;  // the exact top-k of the whole input, or:
  key_type* keys = carver.take<key_type>(std::max(plan.max_samples, plan.candidate_cap));
  std::uint32_t* candidates = carver.take<std::uint32_t>(plan.candidate_cap);
  auto* cstate = carver.take<radix_state<key_type>>(1);
  auto* chist = carver.take<std::uint32_t>(hist_entries);
  auto* cblocks = carver.take<std::uint32_t>(block_count_entries(plan.candidate_cap));
  if (st == nullptr || thresholds == nullptr || counts == nullptr || keys == nullptr || candidates == nullptr ||
      cstate == nullptr || chist == nullptr || cblocks == nullptr ||
      (cfg.sampling == sampling_mode::uniform && positions == nullptr))
    return fail(errc::workspace_too_small);

  // 1. The sample's keys, from the CPU's positions.
  std::size_t s = 0;
  if (cfg.sampling == sampling_mode::strided) {
    const std::size_t offset = cpu::strided_sample_offset(seed, plan.stride);
    s = offset < n ? (n - 1 - offset) / plan.stride + 1 : 0;
    thrust::transform(sys, first, first + static_cast<std::ptrdiff_t>(s), keys,
                      strided_sample_key<T>{values, offset, plan.stride});
  } else {
    s = plan.max_samples;
    const uniform_draw draw{seed, n};
    execution<System>::select_into(stream, thrust::make_transform_iterator(first, draw), s + uniform_slack,
                                   uniform_accepted{draw}, positions, &st->accepted);
    run_once<System>(stream, uniform_fallback{seed, n, s, &st->accepted, positions});
    thrust::transform(sys, positions, positions + s, keys, candidate_key<T>{values});
  }
  if (s == 0) return fail(errc::invalid_argument);  // not reached: the plan samples at least once

  // 2. The thresholds of every round, from the sample's rank-th largest key.
  thrust::sort(sys, keys, keys + s, thrust::greater<key_type>());
  run_once<System>(stream, sampled_start<T>{st, keys + (cpu::sample_rank(s, k, n) - 1), thresholds, rounds,
                                    cfg.threshold_decay, gate});

  // 3. The rounds' counts (one pass per rounds_per_count rounds), and the CPU's decision.
  for (std::size_t p = 0; p < round_count_passes(rounds); ++p) {
    const int from = static_cast<int>(p) * rounds_per_count;
    const round_of_element<T> per_element{values, thresholds, from, std::min(rounds, from + rounds_per_count), st};
    execution<System>::reduce_into(stream, thrust::make_transform_iterator(first, per_element), n, round_counts{},
                                   add_round_counts{}, counts + p);
  }
  run_once<System>(stream, sampled_decide<T>{st, thresholds, counts, rounds, k, plan.candidate_cap, plan.upper,
                                     cfg.lower_bound, cfg.truncation == truncation_mode::index_order, sink});

  // 4. Far more than the candidates' capacity: the exact top-k of the whole input (which reuses
  // the bytes of the candidates; the other paths run after it has published).
  const auto exact = issue_exact_topk<T, System>(stream, values, n, k, out, exact_part, &st->exact_all_gate);
  if (!exact) return fail(exact.error());
  run_once<System>(stream, publish_exact<T>{*exact, sink, k, s, &st->rounds});

  // 5. The candidates at the chosen threshold: their exact top-k, the first k, or all.
  execution<System>::select_into(stream, thrust::make_transform_iterator(first, index_of_position{}), n,
                                 sampled_candidate<T>{values, st}, candidates, &st->compacted);
  thrust::for_each_n(sys, first, plan.candidate_cap, sampled_candidate_keys<T>{values, candidates, keys, st});
  const counted_source<key_type> counted{keys, candidates, &st->count};
  issue_radix_select<T, System>(stream, counted, plan.candidate_cap, k, out, cstate, chist, cblocks,
                                &st->exact_candidates_gate);
  run_once<System>(stream, publish_exact<T>{cstate, sink, k, s, &st->rounds});
  thrust::for_each_n(sys, first, k, sampled_take{candidates, out, st, k});
  run_once<System>(stream, publish_sampled<T>{st, sink, k, s});
  return {};
}

// cpu::sampled_threshold_select over values[0, n) in System's memory: ascending indices into
// `out` (k entries), `workspace` at least sampled_threshold_workspace_bytes<T, System>(cfg, n, k)
// bytes. The host waits for the outcome (one copy).
template <class T, class System>
result<selection_result<T>> sampled_threshold_select(stream_t stream, const T* values, std::size_t n, std::size_t k,
                                                     const sampled_threshold_config& cfg, std::uint64_t seed,
                                                     std::uint32_t* out, std::byte* workspace,
                                                     std::size_t workspace_bytes) {
  workspace_carver carver(span<std::byte>(workspace, workspace_bytes));
  auto* res = carver.take<selection_result<T>>(1);
  auto* status = carver.take<std::int32_t>(1);
  if (res == nullptr || status == nullptr) return fail(errc::workspace_too_small);
  thrust::fill_n(exec<System>(stream), status, 1, std::int32_t(0));
  const auto issued = issue_sampled_threshold<T, System>(stream, values, n, k, cfg, seed, out, carver,
                                                         selection_sink<T>{res, status, nullptr}, nullptr);
  if (!issued) return fail(issued.error());
  const std::int32_t e = read_value<System>(stream, status);
  if (e != 0) return fail(static_cast<errc>(e));
  return read_value<System>(stream, res);
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
