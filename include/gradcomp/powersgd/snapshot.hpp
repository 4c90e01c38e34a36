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
#include "../common/residual_snapshot.hpp"
#include "../snapshot.hpp"
#include "../wire/format.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

// The counters (step, seed, method), their check and their restore are a seeded quantiser's
// (common/residual_snapshot.hpp); the state sections and the restored Qs are PowerSGD's.
struct powersgd_snapshot_access : residual_snapshot_access<wire::snapshot_selection::powersgd, true> {
  using base = residual_snapshot_access<wire::snapshot_selection::powersgd, true>;
  template <class C>
  static void wait(C& c) {
    detail::ops<typename C::backend_type>::synchronize(c.backend_);
  }
  // Each compressed tensor's e (with error feedback), then its starting Q, staged in the
  // tensor's scratch Q (which only begin_step reads): what save reads and restore writes.
  template <class C>
  static auto items(C& c) {
    using T = typename C::value_type;
    std::vector<snapshot_item<T, typename C::memory_space>> out;
    for (std::size_t t = 0; t < c.tensors_.size(); ++t) {
      auto& s = c.tensors_[t];
      if (!s.info.compressed) continue;
      if (!s.e.view().empty()) out.push_back(make_snapshot_item(wire::section_role::residual, t, s.e.view()));
      c.start_q(t, s.qo.view());
      out.push_back(make_snapshot_item(wire::section_role::factor, t, s.qo.view()));
    }
    return out;
  }
  // After the items were written: the counters, each restored Q as the next start, no open step.
  template <class C>
  static void set_counters(C& c, const double* words) {
    base::set_counters(c, words);
    for (auto& s : c.tensors_) {
      if (!s.info.compressed) continue;
      powersgd_ops<typename C::backend_type>::copy(c.backend_, readonly(s.qo.view()), s.q.view());
      s.q_set = true;
      s.q_warm = false;
    }
    c.round_ = 0;
  }
};

template <class T, class Backend>
struct powersgd_snapshot_trait {
  using type = powersgd_snapshot_access;
  using value_type = T;
};

}  // namespace detail
}  // namespace gradcomp
