// The order of the library's floating-point reductions (detail/ordered_sum.hpp) on the Thrust
// backend: a thread per lane of every block, a level of launches per factor of the block size,
// bitwise the host's streaming reduction and the definition, from one element to three levels.
#include <gradcomp/detail/ordered_sum.hpp>
#include <gradcomp/thrust/ordered_sum.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>

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

}  // namespace

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
