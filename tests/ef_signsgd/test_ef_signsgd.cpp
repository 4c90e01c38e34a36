// EF-SignSGD: bitwise against a direct reference of the algorithm, sign and scale of every sent
// value, conservation of lr * g through the error feedback, the wire round trip into the common
// aggregator, refusals that change nothing, the common compressor interface, and snapshots.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/detail/rounded.hpp>

#include <doctest/doctest.h>

#include "support/quantiser_helpers.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/step.hpp"

using namespace gradcomp;
using gradcomp_test::bytes;
using gradcomp_test::views;

static_assert(is_compressor_v<ef_signsgd_compressor<float>>, "EF-SignSGD has the common interface");
static_assert(is_compressor_v<dgc_compressor<double>>, "DGC has the common interface");
static_assert(!is_compressor_v<aggregator<float>>, "an aggregator is not a compressor");

namespace {

const std::vector<std::vector<std::size_t>> kShapes = {{40, 30}, {257}, {3, 3, 5}};

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
    if (n > 10) v[step % n] = T(0);  // zeros too
    g.push_back(std::move(v));
  }
  return g;
}

// The model of kShapes (its first `tensors`), tensor `dense` sent whole.
template <class T>
ef_signsgd_compressor<T> make(double lr, std::size_t tensors = kShapes.size(), std::size_t dense = SIZE_MAX) {
  ef_signsgd_config cfg;
  cfg.learning_rate = lr;
  ef_signsgd_compressor<T> c(cfg);
  for (std::size_t t = 0; t < tensors; ++t) {
    std::string name = "t";
    name += std::to_string(t);
    c.add_tensor(name, kShapes[t], t == dense ? tensor_mode::dense : tensor_mode::automatic);
  }
  return c;
}

// The algorithm written out directly: p = e + lr*g, scale = float(sum|p| / n) with the sum in the
// documented order (32 interleaved partial sums, combined pairwise), sent = sign(p)*scale,
// e = p - sent.
template <class T>
void reference_step(T lr, const std::vector<T>& g, std::vector<T>& e, std::vector<T>& sent) {
  const std::size_t n = g.size();
  std::vector<T> p(n);
  double part[32] = {};
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = static_cast<T>(e[i] + gradcomp::detail::rounded(lr * g[i]));
    part[i % 32] += std::fabs(static_cast<double>(p[i]));
  }
  for (std::size_t w = 16; w > 0; w /= 2)
    for (std::size_t j = 0; j < w; ++j) part[j] += part[j + w];
  const T s = static_cast<T>(static_cast<float>(part[0] / static_cast<double>(n)));
  sent.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    sent[i] = std::signbit(p[i]) ? -s : s;
    e[i] = static_cast<T>(p[i] - sent[i]);
  }
}

template <class T>
bool same_bits(const std::vector<T>& a, span<const T> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("EF-SignSGD: every step is bitwise the direct reference, learning rate changes included", T,
                   float, double) {
  auto c = make<T>(0.05);
  std::vector<std::vector<T>> e(kShapes.size());
  for (std::size_t t = 0; t < kShapes.size(); ++t) e[t].assign(c.info(t).numel, T(0));
  for (std::size_t step = 0; step < 8; ++step) {
    CAPTURE(step);
    const double lr = 0.05 / static_cast<double>(1 + step);
    c.set_learning_rate(lr);
    const auto g = gradients<T>(step);
    const auto s = gradcomp_test::compress_step(c, views(g));
    REQUIRE(s);
    CHECK(s->step == step);
    CHECK(s->kept_elements == s->total_elements);
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      std::vector<T> sent;
      reference_step(static_cast<T>(lr), g[t], e[t], sent);
      const auto m = c.message(t);
      CHECK(m.dense);
      CHECK(m.coding == wire::value_coding::scaled_sign);
      CHECK(same_bits(sent, m.values));
      CHECK(same_bits(e[t], c.error_feedback(t)));
    }
  }
}

