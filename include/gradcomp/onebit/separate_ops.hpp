// detail::onebit_ops<separate_backend<Kernels>>: 1-bit SGD's kernels on a separate backend, each
// onebit_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// onebit/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_ONEBIT_SEPARATE(X)                                                          \
  X(measure,                                                                                        \
    (const backend& on, const model<T>& m, view<onebit_record> records),                            \
    (on, m, records))                                                                               \
  X(apply,                                                                                          \
    (const backend& on, const model<T>& m, view<const onebit_record> records,                       \
     view<const onebit_step_record> step),                                                          \
    (on, m, records, step))                                                                         \
  X(measure,                                                                                        \
    (const backend& on, view<const T> g, view<const T> r, view<onebit_partial<T>> partials,         \
     view<onebit_column> cols, view<onebit_record> records, std::size_t t),                         \
    (on, g, r, partials, cols, records, t))                                                         \
  X(plan,                                                                                           \
    (const backend& on, view<const onebit_record> records, view<onebit_step_record> step),          \
    (on, records, step))                                                                            \
  X(apply,                                                                                          \
    (const backend& on, view<const T> g, view<T> r, view<T> values, view<const onebit_column> cols, \
     view<const onebit_record> records, std::size_t t, view<const onebit_step_record> step),        \
    (on, g, r, values, cols, records, t, step))

GRADCOMP_SEPARATE_KERNELS(onebit_separate_kernels, GRADCOMP_DETAIL_ONEBIT_SEPARATE);

template <class Kernels>
struct onebit_ops<separate_backend<Kernels>> : separate_quantiser_ops<onebit_separate_kernels, Kernels> {};

}  // namespace detail
}  // namespace gradcomp
