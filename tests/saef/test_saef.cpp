// Step-Ahead Error Feedback with double-way compression (docs/algorithms.md, "Step-Ahead Error
// Feedback"): the worker identity e_new + D_k == u_k + e_old (bitwise with top-k, within the
// rounding with scaled signs), the server identity s_new + D' == s_old + D, equal residuals after
// averaging, the dense compressor reproducing momentum SGD bitwise, the step-ahead point, and
// refusals that change nothing.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/detail/rounded.hpp>

#include <doctest/doctest.h>

#include "saef/saef_parity.hpp"
#include "support/quantiser_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

using namespace gradcomp;
using gradcomp_test::same_bits;
using gradcomp_test::tensor_name;
using gradcomp_test::views;

namespace {

using gradcomp_test::saef_parity::gradient_at;
constexpr std::size_t kWorkers = gradcomp_test::saef_parity::workers;

const std::vector<std::vector<std::size_t>>& kShapes = gradcomp_test::saef_parity::shapes();

std::size_t numel_of(const std::vector<std::size_t>& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

// Top-k with error feedback (DGC's exact top-k without momentum correction) and scaled signs with
// error feedback (learning rate 1), on the CPU backend.
dgc_compressor<float> topk() { return gradcomp_test::saef_parity::topk(cpu_backend{}); }
ef_signsgd_compressor<float> scaled_sign() { return gradcomp_test::saef_parity::scaled_sign(cpu_backend{}); }

// Every tensor sent whole: the identity compressor.
dgc_compressor<float> identity() {
  dgc_config cfg;
  cfg.momentum_correction = false;
  cfg.momentum_masking = false;
  dgc_compressor<float> c(cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t) c.add_tensor(tensor_name(t), kShapes[t], tensor_mode::dense);
  return c;
}

std::vector<std::vector<float>> zeros() {
  std::vector<std::vector<float>> x;
  for (const auto& s : kShapes) x.emplace_back(numel_of(s), 0.0f);
  return x;
}

template <class C>
std::vector<float> dense_message(C& c, std::size_t t) {
  std::vector<float> d(c.info(t).numel, 0.0f);
  const auto m = c.message(t);
  for (std::size_t j = 0; j < m.values.size(); ++j) d[m.dense ? j : m.indices[j]] = m.values[j];
  return d;
}

template <class C>
std::vector<float> copy(const C& v) {
  return std::vector<float>(v.begin(), v.end());
}

// The whole loop with N workers of compressor make() and a server of the same kind: every
// identity checked at every step; `exact`: bitwise (top-k), else within the rounding of e = p - D.
template <class Make>
void run_loop(Make make, bool exact, bool step_ahead, std::size_t average_every) {
  saef_config cfg;
  cfg.learning_rate = 0.05;
  cfg.momentum = 0.9;
  cfg.average_every = average_every;
  std::vector<decltype(make())> cs;
  for (std::size_t k = 0; k < kWorkers; ++k) cs.push_back(make());
  auto sc = make();
  std::vector<saef_worker<decltype(make())>> workers;
  for (auto& c : cs) workers.emplace_back(c, cfg);
  saef_server<decltype(make())> server(sc);
  auto x = zeros();
  std::size_t averaged = 0;
  for (std::size_t s = 0; s < 12; ++s) {
    CAPTURE(s);
    std::vector<std::vector<std::byte>> msgs;
    for (std::size_t k = 0; k < kWorkers; ++k) {
      auto& w = workers[k];
      auto at = x;
      if (step_ahead)
        for (std::size_t t = 0; t < x.size(); ++t) {
          REQUIRE(w.lookahead(t, span<const float>(x[t].data(), x[t].size()), span<float>(at[t].data(), at[t].size())));
          const auto e = w.residual(t);
          for (std::size_t i = 0; i < e.size(); ++i) REQUIRE(at[t][i] == x[t][i] - e[i]);
        }
      std::vector<std::vector<float>> e_old;
      for (std::size_t t = 0; t < x.size(); ++t) e_old.push_back(copy(w.residual(t)));
      const auto g = gradient_at(at, k, s);
      REQUIRE(w.step(views(g)));
      for (std::size_t t = 0; t < x.size(); ++t) {
        const auto d = dense_message(w.compressor(), t);
        const auto u = w.update(t);
        const auto e = w.residual(t);
        for (std::size_t i = 0; i < d.size(); ++i) {
          const float before = e_old[t].empty() ? 0.0f : e_old[t][i];
          const float now = e.empty() ? 0.0f : e[i];
          const float want = u[i] + before;  // u' = e_old + eta * M with the step ahead
          if (exact) {
            REQUIRE(now + d[i] == want);
          } else {
            const double err = static_cast<double>(now) + d[i] - (static_cast<double>(u[i]) + before);
            REQUIRE(std::fabs(err) <= 1e-6 * (std::fabs(want) + std::fabs(d[i])) + 1e-30);
          }
        }
      }
      std::vector<std::byte> out(w.compressor().max_message_bytes());
      out.resize(w.compressor().encode_message({}, span<std::byte>(out.data(), out.size())).value());
      msgs.push_back(std::move(out));
    }
    // The exchange: the mean of the workers' messages.
    aggregator<float> agg(workers[0].receiver());
    agg.begin();
    for (const auto& m : msgs) REQUIRE(agg.add(span<const std::byte>(m.data(), m.size())));
    REQUIRE(agg.finish(kWorkers));
    std::vector<std::vector<float>> mean, s_old;
    for (std::size_t t = 0; t < x.size(); ++t) {
      mean.push_back(copy(agg.update(t)));
      s_old.push_back(copy(server.residual(t)));
    }
    REQUIRE(server.step(views(mean)));
    for (std::size_t t = 0; t < x.size(); ++t) {
      const auto dp = server.update(t);
      const auto sn = server.residual(t);
      for (std::size_t i = 0; i < dp.size(); ++i) {
        const float before = s_old[t].empty() ? 0.0f : s_old[t][i];
        const float now = sn.empty() ? 0.0f : sn[i];
        if (exact) {
          REQUIRE(now + dp[i] == mean[t][i] + before);
        } else {
          const double err = static_cast<double>(now) + dp[i] - (static_cast<double>(mean[t][i]) + before);
          REQUIRE(std::fabs(err) <= 1e-6 * (std::fabs(mean[t][i] + before) + std::fabs(dp[i])) + 1e-30);
        }
      }
      REQUIRE(server.apply(t, span<float>(x[t].data(), x[t].size())));
    }
    // Residual averaging: each worker takes the mean, bitwise the same on all.
    if (workers[0].averaging_due()) {
      ++averaged;
      std::vector<std::vector<float>> e_mean;
      for (std::size_t t = 0; t < x.size(); ++t) {
        std::vector<float> acc(workers[0].residual(t).size(), 0.0f);
        for (auto& w : workers)
          for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += w.residual(t)[i];
        for (auto& a : acc) a /= static_cast<float>(kWorkers);
        e_mean.push_back(std::move(acc));
      }
      std::vector<span<const float>> ev;
      for (std::size_t t = 0; t < x.size(); ++t)
        ev.emplace_back(e_mean[t].data(), e_mean[t].empty() ? 0 : e_mean[t].size());
      for (auto& w : workers) REQUIRE(w.set_residuals(ev));
      for (std::size_t t = 0; t < x.size(); ++t)
        for (auto& w : workers) CHECK(same_bits(w.residual(t), e_mean[t]));
    }
  }
  CHECK(averaged == (average_every == 0 ? 0 : 12 / average_every));
  // The loop trains: the weights approach the workers' common minimum region.
  double moved = 0.0;
  for (const auto& v : x)
    for (const float w : v) moved += std::fabs(w);
  CHECK(moved > 1.0);
}

}  // namespace

TEST_CASE("SAEF with top-k: e_new + D == u + e_old and s_new + D' == s_old + D bitwise, step ahead or not") {
  for (const bool ahead : {false, true}) {
    CAPTURE(ahead);
    run_loop(topk, true, ahead, 0);
  }
}

TEST_CASE("SAEF with top-k and residual averaging every 4 steps: every worker holds the mean") {
  run_loop(topk, true, true, 4);
}

TEST_CASE("SAEF with scaled signs: the identities within the rounding, residuals averaged every 3 steps") {
  run_loop(scaled_sign, false, true, 3);
}

TEST_CASE("SAEF with the identity compressor is momentum SGD, bitwise") {
  saef_config cfg;
  cfg.learning_rate = 0.05;
  cfg.momentum = 0.9;
  std::vector<dgc_compressor<float>> cs;
  for (std::size_t k = 0; k < kWorkers; ++k) cs.push_back(identity());
  auto sc = identity();
  std::vector<saef_worker<dgc_compressor<float>>> workers;
  for (auto& c : cs) workers.emplace_back(c, cfg);
  saef_server<dgc_compressor<float>> server(sc);
  auto x = zeros(), y = zeros();
  std::vector<std::vector<std::vector<float>>> m(kWorkers, zeros());
  for (std::size_t s = 0; s < 20; ++s) {
    CAPTURE(s);
    aggregator<float> agg(workers[0].receiver());
    agg.begin();
    std::vector<std::vector<float>> sum = zeros();
    for (std::size_t k = 0; k < kWorkers; ++k) {
      auto& w = workers[k];
      std::vector<std::vector<float>> at = x;
      for (std::size_t t = 0; t < x.size(); ++t)
        REQUIRE(w.lookahead(t, span<const float>(x[t].data(), x[t].size()), span<float>(at[t].data(), at[t].size())));
      REQUIRE(same_bits(span<const float>(at[0].data(), at[0].size()), x[0]));  // no residual: x itself
      REQUIRE(w.step(views(gradient_at(at, k, s))));
      std::vector<std::byte> out(w.compressor().max_message_bytes());
      out.resize(w.compressor().encode_message({}, span<std::byte>(out.data(), out.size())).value());
      REQUIRE(agg.add(span<const std::byte>(out.data(), out.size())));
      // The reference: momentum SGD written out, on y.
      const auto g = gradient_at(y, k, s);
      for (std::size_t t = 0; t < y.size(); ++t)
        for (std::size_t i = 0; i < y[t].size(); ++i) {
          const float bm = gradcomp::detail::rounded(0.9f * m[k][t][i]);
          m[k][t][i] = bm + g[t][i];
          const float u = gradcomp::detail::rounded(0.05f * m[k][t][i]);
          sum[t][i] = sum[t][i] + u;
        }
    }
    REQUIRE(agg.finish(kWorkers));
    std::vector<std::vector<float>> mean;
    for (std::size_t t = 0; t < x.size(); ++t) mean.push_back(copy(agg.update(t)));
    REQUIRE(server.step(views(mean)));
    for (std::size_t t = 0; t < x.size(); ++t) {
      REQUIRE(server.apply(t, span<float>(x[t].data(), x[t].size())));
      const float inv = 1.0f / static_cast<float>(kWorkers);
      for (std::size_t i = 0; i < y[t].size(); ++i) y[t][i] = y[t][i] - gradcomp::detail::rounded(sum[t][i] * inv);
      CHECK(same_bits(span<const float>(x[t].data(), x[t].size()), y[t]));
    }
  }
}

TEST_CASE("SAEF: bad settings and inputs are refused and change nothing") {
  auto c = topk();
  saef_config cfg;
  cfg.learning_rate = 0.0;
  CHECK_THROWS_AS(saef_worker<dgc_compressor<float>>(c, cfg), error);
  cfg = saef_config{};
  cfg.momentum = 1.0;
  CHECK_THROWS_AS(saef_worker<dgc_compressor<float>>(c, cfg), error);
  // Settings are checked in the value type the steps use: a learning rate beyond float's range
  // (every step was refused as non_finite_input) or below it (the rate became 0), a momentum that
  // rounds to 1 as a float. The same values are fine for double.
  for (const double lr : {1e39, 1e-50}) {
    cfg = saef_config{};
    cfg.learning_rate = lr;
    CHECK_THROWS_AS(saef_worker<dgc_compressor<float>>(c, cfg), error);
    saef_worker<dgc_compressor<float>> ok(c, saef_config{});
    CHECK_THROWS_AS(ok.set_learning_rate(lr), error);
    CHECK(ok.config().learning_rate == saef_config{}.learning_rate);
    dgc_config dc;
    dc.momentum_correction = false;
    dgc_compressor<double> cd(dc);
    CHECK_NOTHROW(saef_worker<dgc_compressor<double>>(cd, cfg));
  }
  cfg = saef_config{};
  cfg.momentum = 1.0 - 1e-9;
  CHECK_THROWS_AS(saef_worker<dgc_compressor<float>>(c, cfg), error);
  // A compressor with momentum of its own, or a learning rate of its own.
  dgc_compressor<float> corrected(dgc_config{});
  CHECK_THROWS_AS(saef_worker<dgc_compressor<float>>(corrected, saef_config{}), error);
  CHECK_THROWS_AS(saef_server<dgc_compressor<float>>{corrected}, error);
  ef_signsgd_compressor<float> scaled(ef_signsgd_config{});
  CHECK_THROWS_AS(saef_worker<ef_signsgd_compressor<float>>(scaled, saef_config{}), error);

  saef_worker<dgc_compressor<float>> w(c, saef_config{});
  auto g = gradient_at(zeros(), 0, 0);
  REQUIRE(w.step(views(g)));
  const auto m0 = copy(w.momentum_buffer(0));
  const auto e0 = copy(w.residual(0));
  g[2][4] = std::numeric_limits<float>::quiet_NaN();
  CHECK(w.step(views(g)).error() == errc::non_finite_input);
  g.pop_back();
  CHECK(w.step(views(g)).error() == errc::wrong_tensor_count);
  CHECK(same_bits(w.momentum_buffer(0), m0));
  CHECK(same_bits(w.residual(0), e0));
  CHECK(w.steps() == 1);
  CHECK(!w.averaging_due());
  // Residuals: wrong count, wrong size, not finite.
  std::vector<std::vector<float>> e = zeros();
  CHECK(w.set_residuals(views(std::vector<std::vector<float>>(2))).error() == errc::wrong_tensor_count);
  e[0].pop_back();
  CHECK(w.set_residuals(views(e)).error() == errc::size_mismatch);
  e = zeros();
  e[2][0] = std::numeric_limits<float>::infinity();
  CHECK(w.set_residuals(views(e)).error() == errc::non_finite_input);
  CHECK(same_bits(w.residual(0), e0));
  std::vector<float> x(3), out(3);
  CHECK(w.lookahead(0, span<const float>(x.data(), 3), span<float>(out.data(), 3)).error() == errc::size_mismatch);
  // A tensor id at or past the tensor count is refused before anything is read (it was read out
  // of bounds).
  const std::size_t n0 = g[0].size();
  std::vector<float> x0(n0), out0(n0);
  auto sc = topk();
  saef_server<dgc_compressor<float>> server(sc);
  for (const std::size_t id : {kShapes.size(), kShapes.size() + 1, std::size_t(-1)}) {
    CHECK(w.lookahead(id, span<const float>(x0.data(), n0), span<float>(out0.data(), n0)).error() ==
          errc::unknown_tensor);
    CHECK(server.apply(id, span<float>(x0.data(), n0)).error() == errc::unknown_tensor);
  }
}

TEST_CASE("SAEF with a compressor without error feedback (QSGD, TernGrad): e = 0, lookahead gives x") {
  // Both did not compile: the residual was read through a residual() these compressors lack.
  qsgd_compressor<float> q(qsgd_config{});
  terngrad_compressor<float> tg(terngrad_config{});
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    q.add_tensor(tensor_name(t), kShapes[t]);
    tg.add_tensor(tensor_name(t), kShapes[t]);
  }
  saef_worker<qsgd_compressor<float>> wq(q, saef_config{});
  saef_worker<terngrad_compressor<float>> wt(tg, saef_config{});
  const auto x = gradient_at(zeros(), 1, 3);
  for (std::size_t t = 0; t < x.size(); ++t) {
    CHECK(wq.residual(t).empty());
    CHECK(wt.residual(t).empty());
    std::vector<float> out(x[t].size(), 7.0f);
    REQUIRE(wq.lookahead(t, span<const float>(x[t].data(), x[t].size()), span<float>(out.data(), out.size())));
    CHECK(same_bits(span<const float>(out.data(), out.size()), x[t]));
    std::fill(out.begin(), out.end(), 7.0f);
    REQUIRE(wt.lookahead(t, span<const float>(x[t].data(), x[t].size()), span<float>(out.data(), out.size())));
    CHECK(same_bits(span<const float>(out.data(), out.size()), x[t]));
  }
  REQUIRE(wq.step(views(x)));
  REQUIRE(wt.step(views(x)));
}

