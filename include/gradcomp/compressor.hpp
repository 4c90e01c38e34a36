/// @file compressor.hpp
/// @brief The common compressor interface: what every compressor of gradcomp provides, and
/// `is_compressor` to check a type against it.
///
/// A compressor is the sending side of one worker. With `C` a compressor, `c` a `C`, `T` its
/// value type and `B` its backend:
/// - `C::tensor_view`: `backend_span<const T, B>`, a gradient in the backend's memory;
/// - `c.add_tensor(name, shape, mode)` registers a tensor and returns its id; `c.num_tensors()`,
///   `c.info(id)`;
/// - `c.compress(grads)` (and `c.compress(on, grads)` on another execution context) issues one
///   step, returning `result<void>` for the errors seen at once (`wrong_tensor_count`,
///   `size_mismatch`);
/// - `c.stats()` waits for the step and returns its `step_stats` or why it was refused (nothing
///   modified then);
/// - `c.max_message_bytes(opt)` bounds `c.encode_message(opt, out)`, which writes the step's
///   wire message (refusing a refused step);
/// - `c.message(id)` views one tensor's part of the step in the backend's memory;
/// - `c.receiver()` is the `receiver_layout` an `aggregator` needs to sum the workers' messages.
///
/// What every step guarantees: it reads the gradients and the state the compressor keeps before
/// writing anything, so a step it refuses (`errc::non_finite_input` for a NaN or an infinity in a
/// gradient, `errc::state_overflow` for a value beyond what the value type or the coding holds, or
/// a case of the compressor's own; each compressor's documentation names them) modifies nothing,
/// and the step counter does not advance. Its sums run in a fixed order and its random draws are
/// keyed by the step, so a step gives bitwise the same message on every run, for any thread count
/// and on every conforming backend. A compressor is not thread-safe: one per worker. Messages of
/// the quantisers and AdaComp carry the gradient, not scaled by a learning rate: the receiver
/// averages them and applies its momentum and its learning rate.
///
/// Compressors: `dgc_compressor` (Deep Gradient Compression, top-k with error feedback when
/// momentum correction is off), `ef_signsgd_compressor` (scaled signs with error feedback),
/// `terngrad_compressor`, `onebit_sgd_compressor`, `qsgd_compressor` (quantisers) and
/// `adacomp_compressor` (AdaComp's binned selection with error feedback). Snapshots:
/// `save_snapshot(c)`, `restore_snapshot(c, bytes)` and `snapshot_bytes(c)`, found by
/// argument-dependent lookup, for every compressor on every backend (each compressor's
/// snapshot.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "error.hpp"
#include "layout.hpp"
#include "span.hpp"
#include "wire/encode.hpp"

namespace gradcomp {

namespace detail {
template <class C, class = void>
struct compressor_members : std::false_type {};
template <class C>
struct compressor_members<
    C, std::void_t<typename C::tensor_view,
                   decltype(std::declval<C&>().add_tensor(std::string(), std::vector<std::size_t>(), tensor_mode::automatic)),
                   decltype(std::declval<const C&>().num_tensors()), decltype(std::declval<const C&>().info(0)),
                   decltype(std::declval<C&>().compress(std::declval<const std::vector<typename C::tensor_view>&>())),
                   decltype(std::declval<C&>().stats()),
                   decltype(std::declval<const C&>().max_message_bytes(wire::encode_options())),
                   decltype(std::declval<C&>().encode_message(wire::encode_options(), span<std::byte>())),
                   decltype(std::declval<C&>().message(0)), decltype(std::declval<const C&>().receiver())>>
    : std::bool_constant<std::is_same<decltype(std::declval<C&>().stats()), result<step_stats>>::value &&
                         std::is_same<decltype(std::declval<const C&>().receiver()), receiver_layout>::value> {};
}  // namespace detail

/// True when `C` provides the common compressor interface (see this header).
template <class C>
struct is_compressor : detail::compressor_members<C> {};

/// `is_compressor<C>::value` as a variable.
template <class C>
inline constexpr bool is_compressor_v = is_compressor<C>::value;

}  // namespace gradcomp
