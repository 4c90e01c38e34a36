// The order of the library's floating-point reductions (detail/ordered_sum.hpp) on the Thrust
// backend: a thread per lane of every block, a level of launches per factor of the block size,
// bitwise the host's streaming reduction and the definition, from one element to three levels;
// and many tensors' reductions at once (thrust/segmented_sum.hpp), each bitwise its own.
#include <gradcomp/detail/ordered_sum.hpp>
#include <gradcomp/thrust/ordered_sum.hpp>
#include <gradcomp/thrust/segmented_sum.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "support/ordered_sum_reference.hpp"
#include "thrust/systems.hpp"

namespace {

template <class System>
double ordered_sum_on(const gradcomp::thrust_backend<System>& b, std::size_t n) {
  namespace impl = gradcomp::detail::thrust_impl;
  impl::scratch<double, System> out(b.stream, 1);
  impl::issue_ordered_reduce<double, System>(b.stream, n, gradcomp_test::ordered_sum_reference::wide_leaf{},
                                             gradcomp::detail::sum_merge{}, out.data());
  return impl::read_value<System>(b.stream, out.data());
}

// Tensor t's terms: wide_term shifted by t, so that every tensor's sum is its own.
struct tensor_leaf {
  GRADCOMP_HD double operator()(std::uint32_t t, std::uint64_t i) const {
    return gradcomp_test::ordered_sum_reference::wide_term(static_cast<std::size_t>(i) + 7919u * t);
  }
};

}  // namespace

TEST_CASE_TEMPLATE("thrust: many tensors' ordered sums at once are each the definition's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  namespace reference = gradcomp_test::ordered_sum_reference;
  namespace impl = gradcomp::detail::thrust_impl;
  using gradcomp::detail::sum_block;
  using System = typename Backend::system;
  const Backend b{};
  // Empty, one-block, two-level and three-level tensors, interleaved.
  const std::vector<std::size_t> sizes = {33, 0, sum_block + 1, 1, sum_block * sum_block + 5 * sum_block + 3,
                                          sum_block, 33 * sum_block + 7, 2, sum_block * sum_block + 1};
  const impl::segmented_reduction<System> reduction(
      gradcomp::span<const std::size_t>(sizes.data(), sizes.size()));
  CHECK(reduction.levels() == 3);
  impl::system_buffer<double, System> results(sizes.size());
  reduction.issue(b.stream, tensor_leaf{}, gradcomp::detail::sum_merge{}, results.view().data());
  std::vector<double> got(sizes.size());
  impl::copy_bytes_to_host<System>(b.stream, results.view().data(), got.data(), sizes.size() * sizeof(double));
  impl::execution<System>::wait(b.stream);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    CAPTURE(t);
    CAPTURE(sizes[t]);
    const auto term = [t](std::size_t i) { return tensor_leaf{}(static_cast<std::uint32_t>(t), i); };
    const double want = reference::sum_of(sizes[t], term);
    CHECK(std::memcmp(&got[t], &want, sizeof want) == 0);
  }
}

TEST_CASE_TEMPLATE("thrust: the ordered sum is the definition's, from one element to three levels", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  namespace reference = gradcomp_test::ordered_sum_reference;
  using gradcomp::detail::sum_block;
  const Backend b{};
  for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(33), sum_block, sum_block + 1,
                              33 * sum_block + 7, sum_block * sum_block, sum_block * sum_block + 1,
                              sum_block * sum_block + 5 * sum_block + 3}) {
    CAPTURE(n);
    const double got = ordered_sum_on(b, n), want = reference::sum_of(n, reference::wide_leaf{});
    CHECK(std::memcmp(&got, &want, sizeof got) == 0);
  }
}
