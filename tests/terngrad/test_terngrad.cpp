// TernGrad: bitwise against a direct reference of the algorithm (scale, clipping, every draw),
// values in {0, +s, -s}, unbiasedness without clipping by Monte Carlo with a tolerance from the
// variance, the same message for any thread count, scale sharing, refusals that change nothing,
// tensors sent whole, the wire message into the common aggregator, snapshots, and bad
// configurations.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include "support/quantiser_helpers.hpp"

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

static_assert(is_compressor_v<terngrad_compressor<float>>, "TernGrad has the common interface");
static_assert(is_compressor_v<terngrad_compressor<double>>, "TernGrad has the common interface");

namespace {

const std::vector<std::vector<std::size_t>> kShapes = {{40, 30}, {257}, {3, 3, 5}};

// Normal gradients with a few large outliers (which clipping cuts) and zeros.
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
    v[step % n] = T(0);
    v[(step * 7 + 3) % n] = static_cast<T>(40.0);  // an outlier
    g.push_back(std::move(v));
  }
  return g;
}

template <class T>
terngrad_compressor<T> make(terngrad_config cfg, std::size_t dense = SIZE_MAX) {
  terngrad_compressor<T> c(cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    c.add_tensor(tensor_name(t), kShapes[t], t == dense ? tensor_mode::dense : tensor_mode::automatic);
  return c;
}

// The documented scale: max |g|, or with clipping min(max |g|, c * sigma) (sigma from the sums of
// g and g^2 in double, element i in lane i % 32, lanes combined pairwise; no clipping for sigma 0),
// rounded up to binary32.
template <class T>
float reference_scale(const std::vector<T>& g, double c) {
  double sum[32] = {}, squares[32] = {}, largest = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double x = static_cast<double>(g[i]);
    sum[i % 32] += x;
    squares[i % 32] += x * x;
    largest = std::max(largest, std::fabs(x));
  }
  for (std::size_t w = 16; w > 0; w /= 2)
    for (std::size_t j = 0; j < w; ++j) {
      sum[j] += sum[j + w];
      squares[j] += squares[j + w];
    }
  double bound = largest;
  if (c > 0) {
    const double n = static_cast<double>(g.size()), mean = sum[0] / n, var = squares[0] / n - mean * mean;
    const double clip = c * std::sqrt(std::max(var, 0.0));
    if (clip > 0 && clip < bound) bound = clip;
  }
  float f = static_cast<float>(bound);
  if (static_cast<double>(f) < bound) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

// The documented message of one tensor: element i is s * sign(g_i) when its draw (Philox keyed by
// the worker's key, counter (i / 4, tensor, step), word i % 4) / 2^32 is below |g_i| / s, else 0.
template <class T>
std::vector<T> reference_message(const terngrad_config& cfg, std::size_t step, std::uint32_t tensor,
                                 const std::vector<T>& g, float scale) {
  const std::uint64_t key = detail::derive_seed(cfg.seed, cfg.rank, 0x7465726eull);
  std::vector<T> out(g.size());
  const T s = static_cast<T>(scale);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const std::uint32_t draw = detail::element_draw(key, step, tensor, static_cast<std::uint32_t>(i));
    const T p = std::fabs(g[i]) / s;
    const bool send = s > T(0) && static_cast<double>(draw) / 4294967296.0 < static_cast<double>(p);
    out[i] = send ? (g[i] < T(0) ? -s : s) : T(0);
  }
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("TernGrad: every message is the documented one, bit for bit, with and without clipping", T, float,
                   double) {
  for (const double clip : {2.5, 0.0, 1.0}) {
    CAPTURE(clip);
    terngrad_config cfg;
    cfg.clip_sigmas = clip;
    cfg.rank = 3;
    auto c = make<T>(cfg);
    for (std::size_t step = 0; step < 6; ++step) {
      const auto g = gradients<T>(step);
      REQUIRE(c.compress(views(g)));
      const auto st = c.stats();
      REQUIRE(st);
      CHECK(st->step == step);
      CHECK(st->kept_elements == st->total_elements);
      for (std::size_t t = 0; t < kShapes.size(); ++t) {
        const float s = reference_scale(g[t], clip);
        const auto m = c.message(t);
        CHECK(m.coding == wire::value_coding::ternary);
        CHECK(same_bits(m.values, reference_message(cfg, step, static_cast<std::uint32_t>(t), g[t], s)));
        // Every value is 0 or +-s; with clipping the outlier is cut to s and always sent.
        for (const T v : m.values) CHECK((v == T(0) || std::fabs(v) == static_cast<T>(s)));
        const std::size_t outlier = (step * 7 + 3) % g[t].size();
        if (clip > 0) CHECK(m.values[outlier] == static_cast<T>(s));
      }
    }
  }
}

TEST_CASE("TernGrad without clipping is unbiased: the mean message over many steps is g") {
  // A fixed gradient of varied magnitudes (and a zero); each step draws afresh (the step keys the
  // draws). Per element the message has mean g_i and variance s |g_i| - g_i^2, so the mean of M
  // steps lies within 5 standard errors of g_i; so does the sum over all elements, whose standard
  // error is much smaller, which catches a small bias common to all elements.
  terngrad_config cfg;
  cfg.clip_sigmas = 0.0;
  terngrad_compressor<float> c(cfg);
  const std::size_t n = 300, steps = 3000;
  c.add_tensor("w", {n});
  std::vector<float> g(n);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& x : g) x = static_cast<float>(u(rng) * u(rng));
  g[17] = 0.0f;
  g[42] = 1.5f;  // the largest: always sent as itself
  std::vector<double> mean(n, 0.0);
  for (std::size_t k = 0; k < steps; ++k) {
    REQUIRE(c.compress({span<const float>(g.data(), n)}));
    const auto m = c.message(0);
    for (std::size_t i = 0; i < n; ++i) mean[i] += static_cast<double>(m.values[i]) / steps;
  }
  double bias = 0.0, variance = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double gi = g[i], var = 1.5 * std::fabs(gi) - gi * gi;
    CAPTURE(i);
    CHECK(std::fabs(mean[i] - gi) <= 5.0 * std::sqrt(var / steps) + 1e-12);
    bias += mean[i] - gi;
    variance += var / steps;
  }
  CHECK(std::fabs(bias) <= 5.0 * std::sqrt(variance));
  CHECK(mean[17] == 0.0);
  CHECK(mean[42] == doctest::Approx(1.5).epsilon(1e-12));
}

