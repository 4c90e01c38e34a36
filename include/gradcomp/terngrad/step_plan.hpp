// The TernGrad step split into host plan and backend execution (docs/backends.md), as for
// EF-SignSGD: the per-tensor records and the step's verdict live in backend memory, the decisions
// below run where that memory is, and the kernels obey the verdict. A backend that runs TernGrad
// specialises detail::terngrad_ops (the CPU's is terngrad/cpu_ops.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../config.hpp"
#include "../detail/bytes.hpp"
#include "../detail/philox.hpp"
#include "../detail/step_verdict.hpp"
#include "../error.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {

// One tensor's record, in backend memory. The host writes `numel` and `compressed` at
// registration, `shared` before a step with shared scales; the step writes the rest.
struct terngrad_record {
  std::uint64_t numel = 0;
  double largest = 0.0;  // largest |g| of this step (NaN: a NaN or an infinity in g)
  double sum = 0.0;      // sum of g, in double
  double squares = 0.0;  // sum of g^2, in double
  float local = 0.0f;    // this worker's scale: min(largest, c * sigma) rounded up to binary32
  float shared = 0.0f;   // the scale agreed between workers (used when the step shares scales)
  float scale = 0.0f;    // the scale this step sends with
  std::uint8_t compressed = 0;  // sent as ternary values (1) or whole (0)
};

// The step's verdict (detail/step_verdict.hpp).
using terngrad_step_record = step_status;

// What a step's kernels need besides the data: the draws' key and counters, and the clipping.
struct terngrad_step_params {
  std::uint64_t key = 0;    // Philox key: from the seed and the worker's rank
  std::uint64_t step = 0;   // the step counter (accepted steps)
  double clip_sigmas = 0.0;  // c of the c * sigma clipping; 0: no clipping
  std::uint8_t shared = 0;  // 1: send with each record's `shared` scale
};

// Per-backend kernels of TernGrad; each backend that runs it specialises this template:
//   measure<T>(b, g, records, t): records[t].largest, sum, squares from one read of g
//   plan(b, records, params, step): plan_step
//   apply<T>(b, params, g, values, records, t, step): if the verdict allows, values = the tensor's
//     message (terngrad_value of every element, or g whole)
// The primary template is left undefined: a backend without them does not compile TernGrad.
template <class Backend>
struct terngrad_ops;

// The verdict, from the records the reads left, in tensor order: a NaN or an infinity in a
// gradient refuses the step with errc::non_finite_input; a scale beyond binary32 with
// errc::state_overflow; a shared scale below this worker's own (or not finite) with
// errc::invalid_argument. Sets each compressed tensor's scale: its own, min(max |g|, c * sigma)
// rounded up to binary32 (sigma the standard deviation of g's elements, from the sums in double;
// no clipping where sigma is 0), or the shared one.
GRADCOMP_HD inline void plan_step(terngrad_record* r, std::size_t count, const terngrad_step_params& p,
                                           terngrad_step_record* step) noexcept {
  step->status = static_cast<std::int32_t>(errc::ok);
  for (std::size_t t = 0; t < count; ++t) {
    if (std::isnan(r[t].largest)) {
      step->status = static_cast<std::int32_t>(errc::non_finite_input);
      return;
    }
  }
  for (std::size_t t = 0; t < count; ++t) {
    terngrad_record& x = r[t];
    if (x.compressed == 0 || x.numel == 0) continue;
    double bound = x.largest;
    if (p.clip_sigmas > 0.0) {
      const double n = static_cast<double>(x.numel);
      const double mean = x.sum / n;
      const double variance = x.squares / n - detail::rounded(mean * mean);
      const double clip = p.clip_sigmas * std::sqrt(variance > 0.0 ? variance : 0.0);
      if (clip > 0.0 && clip < bound) bound = clip;  // sigma 0 (all elements equal): no clipping
    }
    x.local = binary32_at_least(bound);
    if (!std::isfinite(x.local)) {
      step->status = static_cast<std::int32_t>(errc::state_overflow);
      return;
    }
    x.scale = x.local;
    if (p.shared != 0) {
      if (!(x.shared >= x.local) || !std::isfinite(x.shared)) {
        step->status = static_cast<std::int32_t>(errc::invalid_argument);
        return;
      }
      x.scale = x.shared;
    }
  }
}

// The value TernGrad sends for g at element i of a tensor: s * sign(g) with probability
// min(1, |g| / s) (the quotient rounded in T, the draw exact), else 0; 0 when s is 0.
template <class T>
GRADCOMP_HD T terngrad_value(T g, T s, std::uint32_t draw) noexcept {
  if (!(s > T(0))) return T(0);
  const T p = std::fabs(g) / s;
  if (!uniform_below(draw, static_cast<double>(p))) return T(0);
  return g < T(0) ? -s : s;
}

// A tensor's work items in the whole-model launches (model_items, backend.hpp): one Philox block of
// four elements each.
inline model_items terngrad_model_items(std::size_t numel) noexcept {
  model_items items;
  items.count[0] = (numel + 3) / 4;
  return items;
}

}  // namespace detail
}  // namespace gradcomp
