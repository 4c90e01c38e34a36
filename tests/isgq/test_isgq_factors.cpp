// The factor quantisers of ISGQ (isgq/factors.hpp): the dithered quantiser's error bound,
// exact zeros and an unbiased product E[X^^T Delta^] = X^T Delta (Monte Carlo, with rounding to
// the nearest level shown biased by the same test); the minimum-MSE refit never increasing the product's
// error over alternating iterations, and each refit a least-squares optimum.
#include <gradcomp/isgq/factors.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "isgq/factors.hpp"

using namespace gradcomp::detail;
using gradcomp_test::factor;
using gradcomp_test::widened;

namespace {

// The library's product of the factors (isgq_add_product), in binary64.
template <class U>
std::vector<double> library_product(const std::vector<U>& x, const std::vector<U>& d, std::size_t batch, std::size_t n_in,
                            std::size_t n_out) {
  std::vector<double> g(n_in * n_out, 0.0);
  isgq_add_product(x.data(), d.data(), batch, n_in, n_out, g.data());
  return g;
}

isgq_dithered_factor quantised(const std::vector<float>& w, std::size_t bucket, std::uint32_t s, std::uint64_t key,
                               std::uint64_t step, std::uint32_t stream, std::uint32_t factor) {
  isgq_dithered_factor f;
  REQUIRE(isgq_dither_quantise(w.data(), w.size(), bucket, s, key, step, stream, factor, f));
  return f;
}

}  // namespace

TEST_CASE("ISGQ dithered factors: codes in [-s, s], error within half a step, exact zeros, the same on rebuild") {
  const auto w = factor(8, 50, 1, true);
  for (const std::uint32_t s : {1u, 3u, 7u}) {
    CAPTURE(s);
    const auto q = quantised(w, 64, s, 99, 5, 2, 0);
    REQUIRE(q.scales.size() == (w.size() + 63) / 64);
    const auto r = isgq_dither_rebuild(q, 64, s, 99, 5, 2, 0);
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0.0f) {
        ++zeros;
        CHECK(q.codes[i] == 0);
        CHECK(r[i] == 0.0f);
        continue;
      }
      REQUIRE(q.codes[i] >= 1);
      REQUIRE(q.codes[i] <= 2 * s + 1);
      const double step = q.scales[i / 64];
      REQUIRE(std::fabs(static_cast<double>(r[i]) - w[i]) <= 0.5 * step * (1 + 1e-6));
      // The scale bounds the bucket: |w| / scale <= s.
      REQUIRE(std::fabs(w[i]) <= step * s);
    }
    CHECK(zeros > 20);
    // Another step draws other dithers: other codes somewhere.
    const auto other = quantised(w, 64, s, 99, 6, 2, 0);
    CHECK(other.codes != q.codes);
  }
}

TEST_CASE("ISGQ dithered factors: X^^T Delta^ is an unbiased estimate of X^T Delta; nearest rounding is not") {
  const std::size_t batch = 4, n_in = 6, n_out = 5, runs = 20000;
  const auto x = factor(batch, n_in, 3, true), d = factor(batch, n_out, 4, false);
  const auto exact = library_product(x, d, batch, n_in, n_out);
  std::vector<double> sum(exact.size(), 0.0), squares(exact.size(), 0.0);
  const std::uint32_t s = 1;  // the coarsest levels: the largest bias a wrong rebuild could show
  for (std::size_t k = 0; k < runs; ++k) {
    const auto qx = quantised(x, 8, s, 7, k, 0, 0);
    const auto qd = quantised(d, 8, s, 7, k, 0, 1);
    const auto g = library_product(isgq_dither_rebuild(qx, 8, s, 7, k, 0, 0), isgq_dither_rebuild(qd, 8, s, 7, k, 0, 1),
                           batch, n_in, n_out);
    for (std::size_t e = 0; e < g.size(); ++e) {
      sum[e] += g[e];
      squares[e] += g[e] * g[e];
    }
  }
  // Plain rounding to the nearest level (the same scales, no dither) is deterministic and biased.
  const auto qx = quantised(x, 8, s, 7, 0, 0, 0);
  const auto qd = quantised(d, 8, s, 7, 0, 0, 1);
  std::vector<float> px(x.size()), pd(d.size());
  for (std::size_t i = 0; i < x.size(); ++i) px[i] = qx.scales[i / 8] * std::nearbyint(x[i] / qx.scales[i / 8]);
  for (std::size_t i = 0; i < d.size(); ++i) pd[i] = qd.scales[i / 8] * std::nearbyint(d[i] / qd.scales[i / 8]);
  const auto plain = library_product(px, pd, batch, n_in, n_out);
  std::size_t plain_off = 0;
  for (std::size_t e = 0; e < exact.size(); ++e) {
    CAPTURE(e);
    const double mean = sum[e] / runs;
    const double var = squares[e] / runs - mean * mean;
    const double se = std::sqrt(std::max(var, 0.0) / runs);
    CHECK(std::fabs(mean - exact[e]) <= 5.0 * se + 1e-9);
    if (std::fabs(plain[e] - exact[e]) > 5.0 * se + 1e-9) ++plain_off;
  }
  CHECK(plain_off > exact.size() / 4);
}

