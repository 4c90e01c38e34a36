// A method outside the library (tests/extension/randk.hpp: random-k with error feedback) through
// every generic layer, with no library header edited for it: its steps conserve p exactly and send
// the counts its positions give, its messages decode and aggregate, its snapshots restore and
// continue bitwise, and the strict backend (memory the host cannot touch) gives the CPU's bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <gradcomp/gradcomp.hpp>
#include <limits>
#include <vector>

#include "backend/conformance.hpp"
#include "backend/strict_backend.hpp"
#include "extension/randk.hpp"

// The strict backend runs the CPU kernels with its memory opened for each call, as for the
// library's quantisers.
template <>
struct gradcomp_test::randk_ops<gradcomp_test::strict_backend>
    : gradcomp_test::strict_quantiser_ops<randk_ops<gradcomp::cpu_backend>> {};

namespace {

using gradcomp::span;
using gradcomp_test::randk_compressor;
using gradcomp_test::randk_config;

std::vector<float> randk_gradient(std::size_t n, std::size_t step) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * static_cast<double>(step))) *
           (i % 7 == 0 ? 3.0f : 0.5f);
  return g;
}

TEST_CASE("random-k (a method outside the library): p conserved exactly, the counts its positions give") {
  randk_config cfg;
  cfg.density = 0.05;
  randk_compressor<float> c(cfg);
  c.add_tensor("w", {37, 29});
  c.add_tensor("b", {29}, gradcomp::tensor_mode::dense);
  const std::size_t n = 37 * 29;
  std::vector<float> e(n, 0.0f);
  for (std::size_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    const auto g = randk_gradient(n, s), b = randk_gradient(29, s + 10);
    const auto at = c.positions(0, s);
    REQUIRE(c.compress({span<const float>(g.data(), n), span<const float>(b.data(), 29)}));
    const auto m = c.message(0);
    REQUIRE(!m.dense);
    CHECK(m.indices.size() == at.count(n));
    CHECK(at.stride == n / static_cast<std::size_t>(std::ceil(0.05 * n)));
    std::vector<float> sent(n, 0.0f);
    for (std::size_t j = 0; j < m.indices.size(); ++j) {
      CHECK(m.indices[j] == at.first + j * at.stride);
      sent[m.indices[j]] = m.values[j];
    }
    const auto e_next = c.error_feedback(0);
    for (std::size_t i = 0; i < n; ++i) {
      const float p = e[i] + g[i];
      REQUIRE(sent[i] + e_next[i] == p);  // one of the two is zero: exactly p
      REQUIRE((sent[i] == 0.0f || e_next[i] == 0.0f));
    }
    e.assign(e_next.begin(), e_next.end());
    const auto mb = c.message(1);
    CHECK(mb.dense);
    CHECK(std::vector<float>(mb.values.begin(), mb.values.end()) == b);
  }
  CHECK(c.step() == 4);
}

TEST_CASE("random-k: a non-finite gradient or p refuses the step and changes nothing") {
  randk_compressor<float> c(randk_config{});
  c.add_tensor("w", {100});
  auto g = randk_gradient(100, 0);
  // A position step 0 does not send: its error keeps p = FLT_MAX, finite.
  const auto at = c.positions(0, 0);
  const std::size_t kept_back = at.first == 0 ? 1 : 0;
  g[kept_back] = std::numeric_limits<float>::max();
  REQUIRE(c.compress({span<const float>(g.data(), g.size())}));
  REQUIRE(c.stats());
  const std::vector<float> e(c.error_feedback(0).begin(), c.error_feedback(0).end());
  REQUIRE(e[kept_back] == std::numeric_limits<float>::max());
  g[kept_back] = 0.0f;
  g[3] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(c.compress({span<const float>(g.data(), g.size())}));
  CHECK(c.stats().error() == gradcomp::errc::non_finite_input);
  g[3] = 0.0f;
  g[kept_back] = std::numeric_limits<float>::max();  // p = FLT_MAX + FLT_MAX overflows
  REQUIRE(c.compress({span<const float>(g.data(), g.size())}));
  CHECK(c.stats().error() == gradcomp::errc::state_overflow);
  CHECK(std::vector<float>(c.error_feedback(0).begin(), c.error_feedback(0).end()) == e);
  CHECK(c.step() == 1);
}

