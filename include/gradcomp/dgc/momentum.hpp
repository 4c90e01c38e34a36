/// @file momentum.hpp
/// @brief Momentum correction and momentum factor masking (docs/algorithms.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "../momentum_kind.hpp"

namespace gradcomp {

/**
 * @brief Adds `scale * g`, momentum-corrected, to the residual accumulator `v`.
 *
 * `kind` selects `V += s*g` (none), `U = m*U + s*g; V += U` (vanilla) or
 * `U = m*(U + s*g); V += U + s*g` (nesterov). A `scale` of exactly 1 changes nothing bitwise.
 *
 * @param backend where the call runs; all spans are in its memory space.
 * @param kind    the momentum form.
 * @param momentum the momentum `m` (ignored for `none`).
 * @param scale   gradient scale, e.g. a clipping coefficient.
 * @param g       the local gradient.
 * @param u       the momentum buffer, same length as `g` (may be empty for `none`).
 * @param v       the residual accumulator, same length as `g`.
 * @return `errc::size_mismatch` if the lengths differ.
 */
template <class Backend, class T>
[[nodiscard]] result<void> momentum_correction(const Backend& backend, momentum_kind kind,
                                               T momentum, T scale, backend_span<const T, Backend> g,
                                               backend_span<T, Backend> u, backend_span<T, Backend> v) {
  if (v.size() != g.size() || (kind != momentum_kind::none && u.size() != g.size()))
    return fail(errc::size_mismatch);
  detail::ops<Backend>::momentum_accumulate(backend, kind, momentum, scale, g, u, v);
  return {};
}

/**
 * @brief Momentum factor masking: zeroes `u` at the positions that were just sent, so stale
 * momentum does not keep pushing an applied coordinate.
 * @return `errc::index_out_of_range` if an index is `>= u.size()` (nothing is modified then).
 */
template <class Backend, class T>
[[nodiscard]] result<void> mask_momentum(const Backend& backend, backend_span<T, Backend> u,
                                         backend_span<const std::uint32_t, Backend> indices) {
  if (!detail::ops<Backend>::all_below(backend, indices, u.size()))
    return fail(errc::index_out_of_range);
  detail::ops<Backend>::zero_at(backend, u, indices);
  return {};
}

/**
 * @brief Receiver-side momentum on an averaged gradient `a`, in place: vanilla `U = m*U + a;
 * a = U`, nesterov `U = m*(U + a); a = U + a`, none leaves `a` unchanged. This is what tensors
 * sent dense (and all tensors when the sender does no momentum correction) get.
 * @return `errc::size_mismatch` if the lengths differ.
 */
template <class Backend, class T>
[[nodiscard]] result<void> apply_momentum(const Backend& backend, momentum_kind kind, T momentum,
                                          backend_span<T, Backend> u, backend_span<T, Backend> a) {
  if (kind == momentum_kind::none) return {};
  if (u.size() != a.size()) return fail(errc::size_mismatch);
  detail::ops<Backend>::momentum_apply(backend, kind, momentum, u, a);
  return {};
}

}  // namespace gradcomp