TEST_CASE("SAEF: a copied worker steps on its own buffers, after the original is gone too") {
  // The copy kept the original's views of its spare buffers: its next step compressed the
  // original's (a wrong message), or freed memory once the original was destroyed.
  auto message_of = [](auto& c) {
    std::vector<std::byte> out(c.max_message_bytes());
    out.resize(c.encode_message({}, span<std::byte>(out.data(), out.size())).value());
    return out;
  };
  auto c = topk();
  auto twin_c = topk();
  saef_worker<dgc_compressor<float>> twin(twin_c, saef_config{});
  auto original = std::make_unique<saef_worker<dgc_compressor<float>>>(c, saef_config{});
  const auto g0 = gradient_at(zeros(), 0, 1), g1 = gradient_at(zeros(), 1, 1), g2 = gradient_at(zeros(), 2, 1);
  REQUIRE(original->step(views(g0)));
  REQUIRE(twin.step(views(g0)));
  saef_worker<dgc_compressor<float>> copy = *original;
  REQUIRE(original->step(views(g2)));  // the original moves on with other gradients
  // The original's step was its compressor's, which the copy shares: the twins restart from
  // step 1 on both compressors' snapshots.
  const auto saved = save_snapshot(twin_c);
  REQUIRE(restore_snapshot(c, span<const std::byte>(saved.data(), saved.size())));
  original.reset();
  REQUIRE(copy.step(views(g1)));
  REQUIRE(twin.step(views(g1)));
  CHECK(message_of(copy.compressor()) == message_of(twin_c));
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    const auto m = twin.momentum_buffer(t);
    CHECK(same_bits(copy.momentum_buffer(t), std::vector<float>(m.begin(), m.end())));
    CHECK(same_bits(copy.update(t), std::vector<float>(twin.update(t).begin(), twin.update(t).end())));
  }
}
