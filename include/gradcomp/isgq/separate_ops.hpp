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

// The kernels on T.
template <class Kernels, class T>
struct isgq_separate_kernels {
  using backend = separate_backend<Kernels>;
  template <class U>
  using view = separate_view<U, Kernels>;
  GRADCOMP_DETAIL_ISGQ_SEPARATE(GRADCOMP_SEPARATE_DECLARE)
};

template <class Kernels>
struct isgq_ops<separate_backend<Kernels>>
    : isgq_separate_kernels<Kernels, float>, isgq_separate_kernels<Kernels, double> {
  using f = isgq_separate_kernels<Kernels, float>;
  using d = isgq_separate_kernels<Kernels, double>;
  using f::dither, d::dither;
};

}  // namespace detail
}  // namespace gradcomp
