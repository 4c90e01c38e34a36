// detail::ef_sign_ops<cpu_backend>: the CPU kernels of EF-SignSGD (ef_signsgd/step_plan.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

#include "../backend.hpp"
#include "../detail/magnitude.hpp"
#include "../ef_signsgd/step_plan.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

template <>
struct ef_sign_ops<cpu_backend> {
  // One read of g and e: the largest |g| (through magnitude keys, so a NaN or an infinity shows),
  // whether every p is finite, and ||p||_1 in double over 32 interleaved partial sums combined
  // pairwise (a fixed order, so every run and every backend that follows it gets the same bits).
  template <class T>
  static void measure(const cpu_backend&, T lr, span<const T> g, span<const T> e, span<ef_sign_record> records,
                      std::size_t t) {
    constexpr std::size_t lanes = 32;
    double part[lanes] = {};
    key_t<T> top_g = 0, top_p = 0;
    const std::size_t n = g.size();
    const bool with_e = !e.empty();
    for (std::size_t i = 0; i < n; ++i) {
      const T gi = g[i];
      const T p = with_e ? static_cast<T>(e[i] + lr * gi) : static_cast<T>(lr * gi);
      const key_t<T> kg = magnitude_key(gi), kp = magnitude_key(p);
      top_g = kg > top_g ? kg : top_g;
      top_p = kp > top_p ? kp : top_p;
      part[i % lanes] += std::fabs(static_cast<double>(p));
    }
    for (std::size_t width = lanes / 2; width > 0; width /= 2)
      for (std::size_t j = 0; j < width; ++j) part[j] += part[j + width];
    ef_sign_record& r = records[t];
    r.largest = is_finite_key<T>(top_g) ? static_cast<double>(value_of_key<T>(top_g))
                                         : std::numeric_limits<double>::quiet_NaN();
    r.p_finite = is_finite_key<T>(top_p) ? 1 : 0;
    r.l1 = part[0];
  }
  static void plan(const cpu_backend&, span<ef_sign_record> records, span<ef_sign_step_record> step) {
    plan_ef_sign_step(records.data(), records.size(), step.data());
  }
  // The step, if the verdict allows: a compressed tensor sends sign(p) * scale (a zero keeps its
  // sign) and keeps e = p - sent; a dense one sends lr * g.
  template <class T>
  static void apply(const cpu_backend&, T lr, span<const T> g, span<T> e, span<T> values,
                    span<const ef_sign_record> records, std::size_t t, span<const ef_sign_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(errc::ok)) return;
    const std::size_t n = g.size();
    if (records[t].compressed == 0) {
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<T>(lr * g[i]);
      return;
    }
    const T s = static_cast<T>(records[t].scale);
    for (std::size_t i = 0; i < n; ++i) {
      const T p = static_cast<T>(e[i] + lr * g[i]);
      const T v = std::signbit(p) ? -s : s;
      values[i] = v;
      e[i] = static_cast<T>(p - v);
    }
  }
};

}  // namespace detail
}  // namespace gradcomp
