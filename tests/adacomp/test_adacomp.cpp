// AdaComp (docs/algorithms.md, "AdaComp"): every selection, value, scale and residual against a
// brute-force reference, bit for bit, over many steps (bins with ties, all-zero bins, bins whose
// G is 0 where g is not, a last bin cut short, more bins than a chunk of the scale's sum);
// conservation; any thread count; refusals; tensors sent whole; the wire message and the
// aggregator; registration and bad configurations; snapshots.
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
using gradcomp_test::bytes;
using gradcomp_test::same_bits;
using gradcomp_test::tensor_name;
using gradcomp_test::views;

static_assert(is_compressor_v<adacomp_compressor<float>>, "AdaComp has the common interface");
static_assert(is_compressor_v<adacomp_compressor<double>>, "AdaComp has the common interface");

namespace {

// A convolution kernel (bins of 50, the last one short), a fully connected matrix (bins of 500),
// a bias (sent whole by the default policy) and a flat tensor with bins of 7 (more than one chunk
// of 256 bins). The first test also makes g cancel the residual in places.
const std::vector<std::vector<std::size_t>> kShapes = {{16, 3, 3, 3}, {300, 7}, {40}, {2500, 2}};
const std::vector<std::size_t> kBins = {50, 500, 0, 7};

std::size_t numel_of(const std::vector<std::size_t>& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

// Gaussian gradients with outliers; in places integer values from a small range (ties of |G|
// within a bin, and |H| equal to a bin's maximum) and runs of zeros (all-zero bins once the
// residual there is 0 too).
template <class T>
std::vector<std::vector<T>> gradients(std::size_t step, std::uint64_t worker = 0) {
  std::vector<std::vector<T>> g;
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    std::mt19937_64 rng(7919 * step + 31 * t + 104729 * worker + 11);
    std::normal_distribution<double> normal(0.0, 1.0);
    const std::size_t n = numel_of(kShapes[t]);
    std::vector<T> v(n);
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t zone = (j / 97 + step) % 5;
      if (zone == 0) v[j] = static_cast<T>(static_cast<int>(rng() % 7) - 3);
      else if (zone == 1 && t != 2) v[j] = T(0);
      else v[j] = static_cast<T>(normal(rng));
    }
    for (std::size_t j = step % 13; j < n; j += 311) v[j] *= T(40);
    g.push_back(std::move(v));
  }
  return g;
}

template <class T>
adacomp_compressor<T> make(adacomp_config cfg = {}) {
  adacomp_compressor<T> c(cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    if (t == 3) c.add_tensor(tensor_name(t), kShapes[t], kBins[t], tensor_mode::automatic);
    else c.add_tensor(tensor_name(t), kShapes[t]);
  }
  return c;
}

// The reference step of one tensor: G = r + g, H = G + g, gmax per bin by floating comparison,
// the scale from the bins' maxima summed in double in chunks of 256 bins, then the chunks; sent
// iff G != 0 and |H| >= gmax, as +-scale; r = G - sent.
template <class T>
struct reference_message {
  std::vector<std::uint32_t> indices;
  std::vector<T> values;
  float scale = 0.0f;
};

template <class T>
reference_message<T> reference_step(const std::vector<T>& g, std::vector<T>& r, std::size_t bin) {
  const std::size_t n = g.size(), bins = (n + bin - 1) / bin;
  std::vector<T> G(n), gmax(bins, T(0));
  for (std::size_t i = 0; i < n; ++i) {
    G[i] = static_cast<T>(r[i] + g[i]);
    gmax[i / bin] = std::max(gmax[i / bin], std::fabs(G[i]));
  }
  double total = 0.0;
  for (std::size_t c0 = 0; c0 < bins; c0 += 256) {
    double part = 0.0;
    for (std::size_t b = c0; b < std::min(bins, c0 + 256); ++b) part += static_cast<double>(gmax[b]);
    total += part;
  }
  reference_message<T> m;
  m.scale = bins == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(bins));
  for (std::size_t i = 0; i < n; ++i) {
    const T H = static_cast<T>(G[i] + g[i]);
    if (G[i] != T(0) && std::fabs(H) >= gmax[i / bin]) {
      const T v = G[i] > T(0) ? static_cast<T>(m.scale) : -static_cast<T>(m.scale);
      m.indices.push_back(static_cast<std::uint32_t>(i));
      m.values.push_back(v);
      r[i] = static_cast<T>(G[i] - v);
    } else {
      r[i] = G[i];
    }
  }
  return m;
}

