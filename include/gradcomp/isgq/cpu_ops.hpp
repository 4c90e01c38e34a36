// detail::isgq_ops<cpu_backend>: ISGQ's dithered factor quantiser on the CPU
// (isgq/factors.hpp), bucket after bucket.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "factors.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

template <>
struct isgq_ops<cpu_backend> {
  // Each bucket's scale (infinite beyond binary32) and each element's code.
  template <class T>
  static void dither(const cpu_backend&, span<const T> w, std::size_t bucket, std::uint32_t s, std::uint64_t key,
                     std::uint64_t step, std::uint32_t stream, std::uint32_t factor, span<float> scales,
                     span<std::uint8_t> codes) {
    for (std::size_t k = 0; k < scales.size(); ++k) {
      const std::size_t first = k * bucket, last = w.size() - first < bucket ? w.size() : first + bucket;
      isgq_dither_bucket(w.data(), first, last, s, key, step, stream, factor, scales.data() + k, codes.data());
    }
  }
};

}  // namespace detail
}  // namespace gradcomp
