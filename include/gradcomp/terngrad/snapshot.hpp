/// @file snapshot.hpp
/// @brief Save and restore the state of a `terngrad_compressor` (its step counter and seed, the
/// whole of its random state) through the wire format, on any backend.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `ternary`, the step counter and the seed; TernGrad keeps no error, so the
/// state section is the whole snapshot, and it does not depend on the tensors. Restoring it into a
/// compressor with the same rank continues bit for bit: every later draw is keyed by (seed, rank,
/// step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../backend.hpp"
#include "../detail/residual_snapshot.hpp"
#include "../error.hpp"
#include "../snapshot.hpp"
#include "../span.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

using terngrad_snapshot_access = residual_snapshot_access<wire::snapshot_selection::ternary, true>;

}  // namespace detail

/// Exact size of `save_snapshot`'s output for this compressor.
template <class T, class B>
std::size_t snapshot_bytes(const terngrad_compressor<T, B>& c, bool checksum = true) {
  return detail::compressor_snapshot<detail::terngrad_snapshot_access>::bytes(c, checksum);
}

/**
 * @brief Writes the compressor's state (step counter, seed) as a snapshot message into `out`,
 * with a CRC-32C unless `checksum` is false. Waits for the step in progress.
 * @return bytes written, or `errc::output_too_small` (see `snapshot_bytes`).
 */
template <class T, class B>
[[nodiscard]] result<std::size_t> save_snapshot(const terngrad_compressor<T, B>& c, span<std::byte> out,
                                                bool checksum = true) {
  return detail::compressor_snapshot<detail::terngrad_snapshot_access>::save<T>(c, out, checksum);
}

/// Convenience: the snapshot in a new vector; throws `gradcomp::error`.
template <class T, class B>
std::vector<std::byte> save_snapshot(const terngrad_compressor<T, B>& c, bool checksum = true) {
  return detail::compressor_snapshot<detail::terngrad_snapshot_access>::save<T>(c, checksum);
}

/**
 * @brief Restores a snapshot written by `save_snapshot` (on any backend) into `c`: the snapshot's
 * step counter and seed replace the compressor's. The message is checked completely first: on
 * any error `c` is unchanged.
 * @return `errc::layout_mismatch` (a snapshot with state buffers, such as another compressor's,
 *         or not a snapshot), `errc::config_mismatch` (another method's state section; `detail()`
 *         is `"selection"`), `errc::malformed_payload`, or any decoding error.
 */
template <class T, class B>
[[nodiscard]] result<void> restore_snapshot(terngrad_compressor<T, B>& c, span<const std::byte> msg) {
  return detail::compressor_snapshot<detail::terngrad_snapshot_access>::restore(c, msg);
}

}  // namespace gradcomp
