// The QSGD step split into host plan and backend execution (docs/backends.md), as for TernGrad:
// each tensor's bucket norms and record and the step's verdict live in backend memory, the
// decisions below run where that memory is, and the kernels obey the verdict. A backend that runs
// QSGD specialises detail::qsgd_ops (the CPU's is qsgd/cpu_ops.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../config.hpp"
#include "../detail/bytes.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/philox.hpp"
#include "../detail/step_verdict.hpp"
#include "../wire/codecs/qsgd.hpp"
#include "../error.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {

/// The norm each bucket of QSGD is scaled by.
enum class qsgd_norm : std::uint8_t {
  l2 = 0,       ///< The bucket's Euclidean norm (the paper's): the variance bound holds.
  maximum = 1,  ///< The bucket's largest magnitude: lower variance, one more level in use.
};

namespace detail {

// One tensor's record, in backend memory. The host writes `numel` and `compressed` at
// registration; the step's measure writes the flags.
struct qsgd_record {
  std::uint64_t numel = 0;
  std::uint8_t compressed = 0;  // quantised (1) or sent whole (0)
  std::uint8_t non_finite = 0;  // a NaN or an infinity in g
  std::uint8_t overflow = 0;    // a norm beyond binary32
};

// The step's verdict (detail/step_verdict.hpp).
using qsgd_step_record = step_status;

// What a step's kernels need besides the data.
struct qsgd_step_params {
  std::uint64_t key = 0;       // Philox key: from the seed and the worker's rank
  std::uint64_t step = 0;      // the step counter (accepted steps)
  std::uint32_t bucket = 512;  // values per norm
  std::uint32_t levels = 15;   // s
  qsgd_norm norm = qsgd_norm::l2;
};

// Per-backend kernels of QSGD; each backend that runs it specialises this template:
//   measure<T>(b, params, g, measured, records, t): measured[k] = bucket k's norm
//     (qsgd_bucket_norm), then records[t]'s flags from them (qsgd_flags)
//   plan(b, records, step): plan_step
//   apply<T>(b, params, g, measured, scales, values, records, t, step): if the verdict allows,
//     scales = measured and values = the tensor's message (qsgd_apply_bucket over every bucket),
//     or values = g for a tensor sent whole
// The primary template is left undefined: a backend without them does not compile QSGD.
template <class Backend>
struct qsgd_ops;

// The norm of g[first, last) rounded up to binary32 (and to the smallest normal binary32 from
// below it, 0 aside): the Euclidean norm from the squares summed in double in element order, or
// the largest magnitude; NaN when an element is a NaN or an infinity, +infinity when the norm is
// beyond binary32.
template <class T>
GRADCOMP_HD float qsgd_bucket_norm(const T* g, std::size_t first, std::size_t last, qsgd_norm kind) noexcept {
  key_t<T> top = 0;
  double squares = 0.0;
  for (std::size_t i = first; i < last; ++i) {
    const key_t<T> k = magnitude_key(g[i]);
    top = k > top ? k : top;
    const double x = static_cast<double>(g[i]);
    squares += rounded(x * x);
  }
  if (!is_finite_key<T>(top)) return bits_float(0x7fc00000u);
  const double norm = kind == qsgd_norm::l2 ? std::sqrt(squares) : static_cast<double>(value_of_key<T>(top));
  if (!(norm - norm == 0.0)) return bits_float(0x7f800000u);  // the squares' sum overflowed
  const float up = binary32_at_least(norm);
  // A subnormal norm (not in the wire format) becomes the smallest normal one.
  return up != 0.0f && up < bits_float(0x00800000u) ? bits_float(0x00800000u) : up;
}

// A tensor's flags from its measured norms.
GRADCOMP_HD inline void qsgd_flags(const float* measured, std::size_t count, qsgd_record& r) noexcept {
  r.non_finite = 0;
  r.overflow = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const std::uint32_t bits = float_bits(measured[k]) & 0x7fffffffu;
    if (bits > 0x7f800000u) r.non_finite = 1;
    if (bits == 0x7f800000u) r.overflow = 1;
  }
}

// The verdict, in tensor order: a NaN or an infinity in any gradient refuses the step with
// errc::non_finite_input, else a norm beyond binary32 with errc::state_overflow.
GRADCOMP_HD inline void plan_step(const qsgd_record* r, std::size_t count, qsgd_step_record* step) noexcept {
  step->status = static_cast<std::int32_t>(errc::ok);
  for (std::size_t t = 0; t < count; ++t)
    if (r[t].compressed != 0 && r[t].non_finite != 0) {
      step->status = static_cast<std::int32_t>(errc::non_finite_input);
      return;
    }
  for (std::size_t t = 0; t < count; ++t)
    if (r[t].compressed != 0 && r[t].overflow != 0) {
      step->status = static_cast<std::int32_t>(errc::state_overflow);
      return;
    }
}

// The level of |g| under a norm: r = |g| / norm * s in double, then floor(r) + 1 with probability
// r - floor(r) (the draw exact), else floor(r); 0 under a zero norm. E[level] = r.
template <class T>
GRADCOMP_HD std::uint32_t qsgd_level(T g, float norm, std::uint32_t levels, std::uint32_t draw) noexcept {
  if (!(norm > 0.0f)) return 0;
  const double a = static_cast<double>(g < T(0) ? -g : g) / static_cast<double>(norm);
  const double r = rounded(a * static_cast<double>(levels));
  const auto low = static_cast<std::uint32_t>(r);
  if (low >= levels) return levels;  // |g| at the norm (r cannot pass s: the norm is rounded up)
  return low + (uniform_below(draw, r - static_cast<double>(low)) ? 1u : 0u);
}

// Elements [first, last) of a quantised tensor (one bucket, whose norm is `norm`): element i draws
// word i % 4 of Philox block i / 4. Every backend's kernel.
template <class T>
GRADCOMP_HD void qsgd_apply_bucket(const qsgd_step_params& p, std::uint32_t tensor, float norm, const T* g, T* values,
                                   std::size_t first, std::size_t last) noexcept {
  for (std::size_t i = first; i < last;) {
    const auto block = element_block(p.key, p.step, tensor, static_cast<std::uint32_t>(i / 4));
    for (std::size_t w = i % 4; w < 4 && i < last; ++w, ++i) {
      const std::uint32_t level = qsgd_level(g[i], norm, p.levels, block.w[w]);
      values[i] = qsgd_value<T>(norm, level, p.levels, g[i] < T(0));
    }
  }
}

// A tensor's work items in the whole-model launches (model_items, backend.hpp): in space 0 its
// buckets when compressed (else its elements), in space 1 its buckets when compressed.
inline model_items qsgd_model_items(std::size_t numel, std::size_t buckets, bool compressed) noexcept {
  model_items items;
  items.count[0] = compressed ? buckets : numel;
  items.count[1] = compressed ? buckets : 0;
  return items;
}

}  // namespace detail
}  // namespace gradcomp
