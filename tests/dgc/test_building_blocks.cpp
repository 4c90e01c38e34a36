// Tests of the DGC building blocks on their own: momentum correction, masking, error feedback
// extraction, scatter-add and clipping.
#include <gradcomp/dgc/clipping.hpp>
#include <gradcomp/dgc/momentum.hpp>
#include <gradcomp/dgc/residual_accumulator.hpp>
#include <gradcomp/detail/rounded.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/inputs.hpp"

using gradcomp::cpu_backend;
using gradcomp::errc;
using gradcomp::momentum_kind;
using gradcomp::span;
using namespace gradcomp_test;

namespace {
template <class T>
span<T> s(std::vector<T>& v) {
  return span<T>(v.data(), v.size());
}
template <class T>
span<const T> cs(const std::vector<T>& v) {
  return span<const T>(v.data(), v.size());
}
}  // namespace

TEST_CASE_TEMPLATE("momentum_correction computes each form exactly", T, float, double) {
  const auto g = random_vector<T>(1001, dist::gaussian, 21);
  const auto u0 = random_vector<T>(1001, dist::gaussian, 22);
  const auto v0 = random_vector<T>(1001, dist::gaussian, 23);
  const T m = T(0.9), c = T(0.75);
  for (momentum_kind kind : {momentum_kind::none, momentum_kind::vanilla, momentum_kind::nesterov}) {
    CAPTURE(gradcomp::to_string(kind));
    auto u = u0, v = v0, ur = u0, vr = v0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const T cg = gradcomp::detail::rounded(c * g[i]);
      if (kind == momentum_kind::none) {
        vr[i] = vr[i] + cg;
      } else if (kind == momentum_kind::vanilla) {
        ur[i] = gradcomp::detail::rounded(m * ur[i]) + cg;
        vr[i] = vr[i] + ur[i];
      } else {
        ur[i] = gradcomp::detail::rounded(m * (ur[i] + cg));
        vr[i] = vr[i] + ur[i] + cg;
      }
    }
    REQUIRE(gradcomp::momentum_correction(cpu_backend{}, kind, m, c, cs(g), s(u), s(v)));
    CHECK(bitwise_equal(u, ur));
    CHECK(bitwise_equal(v, vr));
  }
  std::vector<T> short_v(10);
  auto u = u0;
  CHECK(gradcomp::momentum_correction(cpu_backend{}, momentum_kind::vanilla, m, c, cs(g), s(u),
                                      s(short_v))
            .error() == errc::size_mismatch);
}

TEST_CASE("extract_residual conserves the accumulator bitwise") {
  auto v = random_vector<float>(5000, dist::log_normal, 31);
  const auto before = v;
  const std::vector<std::uint32_t> idx = {0, 17, 18, 999, 4999};
  std::vector<float> values(idx.size());
  REQUIRE(gradcomp::extract_residual(cpu_backend{}, s(v), cs(idx), s(values)));
  for (std::size_t j = 0; j < idx.size(); ++j) {
    CHECK(values[j] == before[idx[j]]);
    CHECK(v[idx[j]] == 0.0f);
  }
  auto restored = v;
  REQUIRE(gradcomp::scatter_add(cpu_backend{}, cs(idx), cs(values), s(restored)));
  CHECK(bitwise_equal(restored, before));

  const std::vector<std::uint32_t> bad = {3, 5000};
  std::vector<float> two(2);
  const auto snapshot = v;
  CHECK(gradcomp::extract_residual(cpu_backend{}, s(v), cs(bad), s(two)).error() ==
        errc::index_out_of_range);
  CHECK(bitwise_equal(v, snapshot));  // nothing modified
  CHECK(gradcomp::extract_residual(cpu_backend{}, s(v), cs(idx), s(two)).error() ==
        errc::size_mismatch);
}

TEST_CASE("scatter_add sums duplicate indices") {
  std::vector<double> acc(4, 1.0);
  const std::vector<std::uint32_t> idx = {1, 1, 3, 1};
  const std::vector<double> val = {2.0, 3.0, 4.0, 5.0};
  REQUIRE(gradcomp::scatter_add(cpu_backend{}, cs(idx), cs(val), s(acc)));
  CHECK(acc == std::vector<double>{1.0, 11.0, 1.0, 5.0});
  const std::vector<std::uint32_t> bad = {0, 4, 1, 1};
  CHECK(gradcomp::scatter_add(cpu_backend{}, cs(bad), cs(val), s(acc)).error() ==
        errc::index_out_of_range);
  CHECK(acc == std::vector<double>{1.0, 11.0, 1.0, 5.0});
}

TEST_CASE("mask_momentum zeroes exactly the given positions") {
  auto u = random_vector<float>(100, dist::gaussian, 41);
  for (auto& x : u) x += x == 0.0f ? 1.0f : 0.0f;
  const auto before = u;
  const std::vector<std::uint32_t> idx = {2, 50, 99};
  REQUIRE(gradcomp::mask_momentum(cpu_backend{}, s(u), cs(idx)));
  for (std::size_t i = 0; i < u.size(); ++i) {
    const bool masked = i == 2 || i == 50 || i == 99;
    CHECK(u[i] == (masked ? 0.0f : before[i]));
  }
}

TEST_CASE("apply_momentum is the receiver form of the sender's correction") {
  std::vector<float> u = {1.0f, -2.0f}, a = {0.5f, 0.25f};
  REQUIRE(gradcomp::apply_momentum(cpu_backend{}, momentum_kind::vanilla, 0.5f, s(u), s(a)));
  CHECK(u == std::vector<float>{1.0f, -0.75f});
  CHECK(a == u);
  u = {1.0f, -2.0f};
  a = {0.5f, 0.25f};
  REQUIRE(gradcomp::apply_momentum(cpu_backend{}, momentum_kind::nesterov, 0.5f, s(u), s(a)));
  CHECK(u == std::vector<float>{0.75f, -0.875f});
  CHECK(a == std::vector<float>{1.25f, -0.625f});
}

TEST_CASE("l2_norm and the N^(-1/2) clipping rule") {
  const std::vector<float> g = {3.0f, 4.0f};
  auto n = gradcomp::l2_norm(cpu_backend{}, cs(g));
  REQUIRE(n);
  CHECK(*n == 5.0);
  // Finite floats whose squares overflow float still have a finite double norm.
  const std::vector<float> big(4, 3e38f);
  n = gradcomp::l2_norm(cpu_backend{}, cs(big));
  REQUIRE(n);
  CHECK(*n == doctest::Approx(6e38));
  // Doubles whose squares overflow double are rescaled.
  const std::vector<double> huge(4, 1e300);
  auto nd = gradcomp::l2_norm(cpu_backend{}, cs(huge));
  REQUIRE(nd);
  CHECK(*nd == doctest::Approx(2e300));
  const std::vector<float> inf = {1.0f, std::numeric_limits<float>::infinity()};
  CHECK(gradcomp::l2_norm(cpu_backend{}, cs(inf)).error() == errc::non_finite_input);
  const std::vector<float> nan = {std::nanf(""), 1.0f};
  CHECK(gradcomp::l2_norm(cpu_backend{}, cs(nan)).error() == errc::non_finite_input);

  CHECK(gradcomp::local_clip_threshold(2.0, 4) == 1.0);
  CHECK(gradcomp::local_clip_threshold(3.0, 1) == 3.0);
  CHECK(gradcomp::clip_coefficient(5.0, 1.0) == 0.2);
  CHECK(gradcomp::clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(gradcomp::clip_coefficient(5.0, 0.0) == 1.0);  // 0 disables clipping
}
