// detail::terngrad_ops<cpu_backend>: the CPU kernels of TernGrad (terngrad/step_plan.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/philox.hpp"
#include "../span.hpp"
#include "../terngrad/step_plan.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// Lanes of the sums' partial sums: element i goes to lane i % terngrad_lanes, each lane summed in
// element order, the lanes combined pairwise; every backend follows this order.
inline constexpr std::size_t terngrad_lanes = 32;

// The lanes' partial sums of g and g^2 (in double) combined pairwise, and the largest |g|, into
// the record (a NaN or an infinity in g makes `largest` NaN). Also the Thrust backend's.
template <class T>
GRADCOMP_HD void terngrad_record_sums(double* sum, double* squares, key_t<T> top, terngrad_record& r) {
  for (std::size_t width = terngrad_lanes / 2; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j) {
      sum[j] += sum[j + width];
      squares[j] += squares[j + width];
    }
  r.largest = is_finite_key<T>(top) ? static_cast<double>(value_of_key<T>(top)) : __builtin_nan("");
  r.sum = sum[0];
  r.squares = squares[0];
}

// Elements [first, last) of a compressed tensor's message: four elements share a Philox block.
// Also the Thrust backend's.
template <class T>
GRADCOMP_HD void terngrad_apply_range(const terngrad_step_params& p, std::uint32_t tensor, T s, const T* g, T* values,
                          std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < last;) {
    const auto block = element_block(p.key, p.step, tensor, static_cast<std::uint32_t>(i / 4));
    for (std::size_t w = i % 4; w < 4 && i < last; ++w, ++i) values[i] = terngrad_value(g[i], s, block.w[w]);
  }
}

}  // namespace cpu

template <>
struct terngrad_ops<cpu_backend> {
  // One read of g: the largest |g| (through magnitude keys, so a NaN or an infinity shows), and
  // the sums of g and g^2 in double over 32 interleaved partial sums combined pairwise.
  template <class T>
  static void measure(const cpu_backend&, span<const T> g, span<terngrad_record> records, std::size_t t) {
    double sum[cpu::terngrad_lanes] = {}, squares[cpu::terngrad_lanes] = {};
    key_t<T> top = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const key_t<T> k = magnitude_key(g[i]);
      top = k > top ? k : top;
      const double x = static_cast<double>(g[i]);
      sum[i % cpu::terngrad_lanes] += x;
      squares[i % cpu::terngrad_lanes] += x * x;
    }
    cpu::terngrad_record_sums<T>(sum, squares, top, records[t]);
  }
  static void plan(const cpu_backend&, span<terngrad_record> records, const terngrad_step_params& p,
                   span<terngrad_step_record> step) {
    plan_terngrad_step(records.data(), records.size(), p, step.data());
  }
  // The step, if the verdict allows: a compressed tensor sends terngrad_value of each element, a
  // dense one g itself.
  template <class T>
  static void apply(const cpu_backend&, const terngrad_step_params& p, span<const T> g, span<T> values,
                    span<const terngrad_record> records, std::size_t t, span<const terngrad_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(errc::ok)) return;
    if (records[t].compressed == 0) {
      for (std::size_t i = 0; i < g.size(); ++i) values[i] = g[i];
      return;
    }
    cpu::terngrad_apply_range(p, static_cast<std::uint32_t>(t), static_cast<T>(records[t].scale), g.data(),
                              values.data(), 0, g.size());
  }
};

}  // namespace detail
}  // namespace gradcomp
