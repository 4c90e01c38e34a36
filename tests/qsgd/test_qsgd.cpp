// QSGD: bitwise against a direct reference of the algorithm (norms, every draw, every level) for
// both norms, values on their levels, unbiasedness and the variance (the analytic one and the
// paper's bound) by Monte Carlo with tolerances from the variance, the same message for any thread
// count, refusals that change nothing, tensors sent whole, the wire message in either form into
// the common aggregator, snapshots, and bad configurations.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include "support/quantiser_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace gradcomp;
using gradcomp_test::same_bits;
using gradcomp_test::tensor_name;
using gradcomp_test::views;

static_assert(is_compressor_v<qsgd_compressor<float>>, "QSGD has the common interface");
static_assert(is_compressor_v<qsgd_compressor<double>>, "QSGD has the common interface");

namespace {

const std::vector<std::vector<std::size_t>> kShapes = {{40, 30}, {257}, {3, 3, 5}};

// Normal gradients with an outlier, a zero and an all-zero stretch.
template <class T>
std::vector<std::vector<T>> gradients(std::size_t step) {
  std::vector<std::vector<T>> g;
  std::mt19937_64 rng(step + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const auto& shape : kShapes) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<T> v(n);
    for (auto& x : v) x = static_cast<T>(normal(rng) * (1.0 + static_cast<double>(step % 3)));
    for (std::size_t i = n / 2; i < n / 2 + std::min<std::size_t>(n / 4, 70); ++i) v[i] = T(0);
    v[step % n] = T(0);
    v[(step * 7 + 3) % n] = static_cast<T>(40.0);
    g.push_back(std::move(v));
  }
  return g;
}

