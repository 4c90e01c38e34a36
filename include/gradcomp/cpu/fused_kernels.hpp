// The fused DGC step on the CPU: momentum correction, accumulation and the first counting round
// of the sampled-threshold selection in one pass over the data. The threshold comes from a sample
// of the accumulator as it will be after this step's update (computed from the old state at the
// sampled positions only), so the selection is the same as updating first and selecting after,
// with one pass fewer over the accumulator.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../detail/magnitude.hpp"
#include "../dgc/momentum_kind.hpp"
#include "../error.hpp"
#include "../select/selection_types.hpp"
#include "../span.hpp"
#include "dgc_kernels.hpp"
#include "select_kernels.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// One element of momentum_accumulate (the same arithmetic, so the same bits): updates u and v in
// place and returns the new v. For momentum_kind::none, u is not touched.
template <momentum_kind K, class T>
inline T accumulate_one(T m, T c, T g, T& u, T& v) {
  if constexpr (K == momentum_kind::none) {
    (void)m;
    (void)u;
    v += c * g;
  } else if constexpr (K == momentum_kind::vanilla) {
    u = m * u + c * g;
    v += u;
  } else {
    const T cg = c * g;
    u = m * (u + cg);
    v = v + u + cg;
  }
  return v;
}

// The accumulator value at i after the update, from the old state, without writing anything.
template <momentum_kind K, class T>
inline T accumulated_at(T m, T c, const T* g, const T* u, const T* v, std::size_t i) {
  T uu = K == momentum_kind::none ? T(0) : u[i];
  T vv = v[i];
  return accumulate_one<K>(m, c, g[i], uu, vv);
}

// Updates u and v over [0, n) and collects (index, key) of every updated v whose key is >= cut,
// counting past `cap` without storing (and without looking further once past it). Works in
// chunks that stay in the L1 cache between the update and the filter.
template <momentum_kind K, class T>
std::size_t accumulate_filter(T m, T c, const T* g, T* u, T* v, std::size_t n, key_t<T> cut,
                              std::uint32_t* idx, key_t<T>* keys, std::size_t cap) {
  constexpr std::size_t chunk = 1024;
  std::size_t count = 0;
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t len = std::min(chunk, n - first);
    momentum_accumulate(K, m, c, span<const T>(g + first, len),
                        K == momentum_kind::none ? span<T>() : span<T>(u + first, len),
                        span<T>(v + first, len));
    if (count <= cap) count = filter_at_least(v, first, first + len, cut, idx, keys, count, cap);
  }
  return count;
}

template <momentum_kind K, class T>
result<selection_result<T>> accumulate_and_select_as(T m, T c, span<const T> g, span<T> u,
                                                     span<T> v, std::size_t k,
                                                     const sampled_threshold_config& cfg,
                                                     std::uint64_t seed, span<std::uint32_t> out,
                                                     span<std::byte> workspace) {
  const std::size_t n = v.size();
  sampled_state<T> st;
  st.plan = plan_sampling(cfg, n, k);
  if (st.plan.exact) {
    momentum_accumulate(K, m, c, g, u, v);
    return sampled_threshold_select<T>(span<const T>(v.data(), n), k, cfg, seed, out, workspace);
  }
  const T* gp = g.data();
  T* up = u.data();
  T* vp = v.data();
  if (auto r = sampled_threshold_prepare<T>(
          n, k, cfg, seed, workspace,
          [=](std::size_t i) { return magnitude_key(accumulated_at<K>(m, c, gp, up, vp, i)); }, st);
      !r)
    return fail(r.error());
  const std::size_t count =
      accumulate_filter<K>(m, c, gp, up, vp, n, st.threshold_key, st.candidates, st.samples,
                           st.plan.candidate_cap);
  return sampled_threshold_finish<T>(span<const T>(vp, n), k, cfg, st, count, out, workspace);
}

// momentum_accumulate followed by sampled_threshold_select on v, in one pass over the data for
// the common case. Fails with workspace_too_small before modifying anything; nan_input means the
// accumulator holds a NaN (its state is then updated).
template <class T>
result<selection_result<T>> accumulate_and_select(momentum_kind kind, T m, T c, span<const T> g,
                                                  span<T> u, span<T> v, std::size_t k,
                                                  const sampled_threshold_config& cfg,
                                                  std::uint64_t seed, span<std::uint32_t> out,
                                                  span<std::byte> workspace) {
  switch (kind) {
    case momentum_kind::none:
      return accumulate_and_select_as<momentum_kind::none>(m, c, g, u, v, k, cfg, seed, out, workspace);
    case momentum_kind::vanilla:
      return accumulate_and_select_as<momentum_kind::vanilla>(m, c, g, u, v, k, cfg, seed, out, workspace);
    case momentum_kind::nesterov:
      break;
  }
  return accumulate_and_select_as<momentum_kind::nesterov>(m, c, g, u, v, k, cfg, seed, out, workspace);
}

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
