/// @file powersgd/snapshot.hpp
/// @brief Save and restore the state of a `powersgd_compressor` (its step counter, its seed, and
/// each compressed tensor's error e and starting Q) through the wire format.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `powersgd`, the step counter and the seed, followed, for each compressed
/// tensor in id order, by its error e (a `residual` section; with error feedback only) and the Q
/// its next compressing step starts from before orthogonalisation (a `factor` section): the last
/// step's averaged Q with warm start, the one `set_q` gave, or else the draw that step would
/// make. Restoring it into a compressor with the same compressed tensors and rank continues bit
/// for bit: the restored Q is taken as if given to `set_q`. The other settings are the
/// compressor's own (`error_feedback` changes the sections, so a snapshot with errors is refused
/// by a compressor without, and the reverse, as `errc::layout_mismatch`).
///
/// A snapshot taken while a step is open holds the state from before that step (e and Q change
/// only when its last round ends); restoring closes an open step, which the workers then begin
/// again. The functions are `snapshot_bytes`, `save_snapshot` and `restore_snapshot` of
/// gradcomp/snapshot.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../backend.hpp"
#include "../snapshot.hpp"
#include "../wire/format.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

struct powersgd_snapshot_access {
  template <class C>
  static void wait(C&) noexcept {}
  template <class C>
  static const cpu_backend& backend(const C&) noexcept {
    static const cpu_backend host{};
    return host;
  }
  // Each compressed tensor's e (with error feedback), then its starting Q, staged in the
  // tensor's scratch Q (which only begin_step reads): what save reads and restore writes.
  template <class C>
  static auto items(C& c) {
    using T = typename C::value_type;
    std::vector<snapshot_item<T, host_space>> out;
    for (std::size_t t = 0; t < c.tensors_.size(); ++t) {
      auto& s = c.tensors_[t];
      if (!s.info.compressed) continue;
      if (!s.e.empty()) out.push_back(make_snapshot_item(wire::section_role::residual, t, span<T>(s.e.data(), s.e.size())));
      c.start_q(t, s.qo);
      out.push_back(make_snapshot_item(wire::section_role::factor, t, span<T>(s.qo.data(), s.qo.size())));
    }
    return out;
  }
  // The step counter, the seed (the key of the draws of Q) and the method.
  template <class C>
  static void counters(const C& c, double* words) {
    for (std::size_t i = 0; i < snapshot_state_words; ++i) words[i] = 0.0;
    const auto step = static_cast<std::uint64_t>(c.step_);
    words[word::step_low] = static_cast<double>(step & 0xffffffffu);
    words[word::step_high] = static_cast<double>(step >> 32);
    words[word::seed_low] = static_cast<double>(c.cfg_.seed & 0xffffffffu);
    words[word::seed_high] = static_cast<double>(c.cfg_.seed >> 32);
    words[word::selection] = static_cast<double>(static_cast<std::uint32_t>(wire::snapshot_selection::powersgd));
  }
  template <class C>
  static const char* config_difference(const C&, const double* words) {
    if (words[word::selection] != static_cast<double>(static_cast<std::uint32_t>(wire::snapshot_selection::powersgd)))
      return "selection";
    if (words[word::momentum_correction] != 0.0) return "momentum_correction";
    return nullptr;
  }
  // After the items were written: the counters, each restored Q as the next start, no open step.
  template <class C>
  static void set_counters(C& c, const double* words) {
    c.step_ = static_cast<std::size_t>(static_cast<std::uint64_t>(words[word::step_low]) |
                                       (static_cast<std::uint64_t>(words[word::step_high]) << 32));
    c.cfg_.seed = static_cast<std::uint64_t>(words[word::seed_low]) |
                  (static_cast<std::uint64_t>(words[word::seed_high]) << 32);
    for (auto& s : c.tensors_) {
      if (!s.info.compressed) continue;
      s.q = s.qo;
      s.q_set = true;
      s.q_warm = false;
    }
    c.round_ = 0;
  }
  // PowerSGD has no overflow bounds between steps: begin_step checks M = g + e.
  template <class C>
  static void set_bounds(C&, const std::vector<double>&) noexcept {}
};

template <class T>
struct powersgd_snapshot_trait {
  using type = powersgd_snapshot_access;
  using value_type = T;
};

}  // namespace detail
}  // namespace gradcomp
