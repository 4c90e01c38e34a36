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
#include "../error.hpp"
#include "../snapshot.hpp"
#include "../span.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

struct terngrad_snapshot_access {
  template <class T, class B>
  static void wait(terngrad_compressor<T, B>& c) {
    c.wait();
  }
  template <class T, class B>
  static const B& backend(const terngrad_compressor<T, B>& c) noexcept {
    return c.backend_;
  }
  // No buffers: TernGrad keeps no error.
  template <class T, class B>
  static std::vector<snapshot_item<T, memory_space_t<B>>> items(terngrad_compressor<T, B>&) {
    return {};
  }
  // The step counter, the seed and the method; the other words are 0.
  template <class T, class B>
  static void counters(const terngrad_compressor<T, B>& c, double* words) {
    for (std::size_t i = 0; i < snapshot_state_words; ++i) words[i] = 0.0;
    const auto step = static_cast<std::uint64_t>(c.step_);
    words[word::step_low] = static_cast<double>(step & 0xffffffffu);
    words[word::step_high] = static_cast<double>(step >> 32);
    words[word::seed_low] = static_cast<double>(c.cfg_.seed & 0xffffffffu);
    words[word::seed_high] = static_cast<double>(c.cfg_.seed >> 32);
    words[word::selection] = static_cast<double>(static_cast<std::uint32_t>(wire::snapshot_selection::ternary));
  }
  // A snapshot of another method is refused.
  template <class C>
  static const char* config_difference(const C&, const double* words) {
    if (words[word::selection] != static_cast<double>(static_cast<std::uint32_t>(wire::snapshot_selection::ternary)))
      return "selection";
    if (words[word::momentum_correction] != 0.0) return "momentum_correction";
    return nullptr;
  }
  template <class T, class B>
  static void set_counters(terngrad_compressor<T, B>& c, const double* words) {
    c.step_ = static_cast<std::size_t>(static_cast<std::uint64_t>(words[word::step_low]) |
                                       (static_cast<std::uint64_t>(words[word::step_high]) << 32));
    c.cfg_.seed = static_cast<std::uint64_t>(words[word::seed_low]) |
                  (static_cast<std::uint64_t>(words[word::seed_high]) << 32);
  }
  template <class C>
  static void set_bounds(C&, const std::vector<double>&) noexcept {}
};

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