template <class T>
qsgd_compressor<T> make(qsgd_config cfg, std::size_t dense = SIZE_MAX) {
  qsgd_compressor<T> c(cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    c.add_tensor(tensor_name(t), kShapes[t], t == dense ? tensor_mode::dense : tensor_mode::automatic);
  return c;
}

// The documented norm of g[first, last): sqrt of the squares summed in double in element order, or
// the largest magnitude; rounded up to binary32, and a subnormal one up to the smallest normal.
template <class T>
float reference_norm(const std::vector<T>& g, std::size_t first, std::size_t last, qsgd_norm kind) {
  double squares = 0.0, largest = 0.0;
  for (std::size_t i = first; i < last; ++i) {
    const double x = static_cast<double>(g[i]);
    squares += x * x;
    largest = std::max(largest, std::fabs(x));
  }
  const double norm = kind == qsgd_norm::l2 ? std::sqrt(squares) : largest;
  float f = static_cast<float>(norm);
  if (static_cast<double>(f) < norm) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f != 0.0f && f < std::numeric_limits<float>::min() ? std::numeric_limits<float>::min() : f;
}

// The documented message of one tensor: with r = |g_i| / n * s (n its bucket's norm), the level is
// floor(r) + 1 when the draw (Philox keyed by the worker's key, counter (i / 4, tensor, step), word
// i % 4) / 2^32 is below r - floor(r), else floor(r); the value is +-n * (level / s) in binary32.
template <class T>
std::vector<T> reference_message(const qsgd_config& cfg, std::size_t step, std::uint32_t tensor,
                                 const std::vector<T>& g, std::vector<float>& norms) {
  const std::uint64_t key = detail::derive_seed(cfg.seed, cfg.rank, 0x71736764ull);
  std::vector<T> out(g.size());
  norms.clear();
  for (std::size_t first = 0; first < g.size(); first += cfg.bucket) {
    const std::size_t last = std::min(g.size(), first + cfg.bucket);
    const float n = reference_norm(g, first, last, cfg.norm);
    norms.push_back(n);
    for (std::size_t i = first; i < last; ++i) {
      std::uint32_t level = 0;
      if (n > 0.0f) {
        const double r = std::fabs(static_cast<double>(g[i])) / n * cfg.levels;
        level = static_cast<std::uint32_t>(std::floor(r));
        const std::uint32_t draw = detail::element_draw(key, step, tensor, static_cast<std::uint32_t>(i));
        if (static_cast<double>(draw) / 4294967296.0 < r - std::floor(r)) ++level;
      }
      const float magnitude = n * (static_cast<float>(level) / static_cast<float>(cfg.levels));
      out[i] = static_cast<T>(g[i] < T(0) && level != 0 ? -magnitude : magnitude);
    }
  }
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("QSGD: every message is the documented one, bit for bit, for both norms", T, float, double) {
  for (const auto kind : {qsgd_norm::l2, qsgd_norm::maximum}) {
    for (const std::uint32_t bucket : {512u, 64u, 7u}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(bucket);
      qsgd_config cfg;
      cfg.norm = kind;
      cfg.bucket = bucket;
      cfg.levels = bucket == 7 ? 3 : 15;
      cfg.rank = 3;
      auto c = make<T>(cfg);
      for (std::size_t step = 0; step < 4; ++step) {
        const auto g = gradients<T>(step);
        REQUIRE(c.compress(views(g)));
        const auto st = c.stats();
        REQUIRE(st);
        CHECK(st->step == step);
        CHECK(st->kept_elements == st->total_elements);
        for (std::size_t t = 0; t < kShapes.size(); ++t) {
          std::vector<float> norms;
          const auto want = reference_message(cfg, step, static_cast<std::uint32_t>(t), g[t], norms);
          const auto m = c.message(t);
          CHECK(m.coding == wire::value_coding::qsgd);
          CHECK(m.parameters.bucket == bucket);
          CHECK(m.parameters.levels == cfg.levels);
          CHECK(same_bits(m.values, want));
          CHECK(same_bits(c.norms(t), norms));
          // Every value is +-n * l / s for an integer level, its sign g's; with the largest
          // magnitude as the norm, each bucket's largest element is sent as itself (level s).
          for (std::size_t i = 0; i < g[t].size(); ++i) {
            const float n = norms[i / bucket];
            const double level = std::fabs(static_cast<double>(m.values[i])) / n * cfg.levels;
            if (m.values[i] != T(0)) {
              CHECK(std::fabs(level - std::round(level)) < 1e-3);
              CHECK(std::signbit(m.values[i]) == std::signbit(g[t][i]));
            }
            CHECK(std::fabs(static_cast<double>(m.values[i])) <= n);
          }
          if (kind == qsgd_norm::maximum) {
            const std::size_t outlier = (step * 7 + 3) % g[t].size();
            CHECK(m.values[outlier] == T(40));
          }
        }
      }
    }
  }
}

TEST_CASE("QSGD is unbiased, with the variance of its rounding, within the paper's bound") {
  // A fixed gradient of varied magnitudes (and a zero); each step draws afresh (the step keys the
  // draws). Element i, with r = |g_i| / n * s, is sent as +-n/s * (floor(r) or floor(r) + 1): mean
  // g_i, variance (n/s)^2 f (1 - f) with f = r - floor(r). Over M steps the mean lies within 5
  // standard errors of g_i and the sum over all elements catches a small common bias; the mean
  // squared error matches the summed variance within 5 standard errors of its own estimate and
  // never passes min(B / s^2, sqrt(B) / s) ||g||^2. A rounding to the nearest level, or always
  // down, fails all three.
  const std::size_t n = 512, steps = 4000;
  std::vector<float> g(n);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& x : g) x = static_cast<float>(u(rng) * u(rng) * u(rng));
  g[17] = 0.0f;
  g[42] = 1.5f;
  for (const std::uint32_t levels : {1u, 4u}) {
    for (const std::uint32_t bucket : {64u, 512u}) {
      CAPTURE(levels);
      CAPTURE(bucket);
      qsgd_config cfg;
      cfg.levels = levels;
      cfg.bucket = bucket;
      qsgd_compressor<float> c(cfg);
      c.add_tensor("w", {n});
      std::vector<double> mean(n, 0.0);
      std::vector<double> errors(steps, 0.0);
      for (std::size_t k = 0; k < steps; ++k) {
        REQUIRE(c.compress({span<const float>(g.data(), n)}));
        const auto m = c.message(0);
        for (std::size_t i = 0; i < n; ++i) {
          mean[i] += static_cast<double>(m.values[i]) / steps;
          const double e = static_cast<double>(m.values[i]) - g[i];
          errors[k] += e * e;
        }
      }
      double bias = 0.0, mean_variance = 0.0, expected_error = 0.0, norm2 = 0.0;
      const auto norms = c.norms(0);
      for (std::size_t i = 0; i < n; ++i) {
        const double unit = static_cast<double>(norms[i / bucket]) / levels;
        const double r = std::fabs(static_cast<double>(g[i])) / unit, f = r - std::floor(r);
        const double var = unit * unit * f * (1.0 - f);
        CAPTURE(i);
        CHECK(std::fabs(mean[i] - g[i]) <= 5.0 * std::sqrt(var / steps) + 2e-7 * std::fabs(g[i]) + 1e-12);
        bias += mean[i] - g[i];
        mean_variance += var / steps;
        expected_error += var;
        norm2 += static_cast<double>(g[i]) * g[i];
      }
      CHECK(std::fabs(bias) <= 5.0 * std::sqrt(mean_variance) + 1e-5);
      double mse = 0.0, spread = 0.0;
      for (const double e : errors) mse += e / steps;
      for (const double e : errors) spread += (e - mse) * (e - mse) / (steps - 1);
      CHECK(std::fabs(mse - expected_error) <= 5.0 * std::sqrt(spread / steps));
      const double b = bucket, s = levels;
      CHECK(mse <= std::min(b / (s * s), std::sqrt(b) / s) * norm2);
      CHECK(mean[17] == 0.0);
    }
  }
}

TEST_CASE("QSGD: the same message for any thread count; another rank or seed draws otherwise") {
  qsgd_config cfg;
  cfg.bucket = 100;
  auto one = make<float>(cfg);
  cfg.threads = 3;
  auto three = make<float>(cfg);
  cfg.threads = 1;
  cfg.rank = 1;
  auto other = make<float>(cfg);
  for (std::size_t step = 0; step < 3; ++step) {
    const auto g = gradients<float>(step);
    REQUIRE(one.compress(views(g)));
    REQUIRE(three.compress(views(g)));
    REQUIRE(other.compress(views(g)));
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      const auto a = one.message(t).values, b = three.message(t).values, o = other.message(t).values;
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(a.data(), o.data(), a.size() * sizeof(float)) != 0);
    }
  }
}

