// The thresholds a tensor's earlier DGC steps hand on to the next one: the CPU backend's
// per-tensor selection state (it guides the fused pass, never its result).
#pragma once

#include <algorithm>
#include <cmath>

#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// What a tensor's earlier steps tell the next fused step. It decides how much data the step
// reads and where it writes, never the step's result.
template <class T>
struct step_guide {
  T sample = T(0);       // the last step's sample threshold (0: none)
  T kept = T(0);         // the last step's threshold of the kept entries (0: none)
  T kept_before = T(0);  // the step before's
  T sample_before = T(0);  // the step before's sample threshold
  // How far below predicted_sample_floor() a guided pass collects candidates, as a fraction of
  // it (0: not adapted yet). The band just below the threshold is dense (accumulators grow until
  // they cross it), so every point of margin costs many candidates; a cut above the new
  // threshold costs a second read of the data. The margin narrows while it suffices and widens
  // after a miss.
  double margin = 0.0;

  static constexpr double initial_margin = 0.02;
  static constexpr double min_margin = 0.01;
  static constexpr double max_margin = 0.25;

  double cut_margin() const noexcept { return margin > 0.0 ? margin : initial_margin; }
  // The cut held every element the selection could take.
  void cut_sufficed() noexcept { margin = std::max(min_margin, cut_margin() * 0.75); }
  // The threshold fell below the cut.
  void cut_too_high() noexcept { margin = std::min(max_margin, cut_margin() * 2.0); }
  // More candidates passed the cut than the pool holds.
  void cut_too_low() noexcept { margin = std::max(min_margin, cut_margin() * 0.5); }

  // How far the cut of a guided pass sits: the last sample threshold moved by half as much as
  // it moved the step before (thresholds drift while accumulators fill up or the gradients'
  // scale changes, by a few per cent a step and by less each step; a cut below the last
  // threshold alone lets two to three times k through while they grow), then the margin below.
  T predicted_sample_floor() const noexcept { return extrapolate(sample, sample_before, T(0.5)); }
  // The guess of this step's kept threshold: the last one, moved as much as it moved last time.
  T predicted_kept() const noexcept { return extrapolate(kept, kept_before, T(1)); }

 private:
  // last * (1 + share * (last / before - 1)), the ratio held within [0.9, 1.1]; last alone
  // without a finite positive `before`, 0 without a finite positive `last`.
  static T extrapolate(T last, T before, T share) noexcept {
    if (!(last > T(0)) || !std::isfinite(last)) return T(0);
    if (!(before > T(0)) || !std::isfinite(before)) return last;
    const T ratio = std::min(std::max(last / before, T(0.9)), T(1.1));
    return static_cast<T>(last * (T(1) + rounded(share * (ratio - T(1)))));
  }
};

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
