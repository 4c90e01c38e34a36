/// @file backend.hpp
/// @brief Backend policies: where memory lives and where work runs.
///
/// A backend is a small type usable both as a template parameter and as a value. Stateful
/// components take it as a template parameter (it fixes where their buffers live); every
/// operation takes a backend value as its first argument (it fixes, for example, the stream of
/// that call). Operations dispatch through `detail::ops<Backend>`, which each backend specialises
/// in its own header (`cpu/...` for the CPU; a CUDA backend specialises it in `.cuh` headers that
/// need nvcc), so adding a backend never changes the public API.
#pragma once

#include <type_traits>

namespace gradcomp {

/**
 * @brief The CPU backend: host memory, work on the calling thread.
 *
 * Every pointer passed with a `cpu_backend` is a host pointer. Calls are synchronous and
 * deterministic; distinct objects may be used from distinct threads concurrently.
 */
struct cpu_backend {};

/// True for types that are gradcomp backend policies. Specialise to `std::true_type` for a new
/// backend.
template <class Backend>
struct is_backend : std::false_type {};

/// `cpu_backend` is a backend.
template <>
struct is_backend<cpu_backend> : std::true_type {};

/// `is_backend<B>::value` as a variable.
template <class Backend>
inline constexpr bool is_backend_v = is_backend<Backend>::value;

namespace detail {

/// Per-backend implementation of every kernel; specialised by each backend's headers. The
/// primary template is intentionally left undefined so that a missing backend header is a
/// compile error naming `ops<Backend>`.
template <class Backend>
struct ops;

}  // namespace detail
}  // namespace gradcomp
