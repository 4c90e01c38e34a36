// The fused DGC step on the CPU: momentum correction, accumulation, the first counting round of
// the sampled-threshold selection and the extraction of the selected entries in one pass over
// the data, with the same result as doing them one after the other. Two ways to get the
// threshold without an extra pass:
// - unguided (first step): from a sample of the accumulator as it will be after the update,
//   computed from the old state at the sampled positions only;
// - guided (later steps): the pass keeps every element above a cut derived from the previous
//   steps' thresholds (for tensors larger than the caches at low density it also moves them
//   out of the accumulator while they are in the L1 cache) and records the sampled keys as it
//   goes; the threshold they give selects from those elements, with a filter pass over the
//   accumulator only when the cut was too high or let more through than the workspace holds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../detail/magnitude.hpp"
#include "step_guide.hpp"
#include "../detail/dgc_arithmetic.hpp"
#include "../momentum_kind.hpp"
#include "../error.hpp"
#include "../selection_types.hpp"
#include "../span.hpp"
#include "dgc_kernels.hpp"
#include "../detail/simd.hpp"
#include "select_kernels.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// The accumulator value at i after the update, from the old state, without writing anything.
template <momentum_kind K, class T>
inline T accumulated_at(T m, T c, const T* g, const T* u, const T* v, std::size_t i) {
  T uu = K == momentum_kind::none ? T(0) : u[i];
  T vv = v[i];
  return accumulate_one<K>(m, c, g[i], uu, vv);
}

// The largest magnitudes one momentum_accumulate step would leave in u and v (before anything
// is selected out of v), with the arithmetic of accumulate_one, writing nothing. `finite` is
// false when some element would overflow to an infinity (or be NaN).
template <momentum_kind K, class T>
state_magnitudes accumulated_magnitudes_as(T m, T c, span<const T> g, span<const T> u, span<const T> v) {
  key_t<T> ku = 0, kv = 0;
  const T* gp = g.data();
  const T* up = u.data();
  const T* vp = v.data();
  for (std::size_t i = 0; i < g.size(); ++i) {
    T uu = K == momentum_kind::none ? T(0) : up[i];
    T vv = vp[i];
    accumulate_one<K>(m, c, gp[i], uu, vv);
    ku = std::max(ku, magnitude_key(uu));
    kv = std::max(kv, magnitude_key(vv));
  }
  return magnitudes_of_keys<T>(ku, kv);
}

template <class T>
state_magnitudes accumulated_magnitudes(momentum_kind kind, T m, T c, span<const T> g, span<const T> u,
                                        span<const T> v) {
  switch (kind) {
    case momentum_kind::none: return accumulated_magnitudes_as<momentum_kind::none>(m, c, g, u, v);
    case momentum_kind::vanilla: return accumulated_magnitudes_as<momentum_kind::vanilla>(m, c, g, u, v);
    case momentum_kind::nesterov: break;
  }
  return accumulated_magnitudes_as<momentum_kind::nesterov>(m, c, g, u, v);
}

// Updates u and v over [first, last) and appends (index, key) of every updated v whose key is
// >= cut after the `count` entries already stored, counting past `cap` without storing (and
// without looking further once past it). Returns the new count; entries past it (below cap) may
// be overwritten. After each block, on_block(v, end, count) runs while the block's elements are
// still in the L1 cache (to record samples, to move candidates out).
template <momentum_kind K, class T, class OnBlock>
std::size_t accumulate_filter(T m, T c, const T* g, T* u, T* v, std::size_t first, std::size_t last,
                              key_t<T> cut, std::uint32_t* idx, key_t<T>* keys, std::size_t count,
                              std::size_t cap, OnBlock&& on_block) {
#if GRADCOMP_HAVE_AVX2_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx2()) {
      // Vectors of 8 update and test in registers; the tail element by element.
      const std::size_t last8 = first + ((last - first) & ~std::size_t(7));
      count = accumulate_filter_avx2<K>(m, c, g, u, v, first, last8, cut, idx, keys, count, cap, on_block);
      if (last8 == last) return count;
      for (std::size_t i = last8; i < last; ++i) {
        T dummy = T(0);
        const key_t<T> key =
            magnitude_key(accumulate_one<K>(m, c, g[i], K == momentum_kind::none ? dummy : u[i], v[i]));
        if (count <= cap && key >= cut) {
          if (count < cap) {
            idx[count] = static_cast<std::uint32_t>(i);
            keys[count] = key;
          }
          ++count;
        }
      }
      on_block(v, last, count);
      return count;
    }
  }