TEST_CASE("TernGrad: the same message for any thread count; another rank or seed draws otherwise") {
  terngrad_config cfg;
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

TEST_CASE("TernGrad: scale sharing sends every worker's tensor with the largest scale") {
  terngrad_config cfg;
  auto a = make<float>(cfg);
  cfg.rank = 1;
  auto b = make<float>(cfg);
  const auto ga = gradients<float>(1), gb = gradients<float>(2);
  const auto sa = a.local_scales(views(ga)), sb = b.local_scales(views(gb));
  REQUIRE(sa);
  REQUIRE(sb);
  CHECK(a.step() == 0);  // local_scales changes nothing
  std::vector<float> shared(kShapes.size());
  for (std::size_t t = 0; t < shared.size(); ++t) {
    CHECK((*sa)[t] == reference_scale(ga[t], cfg.clip_sigmas));
    shared[t] = std::max((*sa)[t], (*sb)[t]);
  }
  const span<const float> sh(shared.data(), shared.size());
  const auto va = views(ga), vb = views(gb);
  REQUIRE(a.compress(span<const span<const float>>(va.data(), va.size()), sh));
  REQUIRE(b.compress(span<const span<const float>>(vb.data(), vb.size()), sh));
  REQUIRE(a.stats());
  REQUIRE(b.stats());
  cfg.rank = 0;
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    CHECK(same_bits(a.message(t).values, reference_message(cfg, 0, static_cast<std::uint32_t>(t), ga[t], shared[t])));
  // A shared scale below this worker's own refuses the step; the step counter stays.
  auto low = shared;
  low[0] = (*sa)[0] * 0.5f;
  REQUIRE(a.compress(span<const span<const float>>(va.data(), va.size()), span<const float>(low.data(), low.size())));
  CHECK(a.stats().error() == errc::invalid_argument);
  low[0] = std::numeric_limits<float>::infinity();
  REQUIRE(a.compress(span<const span<const float>>(va.data(), va.size()), span<const float>(low.data(), low.size())));
  CHECK(a.stats().error() == errc::invalid_argument);
  CHECK(a.step() == 1);
  CHECK(a.compress(span<const span<const float>>(va.data(), va.size()), span<const float>(low.data(), 2)).error() ==
        errc::wrong_tensor_count);
}

TEST_CASE("TernGrad: a NaN or an infinity refuses the step and changes nothing") {
  terngrad_config cfg;
  auto c = make<float>(cfg);
  auto fresh = make<float>(cfg);
  auto g = gradients<float>(0);
  REQUIRE(c.compress(views(g)));
  REQUIRE(fresh.compress(views(g)));
  const std::vector<float> before(c.message(0).values.begin(), c.message(0).values.end());
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto b = gradients<float>(1);
    b[2][5] = bad;
    REQUIRE(c.compress(views(b)));
    CHECK(c.stats().error() == errc::non_finite_input);
    CHECK(c.encode_message({}, span<std::byte>()).error() == errc::non_finite_input);
    CHECK(same_bits(c.message(0).values, before));
    CHECK(c.local_scales(views(b)).error() == errc::non_finite_input);
  }
  CHECK(c.step() == 1);
  // The next accepted step draws as if the refused ones had never been.
  const auto g1 = gradients<float>(1);
  REQUIRE(c.compress(views(g1)));
  REQUIRE(fresh.compress(views(g1)));
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    CHECK(same_bits(c.message(t).values, std::vector<float>(fresh.message(t).values.begin(), fresh.message(t).values.end())));
  // A scale beyond binary32 (double gradients only) refuses the step too.
  terngrad_config dc;
  dc.clip_sigmas = 0.0;
  terngrad_compressor<double> d(dc);
  d.add_tensor("w", {4});
  const std::vector<double> huge = {1e300, 0, 0, 0};
  REQUIRE(d.compress({span<const double>(huge.data(), huge.size())}));
  CHECK(d.stats().error() == errc::state_overflow);
  CHECK(d.compress({span<const double>(huge.data(), 3)}).error() == errc::size_mismatch);
}

