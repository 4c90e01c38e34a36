/// @file threshold.hpp
/// @brief Threshold selection: keep every element with `|v| >= t`.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../span.hpp"

namespace gradcomp {

/**
 * @brief Writes, in ascending order, the index of every element with `|v| >= threshold`.
 *
 * This is the compaction step that both the sampled-threshold selector and DGC use. It reads the
 * input once.
 *
 * @param backend     where the call runs; all pointers are in its memory space.
 * @param values      the input, at most 2^32 - 1 elements.
 * @param threshold   a magnitude, `>= 0` and not NaN (`+inf` keeps only infinities).
 * @param out_indices receives the indices.
 * @param total       if not null, receives the number of passing elements even when they do not
 *                    all fit.
 * @return the number written, or `errc::output_too_small` (more pass than `out_indices` holds;
 *         the first `out_indices.size()` are written and `*total` tells how many passed),
 *         `errc::invalid_argument` (negative or NaN threshold), `errc::nan_input` (the input holds
 *         a NaN), `errc::size_overflow`.
 */
template <class Backend, class T>
[[nodiscard]] result<std::size_t> threshold_select(const Backend& backend, backend_span<const T, Backend> values,
                                                   T threshold, backend_span<std::uint32_t, Backend> out_indices,
                                                   std::size_t* total = nullptr) {
  static_assert(detail::is_selectable_v<T>, "threshold_select supports float and double");
  if (values.size() > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (std::isnan(threshold) || threshold < T(0)) return fail(errc::invalid_argument);
  std::size_t count = 0;
  auto r = detail::ops<Backend>::threshold_select(backend, values, detail::magnitude_key(threshold),
                                                  out_indices, &count);
  if (total != nullptr) *total = count;
  return r;
}

}  // namespace gradcomp
