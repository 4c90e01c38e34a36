// detail::terngrad_ops<cpu_backend>: the CPU kernels of TernGrad (terngrad/step_plan.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/ordered_sum.hpp"
#include "../detail/rounded.hpp"
#include "../detail/philox.hpp"
#include "../span.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// One element's share of TernGrad's measure: g and g^2 in double and the magnitude key of g.
// Reduced in the order of detail/ordered_sum.hpp, with terngrad_merge, on every backend.
template <class T>
struct terngrad_sums {
  double sum = 0.0, squares = 0.0;
  key_t<T> top = 0;
};

template <class T>
struct terngrad_merge {
  GRADCOMP_HD terngrad_sums<T> operator()(const terngrad_sums<T>& a, const terngrad_sums<T>& b) const {
    return {a.sum + b.sum, a.squares + b.squares, a.top > b.top ? a.top : b.top};
  }
};

template <class T>
struct terngrad_leaf {
  const T* g;
  GRADCOMP_HD terngrad_sums<T> operator()(std::size_t i) const {
    const double x = static_cast<double>(g[i]);
    return {x, rounded(x * x), magnitude_key(g[i])};
  }
};

// The tensor's record from its measure (a NaN or an infinity in g makes `largest` NaN). Also the
// Thrust backend's.
template <class T>
GRADCOMP_HD void terngrad_record_sums(const terngrad_sums<T>& s, terngrad_record& r) {
  r.largest = is_finite_key<T>(s.top) ? static_cast<double>(value_of_key<T>(s.top)) : __builtin_nan("");
  r.sum = s.sum;
  r.squares = s.squares;
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
  // the sums of g and g^2 in double in the order of every backend (detail/ordered_sum.hpp).
  template <class T>
  static void measure(const cpu_backend&, span<const T> g, span<terngrad_record> records, std::size_t t) {
    const cpu::terngrad_leaf<T> leaf{g.data()};
    const cpu::terngrad_merge<T> merge;
    const auto s = ordered_reduce<cpu::terngrad_sums<T>>(
        g.size(),
        [&](std::size_t first, std::size_t last) {
          return fold_block<cpu::terngrad_sums<T>>(first, last, leaf, merge);
        },
        merge);
    cpu::terngrad_record_sums<T>(s, records[t]);
  }
  static void plan(const cpu_backend&, span<terngrad_record> records, const terngrad_step_params& p,
                   span<terngrad_step_record> step) {
    plan_step(records.data(), records.size(), p, step.data());
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
