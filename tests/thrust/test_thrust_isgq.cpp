// ISGQ on the Thrust backend: the same messages as the CPU backend, bitwise, for the dithered
// quantiser (its kernel, one thread per bucket) and the minimum-MSE fit (on the host, from copies
// of the factors), over several steps; the same refusals, nothing modified.
#include <vector>

#include <doctest/doctest.h>

#include "isgq/isgq_parity.hpp"
#include "thrust/systems.hpp"

using gradcomp_test::isgq_parity::check_isgq_against_cpu;
using gradcomp_test::isgq_parity::payload;

TEST_CASE_TEMPLATE("thrust: ISGQ's messages are bitwise the CPU backend's", Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  check_isgq_against_cpu<float>(Backend{});
  check_isgq_against_cpu<double>(Backend{});
}

TEST_CASE_TEMPLATE("thrust: ISGQ refuses a scale beyond binary32 as the CPU does", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp::isgq_config cfg;
  gradcomp::isgq_compressor<double, Backend> dev(cfg, Backend{});
  dev.add_layer("fc", 3, 2);
  std::vector<double> x = {1e300, 0.5, -0.5, 0.25, 0.0, 1.0}, d = {0.5, -1.0, 0.25, 2.0};
  CHECK(payload(dev, Backend{}, x, d, 2).error() == gradcomp::errc::state_overflow);
  CHECK(dev.layer(0).steps == 0);
  x[0] = 1.0;
  CHECK(payload(dev, Backend{}, x, d, 2));
  CHECK(dev.layer(0).steps == 1);
}
