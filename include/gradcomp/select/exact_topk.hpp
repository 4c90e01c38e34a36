/// @file exact_topk.hpp
/// @brief Exact top-k selection by magnitude.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../span.hpp"

namespace gradcomp {

/**
 * @brief Workspace bytes `exact_topk` needs for `n` elements and `k` results on `backend` (on the
 * CPU, room for a sample and the candidates of large inputs; 0 for small ones).
 * @return the size, or `errc::size_overflow` (more than 2^32 - 1 elements, which no selection
 *         takes), `errc::k_exceeds_n`.
 */
template <class T, class Backend>
[[nodiscard]] result<std::size_t> exact_topk_workspace_bytes(const Backend& backend, std::size_t n,
                                                             std::size_t k) {
  if (n > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (k > n) return fail(errc::k_exceeds_n);
  return detail::ops<Backend>::template exact_topk_workspace_bytes<T>(backend, n, k);
}

/**
 * @brief Writes the indices of the `k` elements of largest magnitude `|v|`, in ascending order.
 *
 * Exactly `k` indices are written. Among equal magnitudes the lower index wins, so the result is
 * unique and deterministic. The algorithm is a radix select on the bit pattern of `|v|`
 * (one counting pass per 11-bit digit, then one output pass): O(n) with no comparison sort.
 * Infinities are ordinary (largest) magnitudes; `-0.0` and `+0.0` are equal.
 *
 * @param backend   where the call runs; `values`, `out_indices` and `workspace` are in its memory.
 * @param values    the input, at most 2^32 - 1 elements.
 * @param k         number of indices wanted, `k <= values.size()`.
 * @param out_indices receives the indices; at least `k` elements.
 * @param workspace at least `exact_topk_workspace_bytes<T>(backend, n, k)` bytes.
 * @return `k`, or `errc::k_exceeds_n`, `errc::output_too_small`, `errc::workspace_too_small`,
 *         `errc::size_overflow` (more than 2^32 - 1 elements), `errc::nan_input` (the input holds
 *         a NaN; `out_indices` is then unspecified).
 */
template <class Backend, class T>
[[nodiscard]] result<std::size_t> exact_topk(const Backend& backend, backend_span<const T, Backend> values,
                                             std::size_t k, backend_span<std::uint32_t, Backend> out_indices,
                                             backend_span<std::byte, Backend> workspace) {
  static_assert(detail::is_selectable_v<T>, "exact_topk supports float and double");
  if (values.size() > std::numeric_limits<std::uint32_t>::max()) return fail(errc::size_overflow);
  if (k > values.size()) return fail(errc::k_exceeds_n);
  if (out_indices.size() < k) return fail(errc::output_too_small);
  if (workspace.size() < *exact_topk_workspace_bytes<T>(backend, values.size(), k))
    return fail(errc::workspace_too_small);
  T threshold{};
  return detail::ops<Backend>::exact_topk(backend, values, k, out_indices, workspace, &threshold);
}

/// As above, allocating on every call the workspace that `exact_topk_workspace_bytes` reports
/// (on the CPU, the sample and candidates of inputs of 2^15 elements or more; none for smaller
/// ones). Steps that run every iteration should reserve the workspace once and use the overload
/// above.
template <class Backend, class T>
[[nodiscard]] result<std::size_t> exact_topk(const Backend& backend, backend_span<const T, Backend> values,
                                             std::size_t k, backend_span<std::uint32_t, Backend> out_indices) {
  const auto bytes = exact_topk_workspace_bytes<T>(backend, values.size(), k);
  if (!bytes) return fail(bytes.error());
  auto ws = detail::ops<Backend>::template allocate<std::byte>(backend, *bytes);
  return exact_topk(backend, values, k, out_indices, ws.view());
}

/// Convenience on the CPU: returns the ascending indices of the `k` largest `|v|`; throws
/// `gradcomp::error` on any error listed above.
template <class T>
std::vector<std::uint32_t> exact_topk(const std::vector<T>& values, std::size_t k) {
  std::vector<std::uint32_t> out(k);
  const auto r = exact_topk(cpu_backend{}, span<const T>(values.data(), values.size()), k,
                            span<std::uint32_t>(out.data(), out.size()));
  r.value();
  return out;
}

}  // namespace gradcomp