template <class A, class B>
bool same_indices(const A& a, const B& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

TEST_CASE_TEMPLATE("AdaComp: every selection, value and residual is the documented one, bit for bit, over 30 steps", T,
                   float, double) {
  auto c = make<T>();
  CHECK(c.bin(0) == 50);
  CHECK(c.bin(1) == 500);
  CHECK(c.bin(3) == 7);
  CHECK(!c.info(2).compressed);
  std::vector<std::vector<T>> r(kShapes.size());
  for (std::size_t t = 0; t < kShapes.size(); ++t) r[t].assign(numel_of(kShapes[t]), T(0));
  std::size_t ties = 0, zero_bins = 0, cancelled = 0;
  for (std::size_t s = 0; s < 30; ++s) {
    CAPTURE(s);
    auto g = gradients<T>(s);
    // Every third step, g cancels the residual here and there.
    if (s % 3 == 2)
      for (const std::size_t t : {std::size_t(0), std::size_t(1), std::size_t(3)})
        for (std::size_t i = s; i < g[t].size(); i += 37) g[t][i] = -r[t][i];
    // What the inputs exercise: |H| equal to its bin's maximum, bins whose G is all 0, and
    // elements where G is 0 but g is not.
    for (const std::size_t t : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
      const std::size_t bin = c.bin(t), n = g[t].size();
      for (std::size_t b0 = 0; b0 < n; b0 += bin) {
        T gmax = T(0);
        for (std::size_t i = b0; i < std::min(n, b0 + bin); ++i) gmax = std::max(gmax, std::fabs(static_cast<T>(r[t][i] + g[t][i])));
        zero_bins += gmax == T(0) ? 1 : 0;
        for (std::size_t i = b0; i < std::min(n, b0 + bin); ++i) {
          const T G = static_cast<T>(r[t][i] + g[t][i]);
          ties += G != T(0) && std::fabs(static_cast<T>(G + g[t][i])) == gmax ? 1 : 0;
          cancelled += G == T(0) && g[t][i] != T(0) ? 1 : 0;
        }
      }
    }
    REQUIRE(c.compress(views(g)));
    const auto st = c.stats();
    REQUIRE(st);
    std::size_t kept = 0, compressed = 0;
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      CAPTURE(t);
      const auto m = c.message(t);
      if (t == 2) {
        CHECK(m.dense);
        CHECK(same_bits(m.values, g[t]));
        CHECK(c.error_feedback(t).empty());
        continue;
      }
      const auto want = reference_step(g[t], r[t], c.bin(t));
      CHECK(!m.dense);
      CHECK(m.coding == wire::value_coding::scaled_sign);
      CHECK(same_indices(m.indices, want.indices));
      CHECK(same_bits(m.values, want.values));
      CHECK(same_bits(c.error_feedback(t), r[t]));
      kept += want.indices.size();
      compressed += g[t].size();
    }
    CHECK(st->kept_elements == kept);
    CHECK(st->target_elements == compressed);
    CHECK(st->dense_elements == 40);
    CHECK(st->density == doctest::Approx(static_cast<double>(kept) / static_cast<double>(compressed)));
  }
  CHECK(c.step() == 30);
  CHECK(ties > 100);
  CHECK(zero_bins > 5);
  CHECK(cancelled > 0);
}

TEST_CASE("AdaComp: what is not sent stays behind (r + sent == G), and the scale is the mean of the bins' maxima") {
  auto c = make<float>();
  std::vector<std::vector<float>> r(kShapes.size());
  for (std::size_t t = 0; t < kShapes.size(); ++t) r[t].assign(numel_of(kShapes[t]), 0.0f);
  for (std::size_t s = 0; s < 8; ++s) {
    const auto g = gradients<float>(s);
    REQUIRE(c.compress(views(g)));
    for (const std::size_t t : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
      const auto m = c.message(t);
      const auto now = c.error_feedback(t);
      std::vector<float> sent(g[t].size(), 0.0f);
      for (std::size_t j = 0; j < m.indices.size(); ++j) sent[m.indices[j]] = m.values[j];
      long double max_bin = 0.0L, sum_max = 0.0L;
      std::size_t bins = 0;
      for (std::size_t i = 0; i < g[t].size(); ++i) {
        const float G = r[t][i] + g[t][i];
        if (sent[i] == 0.0f) {
          REQUIRE(std::memcmp(&now[i], &G, sizeof(float)) == 0);
        } else {
          // One rounding of G - sent: within half an ulp of the new residual.
          const long double err = static_cast<long double>(now[i]) + sent[i] - G;
          REQUIRE(std::fabs(err) <= std::ldexp(static_cast<long double>(std::fabs(now[i])), -24));
          REQUIRE(std::signbit(sent[i]) == std::signbit(G));
        }
        max_bin = std::max(max_bin, static_cast<long double>(std::fabs(G)));
        if ((i + 1) % c.bin(t) == 0 || i + 1 == g[t].size()) {
          sum_max += max_bin;
          max_bin = 0.0L;
          ++bins;
        }
      }
      // Every value has the scale's magnitude: the mean of the maxima, rounded to binary32.
      const long double mean = sum_max / static_cast<long double>(bins);
      for (const float v : m.values) CHECK(std::fabs(std::fabs(v) - mean) <= mean * 1e-7L);
      r[t].assign(now.begin(), now.end());
    }
  }
}

