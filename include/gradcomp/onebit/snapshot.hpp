/// @file snapshot.hpp
/// @brief Save and restore the state of an `onebit_sgd_compressor` (its residuals and step
/// counter) through the wire format, on any backend.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `one_bit`, followed by one `residual` section per quantised tensor holding
/// its residual r. Restoring it into a compressor with the same tensors continues bit for bit;
/// the receiver's momentum is the compressor's own setting and is not stored.
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

using onebit_snapshot_access = residual_snapshot_access<wire::snapshot_selection::one_bit>;

}  // namespace detail

/// Exact size of `save_snapshot`'s output for this compressor.
template <class T, class B>
std::size_t snapshot_bytes(const onebit_sgd_compressor<T, B>& c, bool checksum = true) {
  return detail::compressor_snapshot<detail::onebit_snapshot_access>::bytes(c, checksum);
}

/**
 * @brief Writes the compressor's state (residuals, step counter) as a snapshot message into
 * `out`, with a CRC-32C unless `checksum` is false. Waits for the step in progress.
 * @return bytes written, or `errc::output_too_small` (see `snapshot_bytes`).
 */
template <class T, class B>
[[nodiscard]] result<std::size_t> save_snapshot(const onebit_sgd_compressor<T, B>& c, span<std::byte> out,
                                                bool checksum = true) {
  return detail::compressor_snapshot<detail::onebit_snapshot_access>::save<T>(c, out, checksum);
}

/// Convenience: the snapshot in a new vector; throws `gradcomp::error`.
template <class T, class B>
std::vector<std::byte> save_snapshot(const onebit_sgd_compressor<T, B>& c, bool checksum = true) {
  return detail::compressor_snapshot<detail::onebit_snapshot_access>::save<T>(c, checksum);
}

/**
 * @brief Restores a snapshot written by `save_snapshot` (on any backend) into `c`, which must
 * have the same compressed tensors (ids and sizes). The message is checked completely first: on
 * any error `c` is unchanged.
 * @return `errc::layout_mismatch` (compressed tensors of other ids or sizes, or not a snapshot;
 *         tensors sent whole keep no state and are not compared), `errc::config_mismatch`
 *         (another compressor's snapshot; `detail()` is `"selection"`), `errc::malformed_payload`,
 *         or any decoding error.
 */
template <class T, class B>
[[nodiscard]] result<void> restore_snapshot(onebit_sgd_compressor<T, B>& c, span<const std::byte> msg) {
  return detail::compressor_snapshot<detail::onebit_snapshot_access>::restore(c, msg);
}

}  // namespace gradcomp
