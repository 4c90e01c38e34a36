// Bounds of magnitudes that stay clear of overflow, for the guards of the compressors and the
// aggregator: a step whose magnitudes, bounded in double arithmetic from exact inputs, stay below
// state_limit<T>() cannot produce an infinity in T (the margin covers T's rounding of the few
// operations of a step); bounds carried to the next step are widened by bound_slack for the same
// reason.
#pragma once

#include <cfloat>

#include "../config.hpp"

namespace gradcomp {
namespace detail {

// The largest finite T (float or double), usable in device code (std::numeric_limits is not).
template <class T>
GRADCOMP_HD constexpr double largest_finite() noexcept {
  return sizeof(T) == sizeof(float) ? static_cast<double>(FLT_MAX) : DBL_MAX;
}

template <class T>
GRADCOMP_HD constexpr double state_limit() noexcept {
  return largest_finite<T>() * (1.0 - 1.0 / 65536.0);
}
inline constexpr double bound_slack = 1.0 + 1.0 / 1048576.0;

// Largest magnitudes a step would leave in two state buffers (u: momentum, v: accumulator or
// averaged update), computed without writing; `finite` is false when an element would overflow.
struct state_magnitudes {
  double u = 0.0;
  double v = 0.0;
  bool finite = true;
};

}  // namespace detail
}  // namespace gradcomp
