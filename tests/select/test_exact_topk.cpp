#include <gradcomp/select/exact_topk.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/inputs.hpp"

using gradcomp::cpu_backend;
using gradcomp::errc;
using gradcomp::span;
using namespace gradcomp_test;

namespace {

template <class T>
gradcomp::result<std::size_t> run(const std::vector<T>& v, std::size_t k,
                                  std::vector<std::uint32_t>& out) {
  out.assign(k, 0xdeadbeefu);
  return gradcomp::exact_topk(cpu_backend{}, span<const T>(v.data(), v.size()), k,
                              span<std::uint32_t>(out.data(), out.size()));
}

}  // namespace

TEST_CASE_TEMPLATE("exact_topk matches a brute-force sort on random inputs with ties", T, float,
                   double) {
  const std::size_t sizes[] = {1, 2, 7, 64, 1000, 4099, 100003};
  std::uint64_t seed = 1;
  for (dist d : {dist::small_integers, dist::gaussian, dist::student_t, dist::log_normal}) {
    for (std::size_t n : sizes) {
      const auto v = random_vector<T>(n, d, ++seed);
      for (std::size_t k : {std::size_t(0), std::size_t(1), n / 1000, n / 100, n / 3, n - 1, n}) {
        CAPTURE(name(d));
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(seed);
        std::vector<std::uint32_t> out;
        const auto r = run(v, k, out);
        REQUIRE(r);
        REQUIRE(*r == k);
        CHECK(out == brute_force_topk(v, k));
      }
    }
  }
}

TEST_CASE("exact_topk breaks ties by lower index and treats -0 and +0 as equal") {
  const std::vector<float> all_equal(100, -2.5f);
  std::vector<std::uint32_t> out;
  REQUIRE(run(all_equal, 10, out));
  for (std::uint32_t i = 0; i < 10; ++i) CHECK(out[i] == i);

  const std::vector<float> zeros = {0.0f, -0.0f, 0.0f, -0.0f};
  REQUIRE(run(zeros, 2, out));
  CHECK(out == std::vector<std::uint32_t>{0, 1});

  const std::vector<float> v = {1.0f, -3.0f, 3.0f, 2.0f, -3.0f};
  REQUIRE(run(v, 2, out));
  CHECK(out == std::vector<std::uint32_t>{1, 2});
}

TEST_CASE("exact_topk orders infinities and denormals by magnitude") {
  const float inf = std::numeric_limits<float>::infinity();
  const float den = std::numeric_limits<float>::denorm_min();
  const std::vector<float> v = {den, 0.0f, -inf, 1e-30f, 2 * den, inf, -1e38f};
  std::vector<std::uint32_t> out;
  REQUIRE(run(v, 3, out));
  CHECK(out == std::vector<std::uint32_t>{2, 5, 6});
  REQUIRE(run(v, 6, out));
  CHECK(out == std::vector<std::uint32_t>{0, 2, 3, 4, 5, 6});
}

TEST_CASE("exact_topk rejects NaN and bad arguments") {
  std::vector<float> v = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f};
  std::vector<std::uint32_t> out;
  CHECK(run(v, 2, out).error() == errc::nan_input);
  CHECK(run(v, 4, out).error() == errc::nan_input);
  v[2] = -std::numeric_limits<float>::signaling_NaN();
  CHECK(run(v, 1, out).error() == errc::nan_input);

  v[2] = 0.0f;
  CHECK(run(v, 5, out).error() == errc::k_exceeds_n);
  std::vector<std::uint32_t> small(1);
  const auto r = gradcomp::exact_topk(cpu_backend{}, span<const float>(v.data(), v.size()), 2,
                                      span<std::uint32_t>(small.data(), small.size()));
  CHECK(r.error() == errc::output_too_small);
}

TEST_CASE("exact_topk on empty input and k = 0") {
  const std::vector<double> empty;
  std::vector<std::uint32_t> out;
  auto r = run(empty, 0, out);
  REQUIRE(r);
  CHECK(*r == 0);
  CHECK(run(empty, 1, out).error() == errc::k_exceeds_n);
  const std::vector<double> v = {std::numeric_limits<double>::quiet_NaN()};
  r = run(v, 0, out);  // k = 0 reads nothing
  REQUIRE(r);
  CHECK(*r == 0);
}

TEST_CASE("exact_topk convenience overload throws gradcomp::error") {
  const std::vector<float> v = {3.0f, -1.0f, 2.0f};
  CHECK(gradcomp::exact_topk(v, 2) == std::vector<std::uint32_t>{0, 2});
  CHECK_THROWS_AS(gradcomp::exact_topk(v, 4), gradcomp::error);
  try {
    (void)gradcomp::exact_topk(v, 4);
  } catch (const gradcomp::error& e) {
    CHECK(e.code() == errc::k_exceeds_n);
  }
}

// Large inputs take the sample-guided path (a cut from a strided sample, one filter pass, radix
// select over the candidates); these inputs make the sample mislead it in every way, and the
// result must still be the exact top-k of the brute force.
TEST_CASE_TEMPLATE("exact_topk on large inputs whose sample misleads the cut", T, float, double) {
  const std::size_t n = std::size_t(1) << 17;
  const std::size_t stride = n / 8192;  // the sampling stride of the kernel (16 here)
  std::vector<std::uint32_t> out;
  auto check = [&](const std::vector<T>& v, std::size_t k) {
    CAPTURE(k);
    const auto r = run(v, k, out);
    REQUIRE(r);
    REQUIRE(*r == k);
    CHECK(out == brute_force_topk(v, k));
  };
  SUBCASE("all equal: everything passes the cut") {
    check(std::vector<T>(n, T(0.5)), 100);
  }
  SUBCASE("mostly zeros: the cut is zero") {
    std::vector<T> v(n, T(0));
    for (std::size_t i = 3; i < n; i += 997) v[i] = T(1) + T(i % 7);
    check(v, 50);   // fewer non-zeros than k: zeros fill up by index
    check(v, 500);
  }
  SUBCASE("the sampled positions hold the largest values: fewer than k pass") {
    auto v = random_vector<T>(n, dist::gaussian, 77);
    for (std::size_t i = stride / 2, j = 0; i < n; i += stride, ++j) v[i] = T(1000) + T(j);
    check(v, n / 16);
    check(v, 3000);
  }
  SUBCASE("the largest values lie between the sampled positions") {
    auto v = random_vector<T>(n, dist::student_t, 78);
    for (std::size_t i = stride / 2 + 1; i < n; i += 3 * stride) v[i] = T(50) + T(i % 11);
    check(v, 100);
    check(v, 4000);
  }
  SUBCASE("a NaN off the sampled positions is still found") {
    auto v = random_vector<T>(n, dist::gaussian, 79);
    v[stride / 2 + 5] = std::numeric_limits<T>::quiet_NaN();
    out.assign(100, 0);
    const auto r = run(v, 100, out);
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::nan_input);
  }
}
