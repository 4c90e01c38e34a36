/// @file backend_memory.hpp
/// @brief Buffers in a backend's memory, and the copies between that memory and the host.
///
/// A trainer whose tensors already live in a backend's memory (a GPU trainer's device buffers)
/// hands views of them to gradcomp directly (`backend_span<const float, B>(ptr, n)`). These
/// functions serve the rest: owning buffers in the backend's memory, and moving host data in and
/// out of it, in order with the operations issued on the backend value (docs/backends.md).
#pragma once

#include <cstddef>

#include "backend.hpp"
#include "error.hpp"
#include "span.hpp"

namespace gradcomp {

/// Owning storage of `T` (trivially copyable) in `Backend`'s memory: `view()` (a `backend_span`),
/// `size()`, `empty()`; copies are deep, moves take the storage.
template <class T, class Backend>
using backend_buffer = typename detail::ops<Backend>::template buffer<T>;

/// A buffer of `n` elements of `T` in `backend`'s memory, every byte zero. May wait for the
/// backend; allocate at set-up, not in a step.
template <class T, class Backend>
[[nodiscard]] backend_buffer<T, Backend> allocate_buffer(const Backend& backend, std::size_t n) {
  return detail::ops<Backend>::template allocate<T>(backend, n);
}

/// Copies host memory `from` into backend memory `to`, issued in order on `backend`. `from` is
/// read before the call returns, so the host may reuse it at once.
/// @return `errc::size_mismatch` when the lengths differ (nothing is copied then).
template <class T, class Backend>
[[nodiscard]] result<void> copy_to_backend(const Backend& backend, span<const T> from,
                                           backend_span<T, Backend> to) {
  if (from.size() != to.size()) return fail(errc::size_mismatch);
  detail::ops<Backend>::copy_to_backend(backend, from, to);
  return {};
}

/// Copies backend memory `from` into host memory `to`, issued in order on `backend`; the host
/// may read `to` once `synchronize(backend)` has returned.
/// @return `errc::size_mismatch` when the lengths differ (nothing is copied then).
template <class T, class Backend>
[[nodiscard]] result<void> copy_to_host(const Backend& backend, backend_span<const T, Backend> from,
                                        span<T> to) {
  if (from.size() != to.size()) return fail(errc::size_mismatch);
  detail::ops<Backend>::copy_to_host(backend, from, to);
  return {};
}

/// Waits until everything issued on `backend` has finished.
template <class Backend>
void synchronize(const Backend& backend) {
  detail::ops<Backend>::synchronize(backend);
}

}  // namespace gradcomp