TEST_CASE("ISGQ minimum-MSE factors: the product's error never increases over alternating refits") {
  const std::size_t batch = 8, n_in = 40, n_out = 12;
  const auto x = factor(batch, n_in, 5, true), d = factor(batch, n_out, 6, false);
  const auto xd = widened(x), dd = widened(d);
  for (const std::uint32_t levels : {2u, 4u, 8u}) {
    CAPTURE(levels);
    auto fx = isgq_assign_levels(x.data(), x.size(), levels);
    auto fd = isgq_assign_levels(d.data(), d.size(), levels);
    auto error = [&] {
      return isgq_product_error(isgq_level_values(fx), isgq_level_values(fd), xd, dd, batch, n_in, n_out);
    };
    const double first = error();
    double last = first;
    for (int it = 0; it < 10; ++it) {
      CAPTURE(it);
      isgq_refit(fx, x.data(), batch, n_in, isgq_level_values(fd), dd, n_out);
      const double after_x = error();
      CHECK(after_x <= last * (1 + 1e-12) + 1e-12);
      isgq_refit(fd, d.data(), batch, n_out, isgq_level_values(fx), xd, n_in);
      const double after_d = error();
      CHECK(after_d <= after_x * (1 + 1e-12) + 1e-12);
      last = after_d;
    }
    CHECK(last < first);
    // Exact zeros stay exact.
    const auto vx = isgq_level_values(fx);
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i] == 0.0f) CHECK(vx[i] == 0.0);
    // The last refit is a least-squares optimum: moving any level's value makes the error larger.
    isgq_refit(fx, x.data(), batch, n_in, isgq_level_values(fd), dd, n_out);
    const double best = error();
    for (std::size_t l = 0; l < fx.value.size(); ++l)
      for (const double delta : {-1e-3, 1e-3}) {
        auto moved = fx;
        moved.value[l] += delta;
        CHECK(isgq_product_error(isgq_level_values(moved), isgq_level_values(fd), xd, dd, batch, n_in, n_out) >= best);
      }
  }
}

TEST_CASE("ISGQ: the Gram-matrix error equals the error of the products written out") {
  const std::size_t batch = 5, n_in = 7, n_out = 3;
  const auto a = factor(batch, n_in, 11, false), b = factor(batch, n_out, 12, false);
  const auto c = factor(batch, n_in, 13, true), d = factor(batch, n_out, 14, false);
  const auto ab = library_product(a, b, batch, n_in, n_out), cd = library_product(c, d, batch, n_in, n_out);
  double direct = 0.0;
  for (std::size_t e = 0; e < ab.size(); ++e) direct += (ab[e] - cd[e]) * (ab[e] - cd[e]);
  CHECK(isgq_product_error(widened(a), widened(b), widened(c), widened(d), batch, n_in, n_out) ==
        doctest::Approx(direct).epsilon(1e-12));
}
