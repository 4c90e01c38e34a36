// detail::terngrad_ops<separate_backend<Kernels>>: TernGrad's kernels on a separate backend, each
// terngrad_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// terngrad/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_TERNGRAD_SEPARATE(X)                                                     \
  X(measure,                                                                                     \
    (const backend& on, view<const T> g, view<terngrad_record> records, std::size_t t),          \
    (on, g, records, t))                                                                         \
  X(plan,                                                                                        \
    (const backend& on, view<terngrad_record> records, const terngrad_step_params& p,            \
     view<terngrad_step_record> step),                                                           \
    (on, records, p, step))                                                                      \
  X(apply,                                                                                       \
    (const backend& on, const terngrad_step_params& p, view<const T> g, view<T> values,          \
     view<const terngrad_record> records, std::size_t t, view<const terngrad_step_record> step), \
    (on, p, g, values, records, t, step))

// The kernels on T.
template <class Kernels, class T>
struct terngrad_separate_kernels {
  using backend = separate_backend<Kernels>;
  template <class U>
  using view = separate_view<U, Kernels>;
  GRADCOMP_DETAIL_TERNGRAD_SEPARATE(GRADCOMP_SEPARATE_DECLARE)
};

template <class Kernels>
struct terngrad_ops<separate_backend<Kernels>>
    : terngrad_separate_kernels<Kernels, float>, terngrad_separate_kernels<Kernels, double> {
  using f = terngrad_separate_kernels<Kernels, float>;
  using d = terngrad_separate_kernels<Kernels, double>;
  using f::measure, d::measure, f::plan, f::apply, d::apply;  // plan: the same for every T
};

}  // namespace detail
}  // namespace gradcomp