TEST_CASE("QSGD: a NaN or an infinity, or a norm beyond binary32, refuses the step and changes nothing") {
  qsgd_config cfg;
  auto c = make<float>(cfg);
  auto fresh = make<float>(cfg);
  auto g = gradients<float>(0);
  REQUIRE(c.compress(views(g)));
  REQUIRE(fresh.compress(views(g)));
  const std::vector<float> before(c.message(0).values.begin(), c.message(0).values.end());
  const std::vector<float> norms_before(c.norms(0).begin(), c.norms(0).end());
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto b = gradients<float>(1);
    b[2][5] = bad;
    REQUIRE(c.compress(views(b)));
    CHECK(c.stats().error() == errc::non_finite_input);
    CHECK(c.encode_message({}, span<std::byte>()).error() == errc::non_finite_input);
    CHECK(same_bits(c.message(0).values, before));
    CHECK(same_bits(c.norms(0), norms_before));
  }
  // The Euclidean norm of large floats passes binary32.
  auto big = gradients<float>(1);
  for (std::size_t i = 0; i < 4; ++i) big[1][i] = 3e38f;
  REQUIRE(c.compress(views(big)));
  CHECK(c.stats().error() == errc::state_overflow);
  CHECK(same_bits(c.message(0).values, before));
  CHECK(c.step() == 1);
  // The next accepted step draws as if the refused ones had never been.
  const auto g1 = gradients<float>(1);
  REQUIRE(c.compress(views(g1)));
  REQUIRE(fresh.compress(views(g1)));
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    CHECK(same_bits(c.message(t).values,
                    std::vector<float>(fresh.message(t).values.begin(), fresh.message(t).values.end())));
  // With the largest magnitude as the norm, large floats are fine; doubles beyond binary32 are not.
  qsgd_config mc;
  mc.norm = qsgd_norm::maximum;
  auto m = make<float>(mc);
  REQUIRE(m.compress(views(big)));
  CHECK(m.stats());
  qsgd_compressor<double> d(mc);
  d.add_tensor("w", {4});
  const std::vector<double> huge = {1e300, 0, 0, 0};
  REQUIRE(d.compress({span<const double>(huge.data(), huge.size())}));
  CHECK(d.stats().error() == errc::state_overflow);
  CHECK(d.compress({span<const double>(huge.data(), 3)}).error() == errc::size_mismatch);
}