TEST_CASE("EF-SignSGD: values are sign(p) times the mean |p| as binary32, and lr * g is conserved") {
  auto c = make<double>(0.01);
  std::vector<std::vector<double>> sent_sum(kShapes.size()), input_sum(kShapes.size());
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    sent_sum[t].assign(c.info(t).numel, 0.0);
    input_sum[t].assign(c.info(t).numel, 0.0);
  }
  for (std::size_t step = 0; step < 20; ++step) {
    const auto g = gradients<double>(step);
    std::vector<std::vector<double>> e_before;
    for (std::size_t t = 0; t < kShapes.size(); ++t)
      e_before.emplace_back(c.error_feedback(t).begin(), c.error_feedback(t).end());
    REQUIRE(gradcomp_test::compress_step(c, views(g)));
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      const auto v = c.message(t).values;
      const std::size_t n = v.size();
      double l1 = 0.0;
      for (std::size_t i = 0; i < n; ++i)
        l1 += std::fabs(e_before[t][i] + gradcomp::detail::rounded(0.01 * g[t][i]));
      const double scale = std::fabs(v[0]);
      CHECK(scale == static_cast<double>(static_cast<float>(scale)));   // a binary32 scale
      CHECK(scale == doctest::Approx(l1 / static_cast<double>(n)).epsilon(1e-6));
      for (std::size_t i = 0; i < n; ++i) {
        const double p = e_before[t][i] + gradcomp::detail::rounded(0.01 * g[t][i]);
        REQUIRE(std::fabs(v[i]) == scale);
        REQUIRE(std::signbit(v[i]) == std::signbit(p));
        sent_sum[t][i] += v[i];
        input_sum[t][i] += gradcomp::detail::rounded(0.01 * g[t][i]);
      }
    }
  }
  // Error feedback loses nothing: what was sent plus what is held is what came in.
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    for (std::size_t i = 0; i < sent_sum[t].size(); ++i)
      REQUIRE(sent_sum[t][i] + c.error_feedback(t)[i] == doctest::Approx(input_sum[t][i]).epsilon(1e-9));
}

TEST_CASE("EF-SignSGD: the wire message is 1 bit per element plus a scale, and the aggregator averages it") {
  auto a = make<float>(0.1), b = make<float>(0.1);
  aggregator<float> agg(a);
  REQUIRE(agg.num_tensors() == kShapes.size());
  const auto ga = gradients<float>(1), gb = gradients<float>(2);
  REQUIRE(a.compress(views(ga)));
  REQUIRE(b.compress(views(gb)));
  wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> ma(a.max_message_bytes(opt)), mb(b.max_message_bytes(opt));
  const auto na = a.encode_message(opt, span<std::byte>(ma.data(), ma.size()));
  const auto nb = b.encode_message(opt, span<std::byte>(mb.data(), mb.size()));
  REQUIRE(na);
  REQUIRE(nb);
  CHECK(*na == ma.size());  // the bound is exact
  std::size_t expected = wire::message_header_bytes + wire::checksum_bytes;
  for (std::size_t t = 0; t < kShapes.size(); ++t) expected += wire::section_header_bytes + 4 + (a.info(t).numel + 7) / 8;
  CHECK(*na == expected);
  agg.begin();
  REQUIRE(agg.add(span<const std::byte>(ma.data(), *na)));
  REQUIRE(agg.add(span<const std::byte>(mb.data(), *nb)));
  REQUIRE(agg.finish(2));
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    const auto x = a.message(t).values, y = b.message(t).values, u = agg.update(t);
    for (std::size_t i = 0; i < u.size(); ++i) REQUIRE(u[i] == (x[i] + y[i]) * 0.5f);
  }
}

