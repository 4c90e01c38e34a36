// detail::isgq_ops<thrust_backend<System>>: ISGQ's dithered factor quantiser on the portable
// Thrust backend, one thread per bucket with the CPU's arithmetic (isgq/factors.hpp), so
// every scale and code is bitwise the CPU backend's.
#pragma once

#include "factors.hpp"
#include "../thrust/kernel_support.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class T>
struct isgq_dither_op {
  const T* w;
  std::size_t n, bucket;
  std::uint32_t s;
  std::uint64_t key, step;
  std::uint32_t stream, factor;
  float* scales;
  std::uint8_t* codes;
  GRADCOMP_HD void operator()(std::size_t k) const {
    const std::size_t first = k * bucket, last = n - first < bucket ? n : first + bucket;
    isgq_dither_bucket(w, first, last, s, key, step, stream, factor, scales + k, codes);
  }
};

}  // namespace thrust_impl

/// ISGQ's dithered quantiser on the Thrust backend: the scales and codes stay in the system's
/// memory until the host copies them into the message.
template <class System>
struct isgq_ops<thrust_backend<System>> {
  template <class T>
  static void dither(const thrust_backend<System>& on, thrust_view<const T, System> w, std::size_t bucket,
                     std::uint32_t s, std::uint64_t key, std::uint64_t step, std::uint32_t stream,
                     std::uint32_t factor, thrust_view<float, System> scales,
                     thrust_view<std::uint8_t, System> codes) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                       scales.size(),
                       thrust_impl::isgq_dither_op<T>{w.data(), w.size(), bucket, s, key, step, stream, factor,
                                                      scales.data(), codes.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
