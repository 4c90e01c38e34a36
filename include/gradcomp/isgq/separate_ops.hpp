// detail::isgq_ops<separate_backend<Kernels>>: ISGQ's kernels on a separate backend, each
// isgq_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// isgq/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "factors.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_ISGQ_SEPARATE(X)                                                         \
  X(dither,                                                                                      \
    (const backend& on, view<const T> w, std::size_t bucket, std::uint32_t s, std::uint64_t key, \
     std::uint64_t step, std::uint32_t stream, std::uint32_t factor, view<float> scales,         \
     view<std::uint8_t> codes),                                                                  \
    (on, w, bucket, s, key, step, stream, factor, scales, codes))

GRADCOMP_SEPARATE_KERNELS(isgq_separate_kernels, GRADCOMP_DETAIL_ISGQ_SEPARATE);

template <class Kernels>
struct isgq_ops<separate_backend<Kernels>> : separate_method_ops<isgq_separate_kernels, Kernels> {
  using base = separate_method_ops<isgq_separate_kernels, Kernels>;
  using base::f::dither, base::d::dither;
};

}  // namespace detail
}  // namespace gradcomp
