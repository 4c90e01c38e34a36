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
#define GRADCOMP_DETAIL_TERNGRAD_SEPARATE(X)                                                                   \
  X(measure,                                                                                                   \
    (const backend& on, const model<T>& m, view<terngrad_record> records),                                     \
    (on, m, records))                                                                                          \
  X(apply,                                                                                                     \
    (const backend& on, const terngrad_step_params& p, const model<T>& m, view<const terngrad_record> records, \
     view<const terngrad_step_record> step),                                                                   \
    (on, p, m, records, step))                                                                                 \
  X(measure,                                                                                                   \
    (const backend& on, view<const T> g, view<terngrad_record> records, std::size_t t),                        \
    (on, g, records, t))                                                                                       \
  X(plan,                                                                                                      \
    (const backend& on, view<terngrad_record> records, const terngrad_step_params& p,                          \
     view<terngrad_step_record> step),                                                                         \
    (on, records, p, step))                                                                                    \
  X(apply,                                                                                                     \
    (const backend& on, const terngrad_step_params& p, view<const T> g, view<T> values,                        \
     view<const terngrad_record> records, std::size_t t, view<const terngrad_step_record> step),               \
    (on, p, g, values, records, t, step))

GRADCOMP_SEPARATE_KERNELS(terngrad_separate_kernels, GRADCOMP_DETAIL_TERNGRAD_SEPARATE);

template <class Kernels>
struct terngrad_ops<separate_backend<Kernels>> : separate_quantiser_ops<terngrad_separate_kernels, Kernels> {};

}  // namespace detail
}  // namespace gradcomp