#endif
  // Blocks that stay in the L1 cache between the update and the filter.
  for (std::size_t lo = first; lo < last; lo += fused_block) {
    const std::size_t len = std::min(fused_block, last - lo);
    momentum_accumulate(K, m, c, span<const T>(g + lo, len),
                        K == momentum_kind::none ? span<T>() : span<T>(u + lo, len),
                        span<T>(v + lo, len));
    if (count <= cap) count = filter_at_least(v, lo, lo + len, cut, idx, keys, count, cap);
    on_block(v, lo + len, count);
  }
  return count;
}

// When a guided step moves its candidates out of the accumulator during the pass (and only the
// mispredicted ones afterwards) instead of moving the selection out after it. Moving in the
// pass costs a little for every candidate; moving afterwards costs a scattered access per
// selected entry, which misses the caches once the accumulator and the momentum outgrow them,
// and costs less per entry the denser the entries lie. In side-by-side timings on the
// development machine (32 MiB of L3) the pass won at 0.1% density from 16 MiB of accumulator and
// momentum on, and lost at 1% density at every size.
enum class candidate_move { by_size_and_density, always, never };
inline constexpr std::size_t move_in_pass_from_bytes = std::size_t(16) << 20;
inline constexpr std::size_t move_in_pass_up_to_density_inverse = 256;  // k <= n / 256: 0.4%

template <class T>
bool moves_in_pass(candidate_move policy, std::size_t n, std::size_t k) noexcept {
  if (policy != candidate_move::by_size_and_density) return policy == candidate_move::always;
  return 2 * n * sizeof(T) >= move_in_pass_from_bytes && k <= n / move_in_pass_up_to_density_inverse;
}

// Workspace of accumulate_and_select: the sampled selection's, plus the candidate pool of a
// guided step.
template <class T>
std::size_t accumulate_and_select_workspace_bytes(const sampled_threshold_config& cfg,
                                                  std::size_t n, std::size_t k) {
  const sample_plan p = plan_sampling(cfg, n, k);
  if (p.exact) return 0;
  return sampled_threshold_workspace_bytes<T>(cfg, n, k) +
         workspace_slot_bytes<key_t<T>>(p.candidate_cap) +
         workspace_slot_bytes<std::uint32_t>(p.candidate_cap) +
         2 * workspace_slot_bytes<T>(p.candidate_cap);  // recorded values and momentum
}

