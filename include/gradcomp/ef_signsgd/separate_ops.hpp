// detail::ef_sign_ops<separate_backend<Kernels>>: EF-SignSGD's kernels on a separate backend, each
// ef_sign_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// ef_signsgd/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_EF_SIGN_SEPARATE(X)                                                                   \
  X(measure,                                                                                                  \
    (const backend& on, T lr, const model<T>& m, view<ef_sign_record> records),                               \
    (on, lr, m, records))                                                                                     \
  X(apply,                                                                                                    \
    (const backend& on, T lr, const model<T>& m, view<const ef_sign_record> records,                          \
     view<const ef_sign_step_record> step),                                                                   \
    (on, lr, m, records, step))                                                                               \
  X(measure,                                                                                                  \
    (const backend& on, T lr, view<const T> g, view<const T> e, view<ef_sign_record> records, std::size_t t), \
    (on, lr, g, e, records, t))                                                                               \
  X(plan,                                                                                                     \
    (const backend& on, view<ef_sign_record> records, view<ef_sign_step_record> step),                        \
    (on, records, step))                                                                                      \
  X(apply,                                                                                                    \
    (const backend& on, T lr, view<const T> g, view<T> e, view<T> values, view<const ef_sign_record> records, \
     std::size_t t, view<const ef_sign_step_record> step),                                                    \
    (on, lr, g, e, values, records, t, step))

GRADCOMP_SEPARATE_KERNELS(ef_sign_separate_kernels, GRADCOMP_DETAIL_EF_SIGN_SEPARATE);

template <class Kernels>
struct ef_sign_ops<separate_backend<Kernels>> : separate_quantiser_ops<ef_sign_separate_kernels, Kernels> {};

}  // namespace detail
}  // namespace gradcomp
