/// @file sampled_threshold.hpp
/// @brief DGC's sampled-threshold selection: estimate the top-k threshold from a sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "../selection_types.hpp"

namespace gradcomp {

/// Checks a `sampled_threshold_config`; returns `errc::invalid_argument` for a field outside its
/// documented range.
inline result<void> validate(const sampled_threshold_config& cfg) noexcept {
  const bool ok = cfg.sample_ratio > 0.0 && cfg.sample_ratio <= 1.0 && cfg.lower_bound > 0.0 &&
                  cfg.lower_bound <= 1.0 && cfg.upper_bound >= 1.0 &&
                  cfg.upper_bound < 1e9 && cfg.threshold_decay > 0.0 &&
                  cfg.threshold_decay < 1.0 && cfg.max_rounds >= 1 &&
                  (cfg.sampling == sampling_mode::strided || cfg.sampling == sampling_mode::uniform) &&
                  (cfg.truncation == truncation_mode::largest ||
                   cfg.truncation == truncation_mode::index_order);
  if (!ok) return fail(errc::invalid_argument);
  return {};
}

/**
 * @brief Workspace bytes `sampled_threshold_select` needs for `n` elements and target `k`.
 * @return the size, or `errc::size_overflow` (more than 2^32 - 1 elements, which no selection
 *         takes), `errc::k_exceeds_n`, `errc::invalid_argument` (a `cfg` that `validate`
 *         refuses).
 */
template <class T, class Backend>
[[nodiscard]] result<std::size_t> sampled_threshold_workspace_bytes(const Backend& backend,
                                                                    const sampled_threshold_config& cfg,
                                                                    std::size_t n, std::size_t k) {
  if (n > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (k > n) return fail(errc::k_exceeds_n);
  if (auto v = validate(cfg); !v) return fail(v.error());
  return detail::ops<Backend>::template sampled_threshold_workspace_bytes<T>(backend, cfg, n, k);
}

/**
 * @brief Selects about `k` elements of largest magnitude by estimating the threshold from a sample
 * (the DGC hot path; docs/algorithms.md).
 *
 * 1. Draw `max(ceil(sample_ratio * n), ceil(2 / density))` samples (density = k / n), strided
 *    from a random offset or uniform, from a generator seeded by `seed` only: workers passing
 *    the same seed draw the same positions. Inputs with `n <= ceil(2 / density)` take the exact
 *    top-k path instead.
 * 2. Threshold = the `ceil(samples * density)`-th largest sampled magnitude.
 * 3. Up to `max_rounds` counting passes: more than `upper_bound * k` pass -> exact top-k among
 *    them (the result is the exact top-k); `k < count <= upper_bound * k` -> keep k of them
 *    (the largest, or the first by index); `lower_bound * k <= count <= k` -> accept; fewer ->
 *    multiply the threshold by `threshold_decay` and count again. The last round accepts what it
 *    has.
 *
 * Never more than `k` indices are written; they are ascending. The same input, `k`, config and
 * seed give the same indices on every run and platform.
 *
 * @param backend     where the call runs; all pointers are in its memory space.
 * @param values      the input, at most 2^32 - 1 elements.
 * @param k           the target count, `k <= n`.
 * @param cfg         sampling and adaptation parameters (see `validate`).
 * @param seed        sampling seed; pass the same value on every worker for the same step.
 * @param out_indices receives the indices; at least `k` elements.
 * @param workspace   at least `sampled_threshold_workspace_bytes<T>(backend, cfg, n, k)` bytes.
 * @return what was achieved (count, threshold, sample size, rounds, whether it was exact), or
 *         `errc::invalid_argument`, `errc::k_exceeds_n`, `errc::output_too_small`,
 *         `errc::workspace_too_small`, `errc::size_overflow`, `errc::nan_input`.
 */
template <class Backend, class T>
[[nodiscard]] result<selection_result<T>> sampled_threshold_select(
    const Backend& backend, backend_span<const T, Backend> values, std::size_t k,
    const sampled_threshold_config& cfg, std::uint64_t seed, backend_span<std::uint32_t, Backend> out_indices,
    backend_span<std::byte, Backend> workspace) {
  static_assert(detail::is_selectable_v<T>, "sampled_threshold_select supports float and double");
  if (auto v = validate(cfg); !v) return fail(v.error());
  if (values.size() > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (k > values.size()) return fail(errc::k_exceeds_n);
  if (out_indices.size() < k) return fail(errc::output_too_small);
  if (workspace.size() < *sampled_threshold_workspace_bytes<T>(backend, cfg, values.size(), k))
    return fail(errc::workspace_too_small);
  return detail::ops<Backend>::sampled_threshold_select(backend, values, k, cfg, seed,
                                                        out_indices, workspace);
}

/// As above, allocating the workspace (use the overload with a workspace on the hot path).
template <class Backend, class T>
[[nodiscard]] result<selection_result<T>> sampled_threshold_select(
    const Backend& backend, backend_span<const T, Backend> values, std::size_t k,
    const sampled_threshold_config& cfg, std::uint64_t seed, backend_span<std::uint32_t, Backend> out_indices) {
  const auto bytes = sampled_threshold_workspace_bytes<T>(backend, cfg, values.size(), k);
  if (!bytes) return fail(bytes.error());
  auto ws = detail::ops<Backend>::template allocate<std::byte>(backend, *bytes);
  return sampled_threshold_select(backend, values, k, cfg, seed, out_indices, ws.view());
}

}  // namespace gradcomp