TEST_CASE("EF-SignSGD: tensors sent whole carry lr * g, and the receiver layout says so") {
  ef_signsgd_config cfg;
  cfg.learning_rate = 0.5;
  ef_signsgd_compressor<float> c(cfg);
  c.add_tensor("w", {8, 8});
  c.add_tensor("b", {8}, tensor_mode::dense);
  const std::vector<float> w(64, 1.0f), b = {1, -2, 3, -4, 5, -6, 7, -8};
  REQUIRE(c.compress({span<const float>(w.data(), w.size()), span<const float>(b.data(), b.size())}));
  const auto s = c.stats();
  REQUIRE(s);
  CHECK(s->dense_elements == 8);
  CHECK(c.error_feedback(1).empty());
  const auto m = c.message(1);
  CHECK(m.coding == wire::value_coding::unspecified);
  for (std::size_t i = 0; i < 8; ++i) CHECK(m.values[i] == 0.5f * b[i]);
  const auto r = c.receiver();
  CHECK(r.momentum == 0.0);
  for (const auto& t : r.tensors) CHECK((t.dense && !t.momentum));
}

TEST_CASE("EF-SignSGD: a non-finite gradient or an overflowing step is refused with nothing modified") {
  auto c = make<float>(0.1);
  REQUIRE(gradcomp_test::compress_step(c, views(gradients<float>(0))));
  std::vector<float> e0(c.error_feedback(0).begin(), c.error_feedback(0).end());
  auto bad = gradients<float>(1);
  bad[2][4] = std::numeric_limits<float>::quiet_NaN();
  CHECK(gradcomp_test::compress_step(c, views(bad)).error() == errc::non_finite_input);
  CHECK(c.step() == 1);
  CHECK(same_bits(e0, c.error_feedback(0)));
  std::vector<std::byte> out(c.max_message_bytes());
  CHECK(c.encode_message({}, span<std::byte>(out.data(), out.size())).error() == errc::non_finite_input);
  auto huge = gradients<float>(1);
  for (auto& x : huge[0]) x = 3e38f;  // lr * g + e overflows nowhere, but 10 * g does
  c.set_learning_rate(10.0);
  CHECK(gradcomp_test::compress_step(c, views(huge)).error() == errc::state_overflow);
  CHECK(c.step() == 1);
  CHECK(same_bits(e0, c.error_feedback(0)));
  c.set_learning_rate(0.1);
  CHECK(gradcomp_test::compress_step(c, views(gradients<float>(2))));
  CHECK(c.step() == 2);
}

TEST_CASE("EF-SignSGD: configuration and registration errors") {
  ef_signsgd_config cfg;
  cfg.learning_rate = 0.0;
  CHECK_THROWS_AS(ef_signsgd_compressor<float>{cfg}, error);
  cfg.learning_rate = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(ef_signsgd_compressor<float>{cfg}, error);
  cfg.learning_rate = 1e300;  // finite in double, not in float
  CHECK_THROWS_AS(ef_signsgd_compressor<float>{cfg}, error);
  cfg.learning_rate = 0.1;
  cfg.threads = 0;
  CHECK_THROWS_AS(ef_signsgd_compressor<float>{cfg}, error);
  auto c = make<float>(0.1);
  CHECK_THROWS_AS(c.add_tensor("t0", {3}), error);
  CHECK(c.compress(std::vector<span<const float>>{}).error() == errc::wrong_tensor_count);
  CHECK(c.stats().error() == errc::invalid_argument);  // no step yet
}

TEST_CASE("EF-SignSGD: the messages are bitwise the same on one thread and on several") {
  ef_signsgd_config one_cfg, three_cfg;
  three_cfg.threads = 3;
  ef_signsgd_compressor<float> one(one_cfg), three(three_cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    std::string name = "t";
    name += std::to_string(t);
    one.add_tensor(name, kShapes[t]);
    three.add_tensor(name, kShapes[t]);
  }
  for (std::size_t step = 0; step < 4; ++step) {
    const auto g = gradients<float>(step);
    REQUIRE(gradcomp_test::compress_step(one, views(g)));
    REQUIRE(gradcomp_test::compress_step(three, views(g)));
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      const auto a = one.message(t).values;
      CHECK(same_bits(std::vector<float>(a.begin(), a.end()), three.message(t).values));
      CHECK(same_bits(std::vector<float>(one.error_feedback(t).begin(), one.error_feedback(t).end()),
                      three.error_feedback(t)));
    }
  }
}

// ---- snapshots ----

