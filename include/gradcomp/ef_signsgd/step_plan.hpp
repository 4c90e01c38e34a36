// The EF-SignSGD step split into host plan and backend execution (docs/backends.md), as for DGC:
// the per-tensor records and the step's verdict live in backend memory, the decisions below run
// where that memory is, and the kernels obey the verdict. A backend that runs EF-SignSGD
// specialises detail::ef_sign_ops (the CPU's is ef_signsgd/cpu_ops.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../config.hpp"
#include "../detail/step_verdict.hpp"
#include "../error.hpp"

namespace gradcomp {
namespace detail {

// One tensor's record, in backend memory. The host writes `numel` and `compressed` at
// registration; the step writes the rest.
struct ef_sign_record {
  std::uint64_t numel = 0;
  double largest = 0.0;     // largest |g| of this step (NaN: a NaN or an infinity in g)
  double l1 = 0.0;          // ||p||_1 of p = e + lr * g (compressed tensors), in double
  float scale = 0.0f;       // ||p||_1 / n rounded to binary32: the magnitude every value is sent with
  std::uint8_t p_finite = 1;   // every element of p (or lr * g for a dense tensor) is finite
  std::uint8_t compressed = 0;  // sent as signs (1) or whole (0)
};

// The step's verdict (detail/step_verdict.hpp).
using ef_sign_step_record = step_status;

// Per-backend kernels of EF-SignSGD; each backend that runs it specialises this template:
//   measure<T>(b, lr, g, e, records, t): records[t].largest, l1, p_finite from one read of g and e
//     (e empty for a dense tensor: p = lr * g)
//   plan(b, records, step): plan_step
//   apply<T>(b, lr, g, e, values, records, t, step): if the verdict allows, values = the tensor's
//     message (signs of p times its scale, or lr * g whole) and e = p - values
// The primary template is left undefined: a backend without them does not compile EF-SignSGD.
template <class Backend>
struct ef_sign_ops;

// The verdict, from the records the reads left, in tensor order: a NaN or an infinity in a
// gradient refuses the step with errc::non_finite_input; otherwise a p that is not finite or a
// scale beyond binary32 refuses it with errc::state_overflow. Sets each compressed tensor's scale.
GRADCOMP_HD inline void plan_step(ef_sign_record* r, std::size_t count, ef_sign_step_record* step) noexcept {
  step->status = static_cast<std::int32_t>(errc::ok);
  for (std::size_t t = 0; t < count; ++t) {
    if (std::isnan(r[t].largest)) {
      step->status = static_cast<std::int32_t>(errc::non_finite_input);
      return;
    }
  }
  for (std::size_t t = 0; t < count; ++t) {
    ef_sign_record& x = r[t];
    if (x.compressed != 0 && x.numel != 0) {
      const double mean = x.l1 / static_cast<double>(x.numel);
      x.scale = static_cast<float>(mean);
      if (!std::isfinite(mean) || !std::isfinite(x.scale)) x.p_finite = 0;
    }
    if (x.p_finite == 0) {
      step->status = static_cast<std::int32_t>(errc::state_overflow);
      return;
    }
  }
}

}  // namespace detail
}  // namespace gradcomp
