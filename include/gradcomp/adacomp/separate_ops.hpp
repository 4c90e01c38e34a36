// detail::adacomp_ops<separate_backend<Kernels>>: AdaComp's kernels on a separate backend, each
// adacomp_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// adacomp/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_ADACOMP_SEPARATE(X)                                                                    \
  X(measure,                                                                                                   \
    (const backend& on, const model<T>& m, view<std::uint32_t> offsets, view<adacomp_record> records),         \
    (on, m, offsets, records))                                                                                 \
  X(apply,                                                                                                     \
    (const backend& on, const model<T>& m, view<const std::uint32_t> offsets, view<adacomp_record> records,    \
     view<const adacomp_step_record> step),                                                                    \
    (on, m, offsets, records, step))                                                                           \
  X(measure,                                                                                                   \
    (const backend& on, view<const T> g, view<const T> r, std::size_t bin, view<adacomp_bin<T>> bins,          \
     view<adacomp_chunk<T>> chunks, view<std::uint32_t> offsets, view<adacomp_record> records, std::size_t t), \
    (on, g, r, bin, bins, chunks, offsets, records, t))                                                        \
  X(plan,                                                                                                      \
    (const backend& on, view<const adacomp_record> records, view<adacomp_step_record> step),                   \
    (on, records, step))                                                                                       \
  X(apply,                                                                                                     \
    (const backend& on, view<const T> g, view<T> r, std::size_t bin, view<std::uint32_t> indices,              \
     view<T> values, view<const adacomp_bin<T>> bins, view<const std::uint32_t> offsets,                       \
     view<adacomp_record> records, std::size_t t, view<const adacomp_step_record> step),                       \
    (on, g, r, bin, indices, values, bins, offsets, records, t, step))

GRADCOMP_SEPARATE_KERNELS(adacomp_separate_kernels, GRADCOMP_DETAIL_ADACOMP_SEPARATE);

template <class Kernels>
struct adacomp_ops<separate_backend<Kernels>> : separate_quantiser_ops<adacomp_separate_kernels, Kernels> {};

}  // namespace detail
}  // namespace gradcomp