template <momentum_kind K, class T>
result<selection_result<T>> accumulate_and_select_as(T m, T c, span<const T> g, span<T> u,
                                                     span<T> v, std::size_t k,
                                                     const sampled_threshold_config& cfg,
                                                     std::uint64_t seed, span<std::uint32_t> out,
                                                     span<T> values, bool masking,
                                                     span<std::byte> workspace, step_guide<T>* guide,
                                                     candidate_move move_policy) {
  using key_type = key_t<T>;
  const std::size_t n = v.size();
  sampled_state<T> st;
  st.plan = plan_sampling(cfg, n, k);
  const T* gp = g.data();
  T* up = u.data();
  T* vp = v.data();
  const span<T> masked = masking && K != momentum_kind::none ? u : span<T>();
  const key_type guide_key = magnitude_key(guide->sample);
  const T predicted = guide->predicted_kept();
  const T cut_base = guide->predicted_sample_floor();
  guide->sample_before = guide->sample;
  guide->sample = T(0);
  guide->kept_before = guide->kept;
  guide->kept = T(0);
  // Records the kept threshold for the next step.
  auto done = [guide](result<selection_result<T>> r) {
    if (r) guide->kept = r->threshold;
    return r;
  };
  // Moves the selection out of the accumulator (and masks the momentum there).
  auto extract = [&](result<selection_result<T>> r) {
    if (r)
      gather_and_zero(v, span<const std::uint32_t>(out.data(), r->count), span<T>(values.data(), r->count),
                      masked);
    return done(r);
  };
  if (st.plan.exact) {
    momentum_accumulate(K, m, c, g, u, v);
    return extract(sampled_threshold_select<T>(span<const T>(vp, n), k, cfg, seed, out, workspace));
  }

  if (guide_key != 0 && is_finite_key<T>(guide_key) && cfg.sampling == sampling_mode::strided) {
    // Guided step: the update pass keeps every element above a cut a little below the
    // threshold the previous steps predict (step_guide::predicted_sample_floor, ::margin) and
    // records the strided sample's keys, so the threshold is known exactly after the pass. When
    // it is at or above the cut and the pool did not overflow, every element the selection can
    // take is in the pool: the same result as update-then-select without reading the data
    // again. Otherwise one filter pass over the accumulator follows.
    // For tensors larger than the caches at low density (moves_in_pass), the pass also moves
    // the candidates at or above the predicted kept threshold out of the accumulator (and masks
    // the momentum) block by block while they are in the L1 cache; afterwards only the
    // mispredicted ones are written, where moving the whole selection out after the pass would
    // be scattered writes that each miss the caches.
    workspace_carver carver(workspace);
    const std::size_t cap = st.plan.candidate_cap;
    st.samples = carver.take<key_type>(std::max(st.plan.max_samples, cap));
    st.candidates = carver.take<std::uint32_t>(cap);
    key_type* pool_keys = carver.take<key_type>(cap);
    std::uint32_t* pool_idx = carver.take<std::uint32_t>(cap);
    T* pool_values = carver.take<T>(cap);
    T* pool_momentum = carver.take<T>(cap);
    if (st.samples == nullptr || st.candidates == nullptr || pool_keys == nullptr || pool_idx == nullptr ||
        pool_values == nullptr || pool_momentum == nullptr)
      return fail(errc::workspace_too_small);
    candidate_pool<T> pool;
    pool.idx = pool_idx;
    pool.keys = pool_keys;
    const T cut_fraction = static_cast<T>(1.0 - guide->cut_margin());
    pool.cut = std::max<key_type>(1, magnitude_key(static_cast<T>(cut_base * cut_fraction)));
    pool.data = vp;
    pool.momentum = masked.data();
    pool.values = pool_values;
    pool.momentum_values = pool_momentum;
    // Entries at or above the predicted kept threshold are moved out during the pass; the
    // selection then only touches the data where the prediction was wrong.
    pool.move_cut = std::max(pool.cut, magnitude_key(predicted));
    strided_sampler<T> sampler;
    sampler.next = strided_sample_offset(seed, st.plan.stride);
    sampler.stride = st.plan.stride;
    sampler.out = st.samples;
    const bool move = moves_in_pass<T>(move_policy, n, k);
    pool.count = accumulate_filter<K>(m, c, gp, up, vp, 0, n, pool.cut, pool_idx, pool_keys, 0, cap,
                                      [&](T* data, std::size_t end, std::size_t count) {
                                        sampler.take(data, end);  // before the move zeroes
                                        if (move) pool.move_out(std::min(count, cap));
                                      });
    const std::size_t s = sampler.count;
    // The threshold: the top-th largest sampled key. When at least `top` keys are >= cut, it is
    // among them, and only those need ordering.
    const std::size_t top = sample_rank(s, k, n);
    key_type* const cut_end =
        std::partition(st.samples, st.samples + s, [&](key_type key) { return key >= pool.cut; });
    key_type* const end = static_cast<std::size_t>(cut_end - st.samples) >= top ? cut_end : st.samples + s;
    std::nth_element(st.samples, st.samples + (top - 1), end, std::greater<key_type>());
    st.threshold_key = st.samples[top - 1];
    st.sample_count = s;
    guide->sample = value_of_key<T>(st.threshold_key);
    if (pool.count > cap)
      guide->cut_too_low();
    else if (!pool.covers(st.threshold_key))
      guide->cut_too_high();
    else
      guide->cut_sufficed();
    if (pool.count <= cap && pool.covers(st.threshold_key)) {
      const std::size_t count = pool.filter(st.threshold_key, st.candidates, st.samples);
      auto r = sampled_threshold_finish<T>(span<const T>(vp, n), k, cfg, st, count, out, workspace, &pool);
      if (!r) {
        pool.put_back();
        return r;
      }
      if (!pool.slots) return extract(r);  // put back to read the accumulator: indices
      if (pool.moved == 0) {
        pool.to_indices(out.data(), r->count);
        return extract(r);
      }
      pool.settle(out.data(), r->count, values.data());
      return done(r);
    }
    pool.put_back();
    const std::size_t count =
        filter_at_least(static_cast<const T*>(vp), 0, n, st.threshold_key, st.candidates, st.samples, 0, cap);
    return extract(sampled_threshold_finish<T>(span<const T>(vp, n), k, cfg, st, count, out, workspace));
  }

  // Unguided step: the threshold comes from a sample of the accumulator as it will be after the
  // update (computed from the old state at the sampled positions only), then one pass updates
  // and filters.
  if (auto r = sampled_threshold_prepare<T>(
          n, k, cfg, seed, workspace,
          [=](std::size_t i) { return magnitude_key(accumulated_at<K>(m, c, gp, up, vp, i)); }, st);
      !r)
    return fail(r.error());
  guide->sample = value_of_key<T>(st.threshold_key);
  const std::size_t count =
      accumulate_filter<K>(m, c, gp, up, vp, 0, n, st.threshold_key, st.candidates, st.samples, 0,
                           st.plan.candidate_cap, [](T*, std::size_t, std::size_t) {});
  return extract(sampled_threshold_finish<T>(span<const T>(vp, n), k, cfg, st, count, out, workspace));
}

