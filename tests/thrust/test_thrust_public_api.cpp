// The public building blocks on the portable Thrust backend (threshold_select, l2_norm,
// momentum_correction, mask_momentum, extract_residual, scatter_add, the buffers and copies of
// backend_memory.hpp), on Thrust's OpenMP and C++ systems, and on the CUDA system where nvcc
// compiles this file (thrust/systems.hpp): the CPU backend's results bitwise, its errors, and
// nothing modified where it modifies nothing.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/backend_memory.hpp>
#include <gradcomp/cpu/ops.hpp>
#include <gradcomp/dgc/clipping.hpp>
#include <gradcomp/dgc/momentum.hpp>
#include <gradcomp/dgc/residual_accumulator.hpp>
#include <gradcomp/select/threshold.hpp>
#include <gradcomp/thrust.hpp>

#include "backend/conformance.hpp"
#include "thrust/data.hpp"
#include "thrust/systems.hpp"

namespace {

using gradcomp_test::bitwise_same;
using gradcomp_test::gaussian;

using gradcomp::errc;
using gradcomp::span;

// One threshold_select on the CPU backend and on Backend, with an output of `cap` positions.
template <class Backend, class T>
void check_threshold(const std::vector<T>& v, T threshold, std::size_t cap) {
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend b{};
  std::vector<std::uint32_t> cpu_out(cap, 0xffffffffu);
  std::size_t cpu_total = 0;
  const auto want = gradcomp::threshold_select(gradcomp::cpu_backend{}, span<const T>(v.data(), v.size()), threshold,
                                               span<std::uint32_t>(cpu_out.data(), cap), &cpu_total);
  const auto values = harness::upload(b, v);
  auto out = harness::upload(b, std::vector<std::uint32_t>(cap, 0xffffffffu));
  std::size_t total = 0;
  const auto got = gradcomp::threshold_select(b, gradcomp::readonly(values.view()), threshold, out.view(), &total);
  CAPTURE(cap);
  CHECK(got.error() == want.error());
  if (want) CHECK(*got == *want);
  CHECK(total == cpu_total);
  // Written as the CPU writes it, the error cases included.
  CHECK(harness::template download<std::uint32_t>(b, gradcomp::readonly(out.view())) == cpu_out);
}

}  // namespace

