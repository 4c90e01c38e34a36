// Where a quantiser's step verdict is written (step_status), and the verdict most of them take
// from their per-tensor records, where each record says whether its input and the state the step
// would write are finite (finite_verdict): the first tensor (in tensor order)
// with a non-finite input refuses the step with errc::non_finite_input; otherwise the first with a
// non-finite state with errc::state_overflow; otherwise errc::ok.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../error.hpp"

namespace gradcomp {
namespace detail {

// A quantiser's step verdict, in backend memory: errc::ok lets the step's kernels run. Each
// method's step plan fills it with its own `plan_step` overload, from that method's records.
struct step_status {
  std::int32_t status = 0;
};

template <class Record>
GRADCOMP_HD std::int32_t finite_verdict(const Record* r, std::size_t count, std::uint8_t Record::*input_finite,
                                        std::uint8_t Record::*state_finite) noexcept {
  for (std::size_t t = 0; t < count; ++t)
    if (r[t].*input_finite == 0) return static_cast<std::int32_t>(errc::non_finite_input);
  for (std::size_t t = 0; t < count; ++t)
    if (r[t].*state_finite == 0) return static_cast<std::int32_t>(errc::state_overflow);
  return static_cast<std::int32_t>(errc::ok);
}

}  // namespace detail
}  // namespace gradcomp