// One DGC step of a tensor on the CPU: momentum_accumulate, sampled_threshold_select on v, then
// the selected entries moved out of v into `values` (v zeroed there) and, with `masking`, u
// zeroed there too: the same result as those steps one after the other, in one pass over the
// data for the common case. `*guide` carries what the tensor's earlier steps tell this one
// (value-initialised: nothing) and is updated; it decides only how much data is read and where
// it is written, never the result. `move_policy` says whether a guided pass moves candidates
// out (by default by the tensor's size and density; tests force either way). `out` and
// `values` hold k entries.
// Fails with workspace_too_small before modifying anything; nan_input means the accumulator
// holds a NaN (its state is then updated, nothing moved out).
template <class T>
result<selection_result<T>> accumulate_and_select(momentum_kind kind, T m, T c, span<const T> g,
                                                  span<T> u, span<T> v, std::size_t k,
                                                  const sampled_threshold_config& cfg,
                                                  std::uint64_t seed, span<std::uint32_t> out,
                                                  span<T> values, bool masking,
                                                  span<std::byte> workspace, step_guide<T>* guide,
                                                  candidate_move move_policy = candidate_move::by_size_and_density) {
  switch (kind) {
    case momentum_kind::none:
      return accumulate_and_select_as<momentum_kind::none>(m, c, g, u, v, k, cfg, seed, out, values,
                                                           masking, workspace, guide, move_policy);
    case momentum_kind::vanilla:
      return accumulate_and_select_as<momentum_kind::vanilla>(m, c, g, u, v, k, cfg, seed, out, values,
                                                              masking, workspace, guide, move_policy);
    case momentum_kind::nesterov:
      break;
  }
  return accumulate_and_select_as<momentum_kind::nesterov>(m, c, g, u, v, k, cfg, seed, out, values,
                                                           masking, workspace, guide, move_policy);
}

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
