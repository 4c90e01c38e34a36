#include <gradcomp/select/threshold.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/inputs.hpp"

using gradcomp::cpu_backend;
using gradcomp::errc;
using gradcomp::span;
using namespace gradcomp_test;

TEST_CASE_TEMPLATE("threshold_select keeps exactly the elements with |v| >= t", T, float, double) {
  std::uint64_t seed = 100;
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(33), std::size_t(50000)}) {
    for (dist d : {dist::gaussian, dist::small_integers}) {
      const auto v = random_vector<T>(n, d, ++seed);
      for (T t : {T(0), T(0.5), T(1), T(2), T(4), std::numeric_limits<T>::infinity()}) {
        CAPTURE(n);
        CAPTURE(seed);
        CAPTURE(t);
        std::vector<std::uint32_t> expected;
        for (std::size_t i = 0; i < n; ++i)
          if (std::fabs(v[i]) >= t) expected.push_back(static_cast<std::uint32_t>(i));
        std::vector<std::uint32_t> out(n);
        std::size_t total = 0;
        const auto r = gradcomp::threshold_select(cpu_backend{}, span<const T>(v.data(), n), t,
                                                  span<std::uint32_t>(out.data(), n), &total);
        REQUIRE(r);
        CHECK(*r == expected.size());
        CHECK(total == expected.size());
        out.resize(*r);
        CHECK(out == expected);
      }
    }
  }
}

TEST_CASE("threshold_select reports the full count when the output is too small") {
  const std::vector<float> v = {5, -1, 7, 0, -9, 2};
  std::vector<std::uint32_t> out(2);
  std::size_t total = 0;
  const auto r = gradcomp::threshold_select(cpu_backend{}, span<const float>(v.data(), v.size()),
                                            2.0f, span<std::uint32_t>(out.data(), out.size()),
                                            &total);
  CHECK(r.error() == errc::output_too_small);
  CHECK(total == 4);
  CHECK(out == std::vector<std::uint32_t>{0, 2});
}

TEST_CASE("threshold_select rejects NaN thresholds, negative thresholds and NaN input") {
  std::vector<float> v = {1, 2, 3};
  std::vector<std::uint32_t> out(3);
  const span<const float> in(v.data(), v.size());
  const span<std::uint32_t> o(out.data(), out.size());
  CHECK(gradcomp::threshold_select(cpu_backend{}, in, std::nanf(""), o).error() ==
        errc::invalid_argument);
  CHECK(gradcomp::threshold_select(cpu_backend{}, in, -1.0f, o).error() == errc::invalid_argument);
  v[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK(gradcomp::threshold_select(cpu_backend{}, in, 1.0f, o).error() == errc::nan_input);
}
