// detail::qsgd_ops<separate_backend<Kernels>>: QSGD's kernels on a separate backend, each
// qsgd_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// qsgd/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_QSGD_SEPARATE(X)                                                                  \
  X(measure,                                                                                              \
    (const backend& on, const qsgd_step_params& p, const model<T>& m, view<qsgd_record> records),         \
    (on, p, m, records))                                                                                  \
  X(apply,                                                                                                \
    (const backend& on, const qsgd_step_params& p, const model<T>& m, view<const qsgd_step_record> step), \
    (on, p, m, step))                                                                                     \
  X(measure,                                                                                              \
    (const backend& on, const qsgd_step_params& p, view<const T> g, view<float> measured,                 \
     view<qsgd_record> records, std::size_t t),                                                           \
    (on, p, g, measured, records, t))                                                                     \
  X(plan,                                                                                                 \
    (const backend& on, view<const qsgd_record> records, view<qsgd_step_record> step),                    \
    (on, records, step))                                                                                  \
  X(apply,                                                                                                \
    (const backend& on, const qsgd_step_params& p, view<const T> g, view<const float> measured,           \
     view<float> scales, view<T> values, view<const qsgd_record> records, std::size_t t,                  \
     view<const qsgd_step_record> step),                                                                  \
    (on, p, g, measured, scales, values, records, t, step))

GRADCOMP_SEPARATE_KERNELS(qsgd_separate_kernels, GRADCOMP_DETAIL_QSGD_SEPARATE);

template <class Kernels>
struct qsgd_ops<separate_backend<Kernels>> : separate_quantiser_ops<qsgd_separate_kernels, Kernels> {};

}  // namespace detail
}  // namespace gradcomp