TEST_CASE_TEMPLATE("thrust public API: threshold_select is the CPU's, whatever fits", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  auto v = gaussian<float>(100003, 3);
  for (std::size_t i = 0; i < v.size(); i += 17) v[i] = std::round(v[i] * 2.0f) / 2.0f;  // ties at the thresholds
  for (const float t : {0.0f, 0.5f, 1.5f, 3.0f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(t);
    std::size_t passing = 0;
    for (const float x : v) passing += std::fabs(x) >= t ? 1 : 0;
    for (const std::size_t cap : {passing + 5, passing, passing == 0 ? 0 : passing - 1, passing / 3, std::size_t(0)})
      check_threshold<Backend>(v, t, cap);
  }
  // Infinities pass every threshold; a NaN is refused after the output is written, as on the CPU.
  v[10] = -std::numeric_limits<float>::infinity();
  check_threshold<Backend>(v, std::numeric_limits<float>::infinity(), 4);
  v[500] = std::numeric_limits<float>::quiet_NaN();
  check_threshold<Backend>(v, 1.5f, 100000);
  check_threshold<Backend>(v, 1.5f, 10);
  // Double, and the refusals of the public function before any work.
  check_threshold<Backend>(gaussian<double>(5001, 4), 1.0, 5001);
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend b{};
  const auto values = harness::upload(b, gaussian<float>(10, 5));
  auto out = harness::upload(b, std::vector<std::uint32_t>(10, 0u));
  CHECK(gradcomp::threshold_select(b, gradcomp::readonly(values.view()), -1.0f, out.view()).error() ==
        errc::invalid_argument);
  CHECK(gradcomp::threshold_select(b, gradcomp::readonly(values.view()), std::numeric_limits<float>::quiet_NaN(),
                                   out.view())
            .error() == errc::invalid_argument);
}

TEST_CASE_TEMPLATE("thrust public API: l2_norm is the CPU's, overflow and non-finite included", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend b{};
  const auto norm_of = [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    const auto d = harness::upload(b, v);
    const auto got = gradcomp::l2_norm(b, gradcomp::readonly(d.view()));
    const auto want = gradcomp::l2_norm(gradcomp::cpu_backend{}, span<const T>(v.data(), v.size()));
    CHECK(got.error() == want.error());
    if (want) CHECK(std::memcmp(&*got, &*want, sizeof(double)) == 0);
  };
  norm_of(gaussian<float>(100003, 6));
  norm_of(gaussian<double>(100003, 7));
  auto big = gaussian<double>(4099, 8, 1e200);  // the sum of squares overflows: the scaled path
  norm_of(big);
  big[77] = std::numeric_limits<double>::infinity();
  norm_of(big);
  auto g = gaussian<float>(1000, 9);
  g[999] = std::numeric_limits<float>::quiet_NaN();
  norm_of(g);
  norm_of(std::vector<float>{});
}

TEST_CASE_TEMPLATE("thrust public API: momentum correction, masking and residual extraction are the CPU's",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend b{};
  const gradcomp::cpu_backend cpu{};
  const std::size_t n = 100003;
  using gradcomp::momentum_kind;
  for (const auto kind : {momentum_kind::none, momentum_kind::vanilla, momentum_kind::nesterov}) {
    CAPTURE(static_cast<int>(kind));
    std::vector<float> u = gaussian<float>(n, 10), v = gaussian<float>(n, 11);
    if (kind == momentum_kind::none) u.clear();
    auto du = harness::upload(b, u);
    auto dv = harness::upload(b, v);
    for (int step = 0; step < 3; ++step) {
      const auto g = gaussian<float>(n, 20 + static_cast<std::uint64_t>(step));
      const float scale = step == 1 ? 0.37f : 1.0f;
      const auto dg = harness::upload(b, g);
      REQUIRE(gradcomp::momentum_correction(cpu, kind, 0.9f, scale, span<const float>(g.data(), n),
                                            span<float>(u.data(), u.size()), span<float>(v.data(), n)));
      REQUIRE(gradcomp::momentum_correction(b, kind, 0.9f, scale, gradcomp::readonly(dg.view()), du.view(), dv.view()));
      // Send about one in 50: moved out of v, masked in u.
      std::vector<std::uint32_t> idx;
      for (std::uint32_t i = static_cast<std::uint32_t>(step); i < n; i += 50) idx.push_back(i);
      const auto didx = harness::upload(b, idx);
      std::vector<float> sent(idx.size());
      auto dsent = harness::upload(b, sent);
      const span<const std::uint32_t> positions(idx.data(), idx.size());
      REQUIRE(gradcomp::extract_residual(cpu, span<float>(v.data(), n), positions,
                                         span<float>(sent.data(), sent.size())));
      REQUIRE(gradcomp::extract_residual(b, dv.view(), gradcomp::readonly(didx.view()), dsent.view()));
      CHECK(bitwise_same(harness::template download<float>(b, gradcomp::readonly(dsent.view())), sent));
      if (kind != momentum_kind::none) {
        REQUIRE(gradcomp::mask_momentum(cpu, span<float>(u.data(), n), positions));
        REQUIRE(gradcomp::mask_momentum(b, du.view(), gradcomp::readonly(didx.view())));
      }
    }
    CHECK(bitwise_same(harness::template download<float>(b, gradcomp::readonly(dv.view())), v));
    CHECK(bitwise_same(harness::template download<float>(b, gradcomp::readonly(du.view())), u));
  }
}

TEST_CASE_TEMPLATE("thrust public API: a position out of range is refused, nothing modified", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend b{};
  const std::vector<double> start = gaussian<double>(1000, 12);
  auto v = harness::upload(b, start);
  const auto bad = harness::upload(b, std::vector<std::uint32_t>{3, 999, 1000});
  auto values = harness::upload(b, std::vector<double>(3, 1.0));
  CHECK(gradcomp::extract_residual(b, v.view(), gradcomp::readonly(bad.view()), values.view()).error() ==
        errc::index_out_of_range);
  CHECK(gradcomp::mask_momentum(b, v.view(), gradcomp::readonly(bad.view())).error() == errc::index_out_of_range);
  CHECK(gradcomp::scatter_add(b, gradcomp::readonly(bad.view()), gradcomp::readonly(values.view()), v.view()).error() ==
        errc::index_out_of_range);
  CHECK(bitwise_same(harness::template download<double>(b, gradcomp::readonly(v.view())), start));
  CHECK(harness::template download<double>(b, gradcomp::readonly(values.view())) == std::vector<double>(3, 1.0));
  // In range: the scatter-add is the CPU's.
  const auto good = harness::upload(b, std::vector<std::uint32_t>{3, 500, 999});
  REQUIRE(gradcomp::scatter_add(b, gradcomp::readonly(good.view()), gradcomp::readonly(values.view()), v.view()));
  std::vector<double> want = start;
  for (const std::uint32_t i : {3u, 500u, 999u}) want[i] += 1.0;
  CHECK(bitwise_same(harness::template download<double>(b, gradcomp::readonly(v.view())), want));
}

TEST_CASE_TEMPLATE("thrust public API: buffers and copies through backend_memory.hpp", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  const Backend b{};
  const std::vector<double> host = gaussian<double>(1001, 13);
  auto buffer = gradcomp::allocate_buffer<double>(b, host.size());
  REQUIRE(buffer.size() == host.size());
  REQUIRE(gradcomp::copy_to_backend(b, span<const double>(host.data(), host.size()), buffer.view()));
  std::vector<double> back(host.size(), 0.0);
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(buffer.view()), span<double>(back.data(), back.size())));
  gradcomp::synchronize(b);
  CHECK(bitwise_same(back, host));
  // Lengths that differ are refused; nothing is copied.
  std::vector<double> shorter(host.size() - 1, 7.0);
  CHECK(gradcomp::copy_to_backend(b, span<const double>(shorter.data(), shorter.size()), buffer.view()).error() ==
        errc::size_mismatch);
  CHECK(gradcomp::copy_to_host(b, gradcomp::readonly(buffer.view()), span<double>(shorter.data(), shorter.size()))
            .error() == errc::size_mismatch);
  gradcomp::synchronize(b);
  CHECK(shorter == std::vector<double>(host.size() - 1, 7.0));
  std::fill(back.begin(), back.end(), 0.0);
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(buffer.view()), span<double>(back.data(), back.size())));
  gradcomp::synchronize(b);
  CHECK(bitwise_same(back, host));
}