TEST_CASE("QSGD: the wire message takes the shorter form, decodes to the message, and sums in the aggregator") {
  for (const std::uint32_t levels : {2u, 255u}) {
    CAPTURE(levels);
    qsgd_config cfg;
    cfg.momentum = 0.5;
    cfg.levels = levels;
    cfg.bucket = 128;
    auto a = make<float>(cfg, 1);
    cfg.rank = 1;
    auto b = make<float>(cfg, 1);
    const auto ga = gradients<float>(4), gb = gradients<float>(5);
    REQUIRE(a.compress(views(ga)));
    REQUIRE(b.compress(views(gb)));
    CHECK(a.message(1).coding == wire::value_coding::unspecified);
    CHECK(same_bits(a.message(1).values, ga[1]));
    CHECK(a.norms(1).empty());
    const auto r = a.receiver();
    CHECK(r.momentum == 0.5);
    for (const auto& t : r.tensors) CHECK((t.dense && t.momentum));
    for (const bool device : {false, true}) {
      CAPTURE(device);
      wire::encode_options opt;
      opt.checksum = true;
      opt.device_readable = device;
      std::vector<std::byte> ma(a.max_message_bytes(opt)), mb(b.max_message_bytes(opt));
      const auto na = a.encode_message(opt, span<std::byte>(ma.data(), ma.size()));
      const auto nb = b.encode_message(opt, span<std::byte>(mb.data(), mb.size()));
      REQUIRE(na);
      REQUIRE(nb);
      // The fixed form is the bound; few levels (mostly 0 and 1) take the Elias-gamma form.
      std::size_t fixed = wire::message_header_bytes + wire::checksum_bytes;
      for (std::size_t t = 0; t < kShapes.size(); ++t) {
        const std::size_t numel = a.info(t).numel, w = 1 + (levels == 2 ? 2 : 8);
        const std::size_t quantised = 12 + 4 * ((numel + 127) / 128) + (numel * w + 7) / 8;
        fixed += wire::section_header_bytes + (t == 1 ? 4 * numel : quantised);
      }
      CHECK(ma.size() == fixed);
      CHECK(*na <= fixed);
      if (device) CHECK(*na == fixed);
      if (!device && levels == 2) CHECK(*na < fixed);
      const auto decoded = wire::decode<float>(span<const std::byte>(ma.data(), *na));
      REQUIRE(decoded.size() == kShapes.size());
      for (std::size_t t = 0; t < kShapes.size(); ++t) CHECK(same_bits(a.message(t).values, decoded[t].values));
      // The aggregator (no momentum here, to read the average itself) sums what was sent.
      auto layout = a.receiver();
      layout.momentum = 0.0;
      aggregator<float> agg(layout);
      agg.begin();
      REQUIRE(agg.add(span<const std::byte>(ma.data(), *na)));
      REQUIRE(agg.add(span<const std::byte>(mb.data(), *nb)));
      REQUIRE(agg.finish(2));
      for (std::size_t t = 0; t < kShapes.size(); ++t) {
        const auto x = a.message(t).values, y = b.message(t).values, u = agg.update(t);
        for (std::size_t i = 0; i < u.size(); ++i) REQUIRE(u[i] == (x[i] + y[i]) * 0.5f);
      }
    }
  }
}