namespace {

// Compresses step s's gradients and encodes the step.
template <class T>
std::vector<std::byte> step(ef_signsgd_compressor<T>& c, std::size_t s) {
  const auto g = gradients<T>(s);
  REQUIRE(c.compress(views(g)));
  std::vector<std::byte> out(c.max_message_bytes());
  out.resize(c.encode_message({}, span<std::byte>(out.data(), out.size())).value());
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("EF-SignSGD snapshot: restore into a fresh compressor and continue bitwise", T, float, double) {
  auto a = make<T>(0.05, kShapes.size(), 1);
  for (std::size_t s = 0; s < 4; ++s) (void)step(a, s);
  const auto saved = save_snapshot(a);
  CHECK(saved.size() == snapshot_bytes(a));
  CHECK(saved.size() == snapshot_bytes(a, false) + wire::checksum_bytes);
  // Only the compressed tensors' errors are stored: tensor 1 goes whole and keeps none.
  const auto header = wire::validate(bytes(saved));
  REQUIRE(header);
  CHECK(header->section_count == 1 + 2);

  auto b = make<T>(0.05, kShapes.size(), 1);
  CHECK(b.step() == 0);
  REQUIRE(restore_snapshot(b, bytes(saved)));
  CHECK(b.step() == 4);
  for (std::size_t t = 0; t < a.num_tensors(); ++t) {
    const auto ea = a.error_feedback(t), eb = b.error_feedback(t);
    REQUIRE(ea.size() == eb.size());
    CHECK((ea.empty() || std::memcmp(ea.data(), eb.data(), ea.size_bytes()) == 0));
  }
  for (std::size_t s = 4; s < 8; ++s) {
    CAPTURE(s);
    CHECK(step(a, s) == step(b, s));
  }
  CHECK(save_snapshot(a) == save_snapshot(b));
}

TEST_CASE("EF-SignSGD snapshot: another compressor's snapshot, another layout or damage change nothing") {
  auto c = make<float>(0.05, kShapes.size(), 1);
  for (std::size_t s = 0; s < 3; ++s) (void)step(c, s);
  const auto before = save_snapshot(c);

  // DGC as plain top-k with error feedback has the same sections (one residual per compressed
  // tensor), but its residual is another quantity: the recorded method tells them apart.
  dgc_config cfg;
  cfg.momentum_correction = false;
  cfg.policy.compress_vectors = false;
  dgc_compressor<float> dgc(cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    std::string name = "t";
    name += std::to_string(t);
    dgc.add_tensor(name, kShapes[t]);
  }
  const auto dgc_saved = save_snapshot(dgc);
  auto r = restore_snapshot(c, bytes(dgc_saved));
  CHECK(r.error() == errc::config_mismatch);
  CHECK(std::string(r.detail()) == "selection");
  CHECK(save_snapshot(c) == before);
  // And the other way round.
  const auto dgc_before = save_snapshot(dgc);
  r = restore_snapshot(dgc, bytes(before));
  CHECK(r.error() == errc::config_mismatch);
  CHECK(save_snapshot(dgc) == dgc_before);

  // A compressor with one tensor fewer.
  auto small = make<float>(0.05, 2, 1);
  CHECK(restore_snapshot(c, bytes(save_snapshot(small))).error() == errc::layout_mismatch);
  CHECK(restore_snapshot(small, bytes(before)).error() == errc::layout_mismatch);
  // Another value type.
  auto wide = make<double>(0.05, kShapes.size(), 1);
  CHECK(restore_snapshot(wide, bytes(before)).error() == errc::layout_mismatch);
  // Damage anywhere: the checksum refuses it.
  for (std::size_t at = 0; at < before.size(); at += 97) {
    CAPTURE(at);
    auto bad = before;
    bad[at] ^= std::byte{0x10};
    CHECK(!restore_snapshot(c, bytes(bad)));
    CHECK(save_snapshot(c) == before);
  }
  // An aggregator snapshot is not a compressor's.
  aggregator<float> agg(c);
  CHECK(restore_snapshot(c, bytes(save_snapshot(agg))).error() == errc::layout_mismatch);
}