TEST_CASE("AdaComp: a bin sends its largest |G| when g keeps its direction, nothing when G is all 0") {
  adacomp_compressor<float> c(adacomp_config{});
  c.add_tensor("w", {2, 5}, 5, tensor_mode::compressed);
  // Bin 0: G = g (no residual yet); the largest |G| is 4 (index 2), H = 2g: |H| >= 4 for |g| >= 2.
  // Bin 1: all zero.
  const std::vector<float> g = {1, -2, 4, 0.5f, -1.5f, 0, 0, 0, 0, 0};
  REQUIRE(c.compress({span<const float>(g.data(), g.size())}));
  const auto m = c.message(0);
  CHECK(same_indices(m.indices, std::vector<std::uint32_t>{1, 2}));
  // The scale: (4 + 0) / 2.
  CHECK(same_bits(m.values, std::vector<float>{-2.0f, 2.0f}));
  CHECK(same_bits(c.error_feedback(0), std::vector<float>{1, 0, 2, 0.5f, -1.5f, 0, 0, 0, 0, 0}));
  // Next step: g cancels the residual at indices 0 and 4 (G = 0, |H| = |g|) and opposes it at 2
  // (G = 1, H = 0). Bin 0: G = {0, 0, 1, 0.5, 0}, gmax 1, H = {-1, 0, 0, 0.5, 1.5}: indices 0 and
  // 4 reach gmax but have nothing to send, index 2 holds gmax but g turned: the bin sends nothing.
  // Bin 1: G = {0, 0, 0, 0, 3}, H_9 = 6: sent. Scale (1 + 3) / 2.
  const std::vector<float> h = {-1, 0, -1, 0, 1.5f, 0, 0, 0, 0, 3};
  REQUIRE(c.compress({span<const float>(h.data(), h.size())}));
  const auto n = c.message(0);
  CHECK(same_indices(n.indices, std::vector<std::uint32_t>{9}));
  CHECK(same_bits(n.values, std::vector<float>{2.0f}));
  CHECK(same_bits(c.error_feedback(0), std::vector<float>{0, 0, 1, 0.5f, 0, 0, 0, 0, 0, 1}));
  CHECK(c.stats()->kept_elements == 1);
}

TEST_CASE("AdaComp: the same bits for any thread count, and on every run") {
  adacomp_config one, three;
  three.threads = 3;
  auto a = make<float>(one), b = make<float>(three), again = make<float>(one);
  for (std::size_t s = 0; s < 5; ++s) {
    const auto g = gradients<float>(s);
    REQUIRE(a.compress(views(g)));
    REQUIRE(b.compress(views(g)));
    REQUIRE(again.compress(views(g)));
    std::vector<std::byte> x(a.max_message_bytes()), y(b.max_message_bytes()), z(again.max_message_bytes());
    x.resize(a.encode_message({}, span<std::byte>(x.data(), x.size())).value());
    y.resize(b.encode_message({}, span<std::byte>(y.data(), y.size())).value());
    z.resize(again.encode_message({}, span<std::byte>(z.data(), z.size())).value());
    CHECK(x == y);
    CHECK(x == z);
    for (std::size_t t = 0; t < kShapes.size(); ++t)
      CHECK(same_bits(a.error_feedback(t), std::vector<float>(b.error_feedback(t).begin(), b.error_feedback(t).end())));
  }
}