TEST_CASE("TernGrad: the wire message is 2 bits per element plus a scale; tensors sent whole carry g") {
  terngrad_config cfg;
  cfg.momentum = 0.5;
  auto a = make<float>(cfg, 1);
  cfg.rank = 1;
  auto b = make<float>(cfg, 1);
  const auto ga = gradients<float>(4), gb = gradients<float>(5);
  REQUIRE(a.compress(views(ga)));
  REQUIRE(b.compress(views(gb)));
  CHECK(a.message(1).coding == wire::value_coding::unspecified);
  CHECK(same_bits(a.message(1).values, ga[1]));
  const auto r = a.receiver();
  CHECK(r.momentum == 0.5);
  for (const auto& t : r.tensors) CHECK((t.dense && t.momentum));
  wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> ma(a.max_message_bytes(opt)), mb(b.max_message_bytes(opt));
  const auto na = a.encode_message(opt, span<std::byte>(ma.data(), ma.size()));
  const auto nb = b.encode_message(opt, span<std::byte>(mb.data(), mb.size()));
  REQUIRE(na);
  REQUIRE(nb);
  std::size_t expected = wire::message_header_bytes + wire::checksum_bytes;
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    expected += wire::section_header_bytes + (t == 1 ? 4 * a.info(t).numel : 4 + (a.info(t).numel + 3) / 4);
  CHECK(*na == expected);
  CHECK(*na == ma.size());
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

TEST_CASE("TernGrad: bad configurations are refused") {
  auto refused = [](terngrad_config cfg) {
    try {
      terngrad_compressor<float> c(cfg);
      return false;
    } catch (const error& e) {
      return e.code() == errc::invalid_argument;
    }
  };
  terngrad_config cfg;
  cfg.clip_sigmas = -1.0;
  CHECK(refused(cfg));
  cfg.clip_sigmas = std::numeric_limits<double>::quiet_NaN();
  CHECK(refused(cfg));
  cfg = terngrad_config{};
  cfg.momentum = 1.0;
  CHECK(refused(cfg));
  cfg = terngrad_config{};
  cfg.threads = 0;
  CHECK(refused(cfg));
  cfg = terngrad_config{};
  cfg.momentum_form = momentum_kind::none;
  CHECK(refused(cfg));
  CHECK(!refused(terngrad_config{}));
}

TEST_CASE("TernGrad: a snapshot holds the step counter and seed; restored, the run continues bit for bit") {
  ef_signsgd_compressor<float> other{ef_signsgd_config{}};
  for (std::size_t t = 0; t < kShapes.size(); ++t) other.add_tensor(tensor_name(t), kShapes[t]);
  gradcomp_test::check_seeded_snapshot([](const terngrad_config& cfg) { return make<float>(cfg); }, terngrad_config{},
                                       gradients<float>, other);
  // The state does not depend on the tensors: a snapshot restores into any TernGrad compressor.
  terngrad_compressor<float> small(terngrad_config{});
  small.add_tensor("w", {5});
  const auto small_snap = save_snapshot(small);
  auto b = make<float>(terngrad_config{});
  REQUIRE(b.compress(views(gradients<float>(0))));
  REQUIRE(restore_snapshot(b, span<const std::byte>(small_snap.data(), small_snap.size())));
  CHECK(b.step() == 0);
}
