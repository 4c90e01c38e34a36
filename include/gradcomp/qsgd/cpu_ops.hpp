// detail::qsgd_ops<cpu_backend>: the CPU kernels of QSGD (qsgd/step_plan.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "step_plan.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

template <>
struct qsgd_ops<cpu_backend> {
  // Each bucket's norm in one read of g, then the tensor's flags.
  template <class T>
  static void measure(const cpu_backend&, const qsgd_step_params& p, span<const T> g, span<float> measured,
                      span<qsgd_record> records, std::size_t t) {
    if (records[t].compressed == 0) return;
    for (std::size_t k = 0; k < measured.size(); ++k) {
      const std::size_t first = k * p.bucket, last = g.size() - first < p.bucket ? g.size() : first + p.bucket;
      measured[k] = qsgd_bucket_norm(g.data(), first, last, p.norm);
    }
    qsgd_flags(measured.data(), measured.size(), records[t]);
  }
  static void plan(const cpu_backend&, span<const qsgd_record> records, span<qsgd_step_record> step) {
    plan_step(records.data(), records.size(), step.data());
  }
  // The step, if the verdict allows: a quantised tensor sends its norms and levels, a dense one g.
  template <class T>
  static void apply(const cpu_backend&, const qsgd_step_params& p, span<const T> g, span<const float> measured,
                    span<float> scales, span<T> values, span<const qsgd_record> records, std::size_t t,
                    span<const qsgd_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(errc::ok)) return;
    if (records[t].compressed == 0) {
      for (std::size_t i = 0; i < g.size(); ++i) values[i] = g[i];
      return;
    }
    for (std::size_t k = 0; k < measured.size(); ++k) {
      const std::size_t first = k * p.bucket, last = g.size() - first < p.bucket ? g.size() : first + p.bucket;
      scales[k] = measured[k];
      qsgd_apply_bucket(p, static_cast<std::uint32_t>(t), measured[k], g.data(), values.data(), first, last);
    }
  }
};

}  // namespace detail
}  // namespace gradcomp