TEST_CASE("AdaComp: a NaN, an infinity or an overflow refuses the step and changes nothing") {
  auto c = make<float>();
  const auto g = gradients<float>(0);
  REQUIRE(c.compress(views(g)));
  const auto first = c.message(0);
  const std::vector<std::uint32_t> idx(first.indices.begin(), first.indices.end());
  const std::vector<float> sent(first.values.begin(), first.values.end());
  const std::vector<float> residual(c.error_feedback(0).begin(), c.error_feedback(0).end());
  auto unchanged = [&] {
    CHECK(same_indices(c.message(0).indices, idx));
    CHECK(same_bits(c.message(0).values, sent));
    CHECK(same_bits(c.error_feedback(0), residual));
  };
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    for (const std::size_t t : {std::size_t(2), std::size_t(3)}) {  // a tensor sent whole, a compressed one
      auto b = gradients<float>(1);
      b[t][5] = bad;
      REQUIRE(c.compress(views(b)));
      CHECK(c.stats().error() == errc::non_finite_input);
      CHECK(c.encode_message({}, span<std::byte>()).error() == errc::non_finite_input);
      unchanged();
    }
  }
  CHECK(c.step() == 1);
  // r + g beyond binary32: an element left behind (|H| below its bin's maximum) grows past it.
  adacomp_compressor<float> o(adacomp_config{});
  o.add_tensor("w", {4}, 4, tensor_mode::compressed);
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> a = {big, -big * 0.4f, 0, 0};
  REQUIRE(o.compress({span<const float>(a.data(), a.size())}));
  REQUIRE(o.stats());
  const std::vector<float> kept(o.error_feedback(0).begin(), o.error_feedback(0).end());
  CHECK(kept[1] == -big * 0.4f);
  const std::vector<float> push = {0, -big * 0.7f, 0, 0};
  REQUIRE(o.compress({span<const float>(push.data(), push.size())}));
  CHECK(o.stats().error() == errc::state_overflow);
  CHECK(same_bits(o.error_feedback(0), kept));
  CHECK(o.step() == 1);
  // A scale beyond binary32 (double gradients only).
  adacomp_compressor<double> d(adacomp_config{});
  d.add_tensor("w", {4}, 2, tensor_mode::compressed);
  const std::vector<double> huge = {1e300, 1, -1, 0};
  REQUIRE(d.compress({span<const double>(huge.data(), huge.size())}));
  CHECK(d.stats().error() == errc::state_overflow);
  CHECK(d.compress({span<const double>(huge.data(), 3)}).error() == errc::size_mismatch);
  CHECK(d.compress(std::vector<span<const double>>{}).error() == errc::wrong_tensor_count);
}

TEST_CASE("AdaComp: the wire message holds positions and sign bits; decoded and aggregated it is what was sent") {
  adacomp_config cfg;
  cfg.momentum = 0.5;
  auto a = make<float>(cfg), b = make<float>(cfg);
  for (std::size_t s = 0; s < 3; ++s) {
    const auto ga = gradients<float>(s), gb = gradients<float>(s, 1);
    REQUIRE(a.compress(views(ga)));
    REQUIRE(b.compress(views(gb)));
  }
  const auto r = a.receiver();
  CHECK(r.momentum == 0.5);
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    CHECK(r.tensors[t].dense == (t == 2));
    CHECK(r.tensors[t].momentum);
    CHECK(r.tensors[t].max_kept == (t == 2 ? 0 : numel_of(kShapes[t])));
  }
  wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> ma(a.max_message_bytes(opt)), mb(b.max_message_bytes(opt));
  const auto na = a.encode_message(opt, span<std::byte>(ma.data(), ma.size()));
  const auto nb = b.encode_message(opt, span<std::byte>(mb.data(), mb.size()));
  REQUIRE(na);
  REQUIRE(nb);
  const auto decoded = wire::decode<float>(span<const std::byte>(ma.data(), *na));
  std::size_t sign_bytes = 0;
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    CAPTURE(t);
    const auto m = a.message(t);
    CHECK(same_indices(decoded[t].indices, m.indices));
    CHECK(same_bits(span<const float>(decoded[t].values.data(), decoded[t].values.size()),
                    std::vector<float>(m.values.begin(), m.values.end())));
    if (t == 2) continue;
    CHECK(decoded[t].header.values == wire::value_coding::scaled_sign);
    CHECK(decoded[t].header.value_bytes == 4 + (m.values.size() + 7) / 8);
    sign_bytes += decoded[t].header.value_bytes;
  }
  CHECK(sign_bytes > 0);
  // The aggregator (no momentum here, to read the average itself) sums what was sent.
  auto layout = a.receiver();
  layout.momentum = 0.0;
  aggregator<float> agg(layout);
  agg.begin();
  REQUIRE(agg.add(span<const std::byte>(ma.data(), *na)));
  REQUIRE(agg.add(span<const std::byte>(mb.data(), *nb)));
  REQUIRE(agg.finish(2));
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    std::vector<float> x(numel_of(kShapes[t]), 0.0f), y = x;
    const auto mx = a.message(t), my = b.message(t);
    for (std::size_t j = 0; j < mx.values.size(); ++j) x[mx.dense ? j : mx.indices[j]] = mx.values[j];
    for (std::size_t j = 0; j < my.values.size(); ++j) y[my.dense ? j : my.indices[j]] = my.values[j];
    const auto u = agg.update(t);
    for (std::size_t i = 0; i < u.size(); ++i) REQUIRE(u[i] == (x[i] + y[i]) * 0.5f);
  }
}