TEST_CASE("random-k: its messages decode and aggregate as what each worker sent") {
  randk_config cfg;
  cfg.density = 0.1;
  randk_compressor<float> a(cfg);
  cfg.seed = 99;
  randk_compressor<float> b(cfg);
  for (auto* c : {&a, &b}) {
    c->add_tensor("w", {40, 25});
    c->add_tensor("b", {25});
  }
  const auto ga = randk_gradient(1000, 1), gb = randk_gradient(1000, 2), ba = randk_gradient(25, 3),
             bb = randk_gradient(25, 4);
  REQUIRE(a.compress({span<const float>(ga.data(), 1000), span<const float>(ba.data(), 25)}));
  REQUIRE(b.compress({span<const float>(gb.data(), 1000), span<const float>(bb.data(), 25)}));
  std::vector<std::byte> ma(a.max_message_bytes()), mb(b.max_message_bytes());
  const auto na = a.encode_message({}, span<std::byte>(ma.data(), ma.size()));
  const auto nb = b.encode_message({}, span<std::byte>(mb.data(), mb.size()));
  REQUIRE(na);
  REQUIRE(nb);
  const auto decoded = gradcomp::wire::decode<float>(span<const std::byte>(ma.data(), *na));
  REQUIRE(decoded.size() == 2);
  CHECK(decoded[0].header.values == gradcomp::wire::value_coding::fp32);
  CHECK(decoded[0].indices.size() == a.positions(0, 0).count(1000));
  auto layout = a.receiver();
  layout.momentum = 0.0;
  gradcomp::aggregator<float> agg(layout);
  agg.begin();
  REQUIRE(agg.add(span<const std::byte>(ma.data(), *na)));
  REQUIRE(agg.add(span<const std::byte>(mb.data(), *nb)));
  REQUIRE(agg.finish(2));
  for (std::size_t t = 0; t < 2; ++t) {
    CAPTURE(t);
    const std::size_t n = t == 0 ? 1000 : 25;
    std::vector<float> x(n, 0.0f), y(n, 0.0f);
    const auto mx = a.message(t), my = b.message(t);
    for (std::size_t j = 0; j < mx.values.size(); ++j) x[mx.dense ? j : mx.indices[j]] = mx.values[j];
    for (std::size_t j = 0; j < my.values.size(); ++j) y[my.dense ? j : my.indices[j]] = my.values[j];
    const auto u = agg.update(t);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(u[i] == (x[i] + y[i]) * 0.5f);
  }
}

TEST_CASE("random-k: snapshots under its own method code restore and continue; other methods refuse them") {
  auto make = [](auto backend) {
    randk_config cfg;
    cfg.density = 0.02;
    return randk_compressor<float, decltype(backend)>(cfg, backend);
  };
  auto make_model = [&](auto backend) {
    auto c = make(backend);
    for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
    return c;
  };
  auto step = [](auto& c, std::size_t s) { return gradcomp_test::compress_and_encode(c, c.backend(), s); };
  gradcomp_test::check_snapshots_across_backends(gradcomp_test::strict_backend{}, make_model, step,
                                                 &gradcomp_test::strict_stats().synchronizations);
  // The state section records the method's code; EF-SignSGD refuses the snapshot, and random-k an
  // EF-SignSGD one.
  auto c = make_model(gradcomp::cpu_backend{});
  (void)step(c, 0);
  const auto saved = gradcomp::save_snapshot(c);
  const auto decoded = gradcomp::wire::decode<double>(span<const std::byte>(saved.data(), saved.size()));
  REQUIRE(!decoded.empty());
  CHECK(decoded[0].values[gradcomp::wire::state_word::selection] ==
        static_cast<double>(gradcomp::wire::snapshot_selection_external + 17));
  auto ef = gradcomp_test::conformance_ef_signsgd(gradcomp::cpu_backend{});
  CHECK(gradcomp::restore_snapshot(ef, span<const std::byte>(saved.data(), saved.size())).error() ==
        gradcomp::errc::config_mismatch);
  const auto ef_saved = gradcomp::save_snapshot(ef);
  CHECK(gradcomp::restore_snapshot(c, span<const std::byte>(ef_saved.data(), ef_saved.size())).error() ==
        gradcomp::errc::config_mismatch);
}

TEST_CASE("random-k on the strict backend: the CPU backend's messages and errors, bitwise, one wait per step") {
  auto make = [](auto backend) {
    randk_config cfg;
    cfg.density = 0.03;
    return randk_compressor<float, decltype(backend)>(cfg, backend);
  };
  gradcomp_test::check_quantiser_against_cpu(gradcomp_test::strict_backend{}, make,
                                             &gradcomp_test::strict_stats().synchronizations, 2);
}

}  // namespace
