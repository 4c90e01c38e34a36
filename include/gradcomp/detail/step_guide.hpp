// The thresholds a tensor's earlier DGC steps hand on to the next one (any backend).
#pragma once

#include <algorithm>
#include <cmath>

namespace gradcomp {
namespace detail {

// What a tensor's earlier steps tell the next fused step. It decides how much data the step
// reads and where it writes, never the step's result.
template <class T>
struct step_guide {
  T sample = T(0);       // the last step's sample threshold (0: none)
  T kept = T(0);         // the last step's threshold of the kept entries (0: none)
  T kept_before = T(0);  // the step before's

  // The guess of this step's kept threshold: the last one, moved as much as it moved last time
  // (thresholds drift steadily while accumulators fill up or the gradients' scale changes).
  T predicted_kept() const noexcept {
    if (!(kept > T(0)) || !std::isfinite(kept)) return T(0);
    if (!(kept_before > T(0)) || !std::isfinite(kept_before)) return kept;
    return static_cast<T>(kept * std::min(std::max(kept / kept_before, T(0.9)), T(1.1)));
  }
};

}  // namespace detail
}  // namespace gradcomp