TEST_CASE("AdaComp: registration picks the bin by layer kind; bad bins and configurations are refused") {
  adacomp_config cfg;
  cfg.conv_bin = 20;
  cfg.fc_bin = 300;
  adacomp_compressor<float> c(cfg);
  CHECK(c.bin(c.add_tensor("conv", {8, 4, 3, 3})) == 20);
  CHECK(c.bin(c.add_tensor("conv1d", {8, 4, 3})) == 20);
  CHECK(c.bin(c.add_tensor("fc", {10, 40})) == 300);
  CHECK(c.bin(c.add_tensor("lstm", {4 * 32, 32})) == 300);
  CHECK(c.bin(c.add_tensor("mine", {10, 40}, 9, tensor_mode::automatic)) == 9);
  CHECK(c.info(c.add_tensor("bias", {40})).compressed == false);
  CHECK(c.info(c.add_tensor("bias2", {40}, 4, tensor_mode::compressed)).compressed);
  CHECK(c.add_tensor("empty", {0, 5}) == 7);
  CHECK_THROWS_AS(c.add_tensor("zero", {4, 4}, 0, tensor_mode::automatic), error);
  CHECK_THROWS_AS(c.add_tensor("fc", {2, 2}), error);
  CHECK(c.num_tensors() == 8);
  std::vector<std::vector<float>> g;
  for (std::size_t t = 0; t < c.num_tensors(); ++t) g.emplace_back(c.info(t).numel, 0.25f);
  REQUIRE(c.compress(views(g)));
  REQUIRE(c.stats());
  std::vector<std::byte> out(c.max_message_bytes());
  REQUIRE(c.encode_message({}, span<std::byte>(out.data(), out.size())));

  adacomp_config bad;
  bad.momentum = 1.0;
  CHECK(gradcomp_test::refuses<adacomp_compressor<float>>(bad));
  bad = adacomp_config{};
  bad.threads = 0;
  CHECK(gradcomp_test::refuses<adacomp_compressor<float>>(bad));
  bad = adacomp_config{};
  bad.conv_bin = 0;
  CHECK(gradcomp_test::refuses<adacomp_compressor<float>>(bad));
  bad = adacomp_config{};
  bad.fc_bin = std::size_t(1) << 32;
  CHECK(gradcomp_test::refuses<adacomp_compressor<float>>(bad));
  bad = adacomp_config{};
  bad.momentum_form = momentum_kind::none;
  CHECK(gradcomp_test::refuses<adacomp_compressor<float>>(bad));
  CHECK(!gradcomp_test::refuses<adacomp_compressor<float>>(adacomp_config{}));
}

// ---- snapshots ----

TEST_CASE_TEMPLATE("AdaComp snapshot: restore and continue bitwise; a 1-bit SGD snapshot or damage change nothing", T,
                   float, double) {
  // 1-bit SGD with the same compressed tensors has the same sections: the method tells them apart.
  onebit_sgd_compressor<T> other(onebit_sgd_config{});
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    other.add_tensor(tensor_name(t), kShapes[t], t == 2 ? tensor_mode::dense : tensor_mode::automatic);
  // The state section and the residuals of the three compressed tensors.
  gradcomp_test::check_residual_snapshot(
      [] { return make<T>(); }, [](auto& c, std::size_t s) { return gradcomp_test::encoded_step(c, gradients<T>(s)); },
      3, other);
}
