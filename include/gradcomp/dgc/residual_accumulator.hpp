/// @file residual_accumulator.hpp
/// @brief Error feedback: the residual accumulator keeps every unsent value (docs/algorithms.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../span.hpp"

namespace gradcomp {

/**
 * @brief Moves the selected entries of the accumulator `v` into `values`: `values[j] = v[i_j]`,
 * then `v[i_j] = 0`.
 *
 * Conservation is exact (bitwise): `v_after + scatter(indices, values) == v_before`, because the
 * sent value is the accumulator's own value and its slot becomes exactly zero. Indices must be
 * distinct (selection output always is).
 *
 * @param backend where the call runs; all spans are in its memory space.
 * @param v       the residual accumulator.
 * @param indices positions to send.
 * @param values  receives the sent values; same length as `indices`.
 * @return `errc::size_mismatch` or `errc::index_out_of_range`; nothing is modified on error.
 */
template <class Backend, class T>
[[nodiscard]] result<void> extract_residual(const Backend& backend, backend_span<T, Backend> v,
                                            backend_span<const std::uint32_t, Backend> indices,
                                            backend_span<T, Backend> values) {
  if (values.size() != indices.size()) return fail(errc::size_mismatch);
  if (!detail::ops<Backend>::all_below(backend, indices, v.size()))
    return fail(errc::index_out_of_range);
  detail::ops<Backend>::gather_and_zero(backend, v, indices, values);
  return {};
}

/**
 * @brief Adds a sparse message into a dense buffer: `acc[i_j] += values[j]`. Duplicate indices
 * (from several workers) are summed. This is the receiving side of a sparse exchange.
 * @return `errc::size_mismatch` or `errc::index_out_of_range`; nothing is modified on error.
 */
template <class Backend, class T>
[[nodiscard]] result<void> scatter_add(const Backend& backend, backend_span<const std::uint32_t, Backend> indices,
                                       backend_span<const T, Backend> values, backend_span<T, Backend> acc) {
  if (values.size() != indices.size()) return fail(errc::size_mismatch);
  if (!detail::ops<Backend>::all_below(backend, indices, acc.size()))
    return fail(errc::index_out_of_range);
  detail::ops<Backend>::scatter_add(backend, indices, values, acc);
  return {};
}

}  // namespace gradcomp
