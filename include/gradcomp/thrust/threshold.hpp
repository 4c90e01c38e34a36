// Threshold selection (gradcomp::threshold_select) on the portable Thrust backend: the results of
// cpu::threshold_scan, bitwise. Every position whose magnitude key is at or above the threshold's
// (a NaN's key is above every other), in ascending order; the first `cap` of them written, all of
// them counted; a NaN anywhere refused once the output is written, as the CPU writes it.
//
// The count comes first (one pass); when everything fits, one stable compaction writes it. When
// more pass than fit, the passing positions are ranked by an inclusive scan (scratch of n counts)
// and those of rank up to `cap` are compacted: that is the error path (errc::output_too_small),
// which still writes what the CPU writes. The count and the NaN verdict return to the host.
#pragma once

#include <cstddef>
#include <cstdint>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/transform_scan.h>

#include "../config.hpp"
#include "../detail/magnitude.hpp"
#include "../error.hpp"
#include "dgc_kernels.hpp"
#include "select.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// 1 where position i passes the threshold key.
template <class T>
struct pass_flag {
  const T* values;
  key_t<T> key;
  GRADCOMP_HD std::uint32_t operator()(std::size_t i) const { return magnitude_key(values[i]) >= key ? 1u : 0u; }
};

// Position i passes and is among the first `cap` that do (rank: the inclusive count of passing
// positions up to i).
template <class T>
struct passes_within {
  const T* values;
  key_t<T> key;
  const std::uint32_t* rank;
  std::size_t cap;
  GRADCOMP_HD bool operator()(std::size_t i) const { return magnitude_key(values[i]) >= key && rank[i] <= cap; }
};

// cpu::threshold_scan over values[0, n) in System's memory, then the CPU backend's verdicts:
// errc::nan_input, errc::output_too_small (the first `cap` positions written), else the count.
// *total receives the count of passing positions in every case.
template <class T, class System>
result<std::size_t> threshold_select(stream_t stream, const T* values, std::size_t n, key_t<T> key, std::uint32_t* out,
                                     std::size_t cap, std::size_t* total) {
  const auto sys = exec<System>(stream);
  const thrust::counting_iterator<std::size_t> first(0);
  const auto last = first + static_cast<std::ptrdiff_t>(n);
  const auto positions = thrust::make_transform_iterator(first, index_of_position{});
  const at_least_key<T> passes{values, key};
  const auto count = static_cast<std::size_t>(returned(thrust::count_if(sys, first, last, passes)));
  *total = count;
  if (count <= cap) {
    thrust::copy_if(sys, positions, positions + static_cast<std::ptrdiff_t>(n), first, out, passes);
  } else if (cap != 0) {
    scratch<std::uint32_t, System> rank(stream, n);
    thrust::transform_inclusive_scan(sys, first, last, rank.data(), pass_flag<T>{values, key},
                                     thrust::plus<std::uint32_t>());
    thrust::copy_if(sys, positions, positions + static_cast<std::ptrdiff_t>(n), first, out,
                    passes_within<T>{values, key, rank.data(), cap});
  }
  if (n != 0 && is_nan_key<T>(largest_key<T, System>(stream, values, n))) return fail(errc::nan_input);
  if (count > cap) return fail(errc::output_too_small);
  return count;
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