TEST_CASE("QSGD: a bucket of subnormal gradients has the smallest normal norm, and its message encodes") {
  for (const auto kind : {qsgd_norm::l2, qsgd_norm::maximum}) {
    qsgd_config cfg;
    cfg.norm = kind;
    cfg.bucket = 4;
    qsgd_compressor<float> c(cfg);
    c.add_tensor("w", {8});
    const std::vector<float> g = {1e-40f, -3e-39f, 0.0f, 2e-45f, 1.0f, 0.5f, 0.0f, 0.0f};
    for (int step = 0; step < 20; ++step) {
      REQUIRE(c.compress({span<const float>(g.data(), g.size())}));
      REQUIRE(c.stats());
      CHECK(c.norms(0)[0] == std::numeric_limits<float>::min());
      std::vector<std::byte> msg(c.max_message_bytes());
      const auto n = c.encode_message({}, span<std::byte>(msg.data(), msg.size()));
      REQUIRE(n);
      CHECK(same_bits(c.message(0).values, wire::decode<float>(span<const std::byte>(msg.data(), *n))[0].values));
    }
  }
}

TEST_CASE("QSGD: a zero gradient is sent as zeros with zero norms") {
  qsgd_compressor<float> c(qsgd_config{});
  c.add_tensor("w", {1000});
  c.add_tensor("empty", {0});
  const std::vector<float> z(1000, 0.0f), none;
  REQUIRE(c.compress({span<const float>(z.data(), z.size()), span<const float>(none.data(), 0)}));
  REQUIRE(c.stats());
  CHECK(same_bits(c.message(0).values, z));
  CHECK(same_bits(c.norms(0), std::vector<float>{0.0f, 0.0f}));
  CHECK(c.norms(1).empty());
  std::vector<std::byte> msg(c.max_message_bytes());
  REQUIRE(c.encode_message({}, span<std::byte>(msg.data(), msg.size())));
}

TEST_CASE("QSGD: bad configurations are refused") {
  auto refused = [](qsgd_config cfg) {
    try {
      qsgd_compressor<float> c(cfg);
      return false;
    } catch (const error& e) {
      return e.code() == errc::invalid_argument;
    }
  };
  qsgd_config cfg;
  cfg.levels = 0;
  CHECK(refused(cfg));
  cfg.levels = 65536;
  CHECK(refused(cfg));
  cfg.levels = 65535;
  CHECK(!refused(cfg));
  cfg = qsgd_config{};
  cfg.bucket = 0;
  CHECK(refused(cfg));
  cfg = qsgd_config{};
  cfg.norm = static_cast<qsgd_norm>(7);
  CHECK(refused(cfg));
  cfg = qsgd_config{};
  cfg.momentum = 1.0;
  CHECK(refused(cfg));
  cfg = qsgd_config{};
  cfg.threads = 0;
  CHECK(refused(cfg));
  cfg = qsgd_config{};
  cfg.momentum_form = momentum_kind::none;
  CHECK(refused(cfg));
  CHECK(!refused(qsgd_config{}));
  // A gradient whose length is not the registered one.
  auto c = make<float>(qsgd_config{});
  auto g = gradients<float>(0);
  g[1].pop_back();
  CHECK(c.compress(views(g)).error() == errc::size_mismatch);
  g.pop_back();
  CHECK(c.compress(views(g)).error() == errc::wrong_tensor_count);
}

TEST_CASE("QSGD: a snapshot holds the step counter and seed; restored, the run continues bit for bit") {
  terngrad_compressor<float> other{terngrad_config{}};
  for (std::size_t t = 0; t < kShapes.size(); ++t) other.add_tensor(tensor_name(t), kShapes[t]);
  gradcomp_test::check_seeded_snapshot([](const qsgd_config& cfg) { return make<float>(cfg); }, qsgd_config{},
                                       gradients<float>, other);
}
