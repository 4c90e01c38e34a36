/// @file snapshot.hpp
/// @brief Save and restore the state of an `ef_signsgd_compressor` (its error buffers and step
/// counter) through the wire format, on any backend.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `scaled_sign`, followed by one `residual` section per compressed tensor
/// holding its error e. Restoring it into a compressor with the same tensors continues bit for
/// bit; the learning rate is the compressor's own setting and is not stored.
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

struct ef_signsgd_snapshot_access {
  template <class T, class B>
  static void wait(ef_signsgd_compressor<T, B>& c) {
    c.wait();
  }
  template <class T, class B>
  static const B& backend(const ef_signsgd_compressor<T, B>& c) noexcept {
    return c.backend_;
  }
  // The error e of every compressed tensor.
  template <class T, class B>
  static std::vector<snapshot_item<T, memory_space_t<B>>> items(ef_signsgd_compressor<T, B>& c) {
    std::vector<snapshot_item<T, memory_space_t<B>>> out;
    for (std::size_t t = 0; t < c.tensors_.size(); ++t)
      if (c.tensors_[t].info.compressed) out.push_back(make_snapshot_item(wire::section_role::residual, t, c.tensors_[t].e.view()));
    return out;
  }
  // The step counter and the method; the other words are 0.
  template <class T, class B>
  static void counters(const ef_signsgd_compressor<T, B>& c, double* words) {
    for (std::size_t i = 0; i < snapshot_state_words; ++i) words[i] = 0.0;
    const auto step = static_cast<std::uint64_t>(c.step_);
    words[word::step_low] = static_cast<double>(step & 0xffffffffu);
    words[word::step_high] = static_cast<double>(step >> 32);
    words[word::selection] = static_cast<double>(static_cast<std::uint32_t>(wire::snapshot_selection::scaled_sign));
  }
  // A snapshot of another method (DGC's, or of the first release, which records none) is refused.
  template <class C>
  static const char* config_difference(const C&, const double* words) {
    if (words[word::selection] != static_cast<double>(static_cast<std::uint32_t>(wire::snapshot_selection::scaled_sign)))
      return "selection";
    if (words[word::momentum_correction] != 0.0) return "momentum_correction";
    return nullptr;
  }
  template <class T, class B>
  static void set_counters(ef_signsgd_compressor<T, B>& c, const double* words) {
    c.step_ = static_cast<std::size_t>(static_cast<std::uint64_t>(words[word::step_low]) |
                                       (static_cast<std::uint64_t>(words[word::step_high]) << 32));
  }
  // EF-SignSGD keeps no bounds between steps: its overflow check reads e in every step.
  template <class C>
  static void set_bounds(C&, const std::vector<double>&) noexcept {}
};

}  // namespace detail

/// Exact size of `save_snapshot`'s output for this compressor.
template <class T, class B>
std::size_t snapshot_bytes(const ef_signsgd_compressor<T, B>& c, bool checksum = true) {
  return detail::compressor_snapshot<detail::ef_signsgd_snapshot_access>::bytes(c, checksum);
}

/**
 * @brief Writes the compressor's state (error buffers, step counter) as a snapshot message into
 * `out`, with a CRC-32C unless `checksum` is false. Waits for the step in progress.
 * @return bytes written, or `errc::output_too_small` (see `snapshot_bytes`).
 */
template <class T, class B>
[[nodiscard]] result<std::size_t> save_snapshot(const ef_signsgd_compressor<T, B>& c, span<std::byte> out,
                                                bool checksum = true) {
  return detail::compressor_snapshot<detail::ef_signsgd_snapshot_access>::save<T>(c, out, checksum);
}

/// Convenience: the snapshot in a new vector; throws `gradcomp::error`.
template <class T, class B>
std::vector<std::byte> save_snapshot(const ef_signsgd_compressor<T, B>& c, bool checksum = true) {
  return detail::compressor_snapshot<detail::ef_signsgd_snapshot_access>::save<T>(c, checksum);
}

/**
 * @brief Restores a snapshot written by `save_snapshot` (on any backend) into `c`, which must
 * have the same tensors (ids, sizes and the compressed/dense split). The message is checked
 * completely first: on any error `c` is unchanged.
 * @return `errc::layout_mismatch` (another layout, or not a snapshot), `errc::config_mismatch`
 *         (another compressor's snapshot; `detail()` is `"selection"`), `errc::malformed_payload`,
 *         or any decoding error.
 */
template <class T, class B>
[[nodiscard]] result<void> restore_snapshot(ef_signsgd_compressor<T, B>& c, span<const std::byte> msg) {
  return detail::compressor_snapshot<detail::ef_signsgd_snapshot_access>::restore(c, msg);
}

}  // namespace gradcomp
