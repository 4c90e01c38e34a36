// Properties of the composed DGC step (docs/algorithms.md).
#include <gradcomp/dgc/compressor.hpp>
#include <gradcomp/dgc/momentum.hpp>
#include <gradcomp/detail/rounded.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/inputs.hpp"
#include "support/step.hpp"

using gradcomp::dgc_aggregator;
using gradcomp::dgc_compressor;
using gradcomp::dgc_config;
using gradcomp::errc;
using gradcomp::span;
using gradcomp::tensor_mode;
using gradcomp::warmup_schedule;
using namespace gradcomp_test;

using gradcomp_test::views;

namespace {

// A small model: two matrices, a bias and a tensor that is a matrix but tiny.
const std::vector<std::vector<std::size_t>> kShapes = {{64, 300}, {10, 64}, {64}, {3, 3}};

template <class T>
std::vector<std::vector<T>> model_gradients(std::uint64_t seed, double scale = 1.0) {
  std::vector<std::vector<T>> g;
  for (const auto& shape : kShapes) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    auto v = random_vector<T>(n, dist::student_t, seed++);
    for (auto& x : v) x = static_cast<T>(x * scale);
    g.push_back(std::move(v));
  }
  return g;
}

std::string tensor_name(std::size_t t) {
  std::string name = "t";  // two steps: GCC 12 warns falsely (-Wrestrict) on "t" + to_string(t)
  name += std::to_string(t);
  return name;
}

template <class T>
void register_model(dgc_compressor<T>& c) {
  for (std::size_t t = 0; t < kShapes.size(); ++t) c.add_tensor(tensor_name(t), kShapes[t]);
}

// Dense momentum SGD as frameworks write it: buf = m*buf + g; w -= lr * (nesterov ? g + m*buf : buf).
template <class T>
struct dense_sgd {
  T m;
  bool nesterov;
  std::vector<std::vector<T>> buf;
  void step(std::vector<std::vector<T>>& w, const std::vector<std::vector<T>>& g, T lr) {
    if (buf.empty())
      for (const auto& x : g) buf.emplace_back(x.size(), T(0));
    for (std::size_t t = 0; t < g.size(); ++t)
      for (std::size_t i = 0; i < g[t].size(); ++i) {
        buf[t][i] = gradcomp::detail::rounded(m * buf[t][i]) + g[t][i];
        const T d = nesterov ? g[t][i] + gradcomp::detail::rounded(m * buf[t][i]) : buf[t][i];
        w[t][i] -= gradcomp::detail::rounded(lr * d);
      }
  }
};

template <class T>
void apply(std::vector<std::vector<T>>& w, const dgc_aggregator<T>& agg, T lr) {
  for (std::size_t t = 0; t < w.size(); ++t) {
    const auto u = agg.update(t);
    for (std::size_t i = 0; i < w[t].size(); ++i) w[t][i] -= gradcomp::detail::rounded(lr * u[i]);
  }
}

template <class T>
std::vector<std::vector<T>> zeros_like(const std::vector<std::vector<T>>& g) {
  std::vector<std::vector<T>> z;
  for (const auto& x : g) z.emplace_back(x.size(), T(0));
  return z;
}

}  // namespace

TEST_CASE_TEMPLATE("conservation: residual_new + sent == residual_old + velocity, bitwise", T,
                   float, double) {
  for (bool nesterov : {false, true}) {
    for (auto method : {gradcomp::selection_method::sampled_threshold,
                        gradcomp::selection_method::exact_topk}) {
      CAPTURE(nesterov);
      CAPTURE(static_cast<int>(method));
      dgc_config cfg;
      cfg.nesterov = nesterov;
      cfg.selection = method;
      cfg.clip_norm = 40.0;  // active on some steps
      cfg.num_workers = 4;
      cfg.schedule = warmup_schedule::paper(0.001, 4, gradcomp::schedule_unit::step, 1);
      cfg.seed = 99;
      dgc_compressor<T> c(cfg);
      register_model(c);
      const T m = static_cast<T>(cfg.momentum);
      auto g0 = model_gradients<T>(1);
      auto u_ref = zeros_like(g0), v_ref = zeros_like(g0);
      bool clipped_once = false;
      for (std::size_t step = 0; step < 8; ++step) {
        const auto g = model_gradients<T>(100 * step + 7, step % 2 ? 10.0 : 1.0);
        double sq = 0.0;
        for (const auto& x : g) {
          const double nrm = gradcomp::l2_norm(gradcomp::cpu_backend{}, span<const T>(x.data(), x.size())).value();
          sq += gradcomp::detail::rounded(nrm * nrm);
        }
        const double coef = gradcomp::clip_coefficient(
            std::sqrt(sq), gradcomp::local_clip_threshold(cfg.clip_norm, cfg.num_workers));
        clipped_once |= coef < 1.0;
        const T cc = static_cast<T>(coef);
        const auto stats = gradcomp_test::compress_step(c, views(g));
        REQUIRE(stats);
        CHECK(stats->clip_coefficient == coef);
        CHECK(stats->kept_elements <= stats->target_elements);
        for (std::size_t t = 0; t < g.size(); ++t) {
          const auto msg = c.message(t);
          if (msg.dense) {
            std::vector<T> expect(g[t].size());
            for (std::size_t i = 0; i < g[t].size(); ++i) expect[i] = cc * g[t][i];
            CHECK(bitwise_equal(msg.values, expect));
            continue;
          }
          for (std::size_t i = 0; i < g[t].size(); ++i) {
            const T cg = gradcomp::detail::rounded(cc * g[t][i]);
            if (nesterov) {
              u_ref[t][i] = gradcomp::detail::rounded(m * (u_ref[t][i] + cg));
              v_ref[t][i] = v_ref[t][i] + u_ref[t][i] + cg;
            } else {
              u_ref[t][i] = gradcomp::detail::rounded(m * u_ref[t][i]) + cg;
              v_ref[t][i] = v_ref[t][i] + u_ref[t][i];
            }
          }
          // residual_new + scatter(sent) must equal the accumulator before extraction, bitwise.
          std::vector<T> rebuilt(c.residual(t).begin(), c.residual(t).end());
          for (std::size_t j = 0; j < msg.indices.size(); ++j) {
            CHECK(rebuilt[msg.indices[j]] == T(0));
            rebuilt[msg.indices[j]] += msg.values[j];
            if (j > 0) CHECK(msg.indices[j - 1] < msg.indices[j]);
          }
          CHECK(bitwise_equal(span<const T>(rebuilt.data(), rebuilt.size()), v_ref[t]));
          // Masking zeroes exactly the sent positions of U; elsewhere U is the reference.
          std::vector<char> sent(g[t].size(), 0);
          for (auto i : msg.indices) sent[i] = 1;
          const auto u = c.momentum_buffer(t);
          bool masked_ok = true, unmasked_ok = true;
          for (std::size_t i = 0; i < g[t].size(); ++i) {
            if (sent[i]) {
              masked_ok &= u[i] == T(0);
              u_ref[t][i] = T(0);
            } else {
              unmasked_ok &= std::memcmp(&u[i], &u_ref[t][i], sizeof(T)) == 0;
            }
          }
          CHECK(masked_ok);
          CHECK(unmasked_ok);
          v_ref[t] = std::vector<T>(c.residual(t).begin(), c.residual(t).end());
        }
      }
      CHECK(clipped_once);
    }
  }
}

TEST_CASE_TEMPLATE("masking off and k = n: DGC equals dense momentum SGD", T, float, double) {
  for (bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    dgc_config cfg;
    cfg.momentum = 0.9;
    cfg.nesterov = nesterov;
    cfg.momentum_masking = false;
    cfg.schedule = warmup_schedule::constant(1.0);
    dgc_compressor<T> c(cfg);
    register_model(c);
    // The same model with every tensor sent dense: receiver-side momentum only.
    dgc_compressor<T> d(cfg);
    for (std::size_t t = 0; t < kShapes.size(); ++t)
      d.add_tensor(tensor_name(t), kShapes[t], tensor_mode::dense);
    dgc_aggregator<T> agg_c(c), agg_d(d);
    auto w0 = model_gradients<T>(500);
    auto w_c = w0, w_d = w0, w_ref = w0;
    dense_sgd<T> ref{T(0.9), nesterov, {}};
    const T lr = T(0.05);
    for (std::size_t step = 0; step < 6; ++step) {
      const auto g = model_gradients<T>(1000 + 10 * step);
      REQUIRE(c.compress(views(g)));
      REQUIRE(d.compress(views(g)));
      agg_c.begin();
      agg_d.begin();
      for (std::size_t t = 0; t < g.size(); ++t) {
        REQUIRE(agg_c.add(c.message(t)));
        REQUIRE(agg_d.add(d.message(t)));
      }
      REQUIRE(agg_c.finish(1));
      REQUIRE(agg_d.finish(1));
      apply(w_c, agg_c, lr);
      apply(w_d, agg_d, lr);
      ref.step(w_ref, g, lr);
    }
    for (std::size_t t = 0; t < w0.size(); ++t) {
      CAPTURE(t);
      // Sparse path with k = n and the dense path run the same arithmetic: bitwise equal.
      CHECK(bitwise_equal(span<const T>(w_c[t].data(), w_c[t].size()), w_d[t]));
      if (!nesterov) {
        // Vanilla momentum is the framework formula itself.
        CHECK(bitwise_equal(span<const T>(w_c[t].data(), w_c[t].size()), w_ref[t]));
      } else {
        // Nesterov in DGC form, U = m(U + g), update U + g, is the framework's g + m*buf with
        // U = m*buf: equal up to rounding.
        double worst = 0.0;
        for (std::size_t i = 0; i < w_c[t].size(); ++i)
          worst = std::max(worst, std::fabs(double(w_c[t][i]) - double(w_ref[t][i])) /
                                      (1.0 + std::fabs(double(w_ref[t][i]))));
        CHECK(worst < (sizeof(T) == 4 ? 1e-5 : 1e-13));
      }
    }
  }
}

TEST_CASE("masking off and k = n with several workers equals dense momentum SGD on the average") {
  const std::size_t workers = 3;
  dgc_config cfg;
  cfg.momentum_masking = false;
  cfg.schedule = warmup_schedule::constant(1.0);
  std::vector<dgc_compressor<double>> comp;
  for (std::size_t r = 0; r < workers; ++r) {
    comp.emplace_back(cfg);
    register_model(comp.back());
  }
  dgc_aggregator<double> agg(comp[0]);
  auto w = model_gradients<double>(77), w_ref = w;
  dense_sgd<double> ref{0.9, false, {}};
  for (std::size_t step = 0; step < 5; ++step) {
    std::vector<std::vector<std::vector<double>>> g;
    auto avg = zeros_like(w);
    for (std::size_t r = 0; r < workers; ++r) {
      g.push_back(model_gradients<double>(3000 + 100 * step + 10 * r));
      for (std::size_t t = 0; t < w.size(); ++t)
        for (std::size_t i = 0; i < w[t].size(); ++i) avg[t][i] += g[r][t][i] / workers;
      REQUIRE(comp[r].compress(views(g[r])));
    }
    agg.begin();
    for (std::size_t r = 0; r < workers; ++r)
      for (std::size_t t = 0; t < w.size(); ++t) REQUIRE(agg.add(comp[r].message(t)));
    REQUIRE(agg.finish(workers));
    apply(w, agg, 0.1);
    ref.step(w_ref, avg, 0.1);
  }
  for (std::size_t t = 0; t < w.size(); ++t)
    for (std::size_t i = 0; i < w[t].size(); ++i) CHECK(w[t][i] == doctest::Approx(w_ref[t][i]).epsilon(1e-12));
}

TEST_CASE_TEMPLATE("masking on and k = n: DGC degenerates to plain SGD", T, float, double) {
  for (bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    dgc_config cfg;
    cfg.nesterov = nesterov;
    cfg.schedule = warmup_schedule::constant(1.0);
    dgc_compressor<T> c(cfg);
    register_model(c);
    dgc_aggregator<T> agg(c);
    const T m = static_cast<T>(cfg.momentum);
    for (std::size_t step = 0; step < 4; ++step) {
      const auto g = model_gradients<T>(2000 + step);
      REQUIRE(c.compress(views(g)));
      agg.begin();
      for (std::size_t t = 0; t < g.size(); ++t) REQUIRE(agg.add(c.message(t)));
      REQUIRE(agg.finish(1));
      for (std::size_t t = 0; t < g.size(); ++t) {
        if (!c.info(t).compressed) continue;  // dense tensors keep ordinary momentum
        std::vector<T> expect(g[t]);
        // U is reset every step: vanilla sends g; Nesterov sends m*g + g.
        if (nesterov)
          for (auto& x : expect) x = gradcomp::detail::rounded(m * x) + x;
        CHECK(bitwise_equal(agg.update(t), expect));
      }
    }
  }
}

TEST_CASE("a NaN or infinite gradient is rejected and changes nothing") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(0.05);
  dgc_compressor<float> c(cfg);
  register_model(c);
  REQUIRE(c.compress(views(model_gradients<float>(1))));
  const std::vector<float> v_before(c.residual(0).begin(), c.residual(0).end());
  const std::vector<float> u_before(c.momentum_buffer(0).begin(), c.momentum_buffer(0).end());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    auto g = model_gradients<float>(2);
    g[1][5] = bad;  // the second tensor: the first was already readable
    const auto r = gradcomp_test::compress_step(c, views(g));
    CHECK(r.error() == errc::non_finite_input);
    CHECK(c.step() == 1);
    CHECK(bitwise_equal(c.residual(0), v_before));
    CHECK(bitwise_equal(c.momentum_buffer(0), u_before));
  }
  REQUIRE(c.compress(views(model_gradients<float>(3))));
  CHECK(c.step() == 2);
}

TEST_CASE("check_finite = false: the same steps for finite gradients, one read fewer") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(0.05);
  dgc_config unchecked_cfg = cfg;
  unchecked_cfg.check_finite = false;
  dgc_compressor<float> checked(cfg), unchecked(unchecked_cfg);
  register_model(checked);
  register_model(unchecked);
  for (std::uint64_t step = 0; step < 4; ++step) {
    const auto g = model_gradients<float>(10 + step);
    REQUIRE(checked.compress(views(g)));
    REQUIRE(unchecked.compress(views(g)));
    for (std::size_t t = 0; t < checked.num_tensors(); ++t) {
      CAPTURE(t);
      CHECK(bitwise_equal(checked.message(t).indices, unchecked.message(t).indices));
      CHECK(bitwise_equal(checked.message(t).values, unchecked.message(t).values));
      CHECK(bitwise_equal(checked.residual(t), unchecked.residual(t)));
      CHECK(bitwise_equal(checked.momentum_buffer(t), unchecked.momentum_buffer(t)));
    }
  }
  std::size_t compressed = 0;
  while (!unchecked.info(compressed).compressed) ++compressed;
  auto bad = model_gradients<float>(20);
  bad[compressed][7] = std::numeric_limits<float>::quiet_NaN();

  // Without the read the NaN reaches the accumulator, and the selection reports it.
  CHECK(gradcomp_test::compress_step(unchecked, views(bad)).error() == errc::nan_input);

  // With clipping the norms need the read, so the check stays whatever the flag says.
  unchecked_cfg.clip_norm = 1.0;
  dgc_compressor<float> clipped(unchecked_cfg);
  register_model(clipped);
  CHECK(gradcomp_test::compress_step(clipped, views(bad)).error() == errc::non_finite_input);
  CHECK(clipped.step() == 0);
  for (std::size_t t = 0; t < clipped.num_tensors(); ++t)
    for (const float x : clipped.residual(t)) REQUIRE(x == 0.0f);
}

TEST_CASE("the compression policy: rank-1 and small tensors dense, overrides, predicate") {
  dgc_config cfg;
  dgc_compressor<float> a(cfg);
  CHECK(a.info(a.add_tensor("w", {64, 300})).compressed);
  CHECK_FALSE(a.info(a.add_tensor("b", {64})).compressed);
  CHECK(a.info(a.add_tensor("tiny", {3, 3})).compressed);
  CHECK_FALSE(a.info(a.add_tensor("forced", {64, 300}, tensor_mode::dense)).compressed);
  CHECK(a.info(a.add_tensor("vector", {5000}, tensor_mode::compressed)).compressed);
  CHECK_THROWS_AS(a.add_tensor("w", {2, 2}), gradcomp::error);
  CHECK_THROWS_AS(a.add_tensor("huge", {1u << 20, 1u << 13}), gradcomp::error);

  cfg.policy.min_compressed_elements = 16384;
  dgc_compressor<float> b(cfg);
  CHECK_FALSE(b.info(b.add_tensor("small", {64, 255})).compressed);
  CHECK(b.info(b.add_tensor("large", {64, 256})).compressed);

  cfg.policy.predicate = [](const std::string& name, const std::vector<std::size_t>&) {
    return name.find("conv") != std::string::npos;
  };
  dgc_compressor<float> p(cfg);
  CHECK(p.info(p.add_tensor("conv1.weight", {16, 3, 3, 3})).compressed);
  CHECK_FALSE(p.info(p.add_tensor("fc.weight", {10, 1000})).compressed);
}

TEST_CASE("small tensors: the floor keeps min_kept, the largest; other tensors are as without the rule") {
  dgc_config cfg;
  cfg.selection = gradcomp::selection_method::exact_topk;
  cfg.momentum_correction = false;  // plain error feedback: the accumulator is residual + gradient
  cfg.schedule = warmup_schedule::from_list({0.05, 0.001}, gradcomp::schedule_unit::step, 1);
  dgc_config floored = cfg;
  floored.small_tensors.min_kept = 8;
  dgc_compressor<float> plain(cfg), with_floor(floored);
  // 200 elements keep 10 at 5% and 1 at 0.1%; 5 elements keep 1 at both; 100000 keep 5000, 100.
  for (auto* c : {&plain, &with_floor}) {
    c->add_tensor("conv1", {8, 25});
    c->add_tensor("odd", {5, 1});
    c->add_tensor("fc", {100, 1000});
  }
  CHECK(with_floor.receiver().tensors[0].max_kept == 10);
  CHECK(with_floor.receiver().tensors[1].max_kept == 5);
  const std::size_t want_small[] = {10, 8};  // the floor lifts only the second stage
  for (std::size_t s = 0; s < 2; ++s) {
    CAPTURE(s);
    const auto conv1 = random_vector<float>(200, dist::gaussian, 70 + s);
    const auto odd = random_vector<float>(5, dist::gaussian, 80 + s);
    const auto fc = random_vector<float>(100000, dist::student_t, 90 + s);
    const std::vector<span<const float>> g{span<const float>(conv1.data(), conv1.size()),
                                           span<const float>(odd.data(), odd.size()),
                                           span<const float>(fc.data(), fc.size())};
    std::vector<float> accumulated(200);
    const auto residual = with_floor.residual(0);
    for (std::size_t i = 0; i < 200; ++i) accumulated[i] = residual[i] + conv1[i];
    const auto a = gradcomp_test::compress_step(plain, g);
    const auto b = gradcomp_test::compress_step(with_floor, g);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(b->target_elements == want_small[s] + 5 + (s == 0 ? 5000 : 100));
    const auto small = with_floor.message(0);
    REQUIRE(small.indices.size() == want_small[s]);
    // The kept entries are the largest magnitudes of the accumulator, sent as they are.
    std::vector<float> sorted(accumulated);
    for (auto& x : sorted) x = std::fabs(x);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (std::size_t j = 0; j < small.indices.size(); ++j) {
      const std::uint32_t i = small.indices[j];
      CHECK(std::fabs(accumulated[i]) >= sorted[want_small[s] - 1]);
      CHECK(small.values[j] == accumulated[i]);
    }
    CHECK(with_floor.message(1).indices.size() == 5);  // fewer elements than the floor: all of them
    // A tensor the density leaves enough is the same with or without the rule, bit for bit.
    const auto fa = plain.message(2);
    const auto fb = with_floor.message(2);
    CHECK(fa.indices.size() == fb.indices.size());
    CHECK(std::equal(fa.indices.begin(), fa.indices.end(), fb.indices.begin(), fb.indices.end()));
    CHECK(std::memcmp(fa.values.data(), fb.values.data(), fa.values.size() * sizeof(float)) == 0);
    CHECK(plain.message(0).indices.size() == (s == 0 ? 10u : 1u));
  }
}

TEST_CASE("small tensors sent dense: decided at registration from the smallest density") {
  dgc_config cfg;
  cfg.small_tensors.min_kept = 8;
  cfg.small_tensors.action = gradcomp::small_tensor_action::dense;  // paper schedule: 0.1% at the end
  dgc_compressor<float> c(cfg);
  CHECK_FALSE(c.info(c.add_tensor("conv1", {8, 25})).compressed);     // 1 at 0.1%
  CHECK_FALSE(c.info(c.add_tensor("edge", {7, 1000})).compressed);    // 7 at 0.1%
  CHECK(c.info(c.add_tensor("enough", {8, 1000})).compressed);        // 8 at 0.1%
  CHECK(c.info(c.add_tensor("forced", {8, 25}, tensor_mode::compressed)).compressed);  // override kept
  CHECK_FALSE(c.info(c.add_tensor("bias", {50000})).compressed);      // the policy's rank-1 rule
  const auto layout = c.receiver();
  CHECK(layout.tensors[0].dense);
  CHECK(layout.tensors[0].max_kept == 0);
  CHECK_FALSE(layout.tensors[2].dense);
  CHECK(layout.tensors[3].max_kept == 50);  // 25% of 200, no floor with the dense action

  cfg.small_tensors.action = static_cast<gradcomp::small_tensor_action>(7);
  CHECK_THROWS_AS(dgc_compressor<float>{cfg}, gradcomp::error);
}

TEST_CASE("kept_rule: kept_count raised to the floor, never above n") {
  CHECK(gradcomp::kept_rule{0.001, 8}(200) == 8);
  CHECK(gradcomp::kept_rule{0.001, 8}(5) == 5);
  CHECK(gradcomp::kept_rule{0.001, 8}(0) == 0);
  CHECK(gradcomp::kept_rule{0.001, 8}(100000) == 100);
  CHECK(gradcomp::kept_rule{0.05, 8}(200) == 10);
  for (std::size_t n : {1u, 7u, 999u, 1001u, 123457u}) CHECK(gradcomp::kept_rule{0.001, 0}(n) == gradcomp::kept_count(n, 0.001));
}

TEST_CASE("the warm-up schedule drives the number of kept elements") {
  dgc_config cfg;  // paper schedule, per epoch
  cfg.selection = gradcomp::selection_method::exact_topk;
  dgc_compressor<float> c(cfg);
  c.add_tensor("w", {1000, 100});
  const std::size_t expected[] = {25000, 6250, 1563, 391, 100, 100};
  for (std::size_t e = 0; e < 6; ++e) {
    c.set_epoch(e);
    CHECK(c.compress(std::vector<span<const float>>{}).error() == errc::wrong_tensor_count);
    const auto g = random_vector<float>(100000, dist::gaussian, 600 + e);
    const auto s = gradcomp_test::compress_step(c, std::vector<span<const float>>{span<const float>(g.data(), g.size())});
    REQUIRE(s);
    CAPTURE(e);
    CHECK(s->stage == std::min<std::size_t>(e, 4));
    CHECK(s->kept_elements == expected[e]);
    CHECK(c.message(0).indices.size() == expected[e]);
  }
}

TEST_CASE("the same seed gives the same messages on every worker") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(0.001);
  cfg.seed = 1234;
  dgc_compressor<float> a(cfg), b(cfg);
  for (auto* c : {&a, &b}) c->add_tensor("w", {2000, 1000});
  for (std::size_t step = 0; step < 3; ++step) {
    const auto g = random_vector<float>(2000000, dist::student_t, 50 + step);
    const std::vector<span<const float>> gs{span<const float>(g.data(), g.size())};
    const auto ra = gradcomp_test::compress_step(a, gs);
    const auto rb = gradcomp_test::compress_step(b, gs);
    REQUIRE(ra);
    REQUIRE(rb);
    CHECK(ra->kept_elements <= 2000);
    CHECK(ra->kept_elements >= 1600);
    CHECK(a.selection(0).sample_count == b.selection(0).sample_count);
    const auto ma = a.message(0), mb = b.message(0);
    REQUIRE(ma.indices.size() == mb.indices.size());
    CHECK(bitwise_equal(ma.indices, mb.indices));
    CHECK(bitwise_equal(ma.values, mb.values));
  }
}

TEST_CASE("local clipping per tensor and with the global norm") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(1.0);
  cfg.clip_norm = 2.0;
  cfg.num_workers = 4;  // local threshold 2 / sqrt(4) = 1
  cfg.momentum = 0.0;
  const std::vector<float> g1 = {3.0f, 4.0f}, g2 = {0.0f, 0.5f};  // norms 5 and 0.5
  const std::vector<span<const float>> gs{span<const float>(g1.data(), 2), span<const float>(g2.data(), 2)};
  for (auto scope : {gradcomp::clip_scope::global_norm, gradcomp::clip_scope::per_tensor}) {
    cfg.clipping = scope;
    dgc_compressor<float> c(cfg);
    c.add_tensor("a", {2}, tensor_mode::compressed);
    c.add_tensor("b", {2}, tensor_mode::compressed);
    const auto s = gradcomp_test::compress_step(c, gs);
    REQUIRE(s);
    const auto a = c.message(0).values, b = c.message(1).values;
    if (scope == gradcomp::clip_scope::global_norm) {
      const float k = static_cast<float>(1.0 / std::sqrt(25.25));
      CHECK(s->clip_coefficient == doctest::Approx(1.0 / std::sqrt(25.25)));
      CHECK(a[0] == 3.0f * k);
      CHECK(b[1] == 0.5f * k);
    } else {
      CHECK(s->clip_coefficient == doctest::Approx(0.2));
      CHECK(a[0] == 3.0f * 0.2f);
      CHECK(a[1] == 4.0f * 0.2f);
      CHECK(b[1] == 0.5f);  // below the threshold: untouched
    }
  }
}

TEST_CASE("the aggregator sums duplicates across workers, averages, and rejects bad messages") {
  dgc_config cfg;
  cfg.momentum = 0.0;
  dgc_compressor<float> c(cfg);
  c.add_tensor("w", {2, 4});
  c.add_tensor("b", {2});
  dgc_aggregator<float> agg(c);
  const std::vector<std::uint32_t> i1 = {1, 5}, i2 = {5, 7};
  const std::vector<float> v1 = {1.0f, 2.0f}, v2 = {4.0f, 8.0f}, dense = {1.0f, 3.0f};
  gradcomp::tensor_message<float> m1{0, 8, false, {i1.data(), 2}, {v1.data(), 2}};
  gradcomp::tensor_message<float> m2{0, 8, false, {i2.data(), 2}, {v2.data(), 2}};
  gradcomp::tensor_message<float> mb{1, 2, true, {}, {dense.data(), 2}};
  agg.begin();
  REQUIRE(agg.add(m1));
  REQUIRE(agg.add(m2));
  REQUIRE(agg.add(mb));
  CHECK(agg.finish(2).error() == errc::invalid_argument);  // tensor 1 got one message, not two
  REQUIRE(agg.add(mb));
  REQUIRE(agg.finish(2));
  const std::vector<float> expect = {0, 0.5f, 0, 0, 0, 3.0f, 0, 4.0f};
  CHECK(std::vector<float>(agg.update(0).begin(), agg.update(0).end()) == expect);
  CHECK(std::vector<float>(agg.update(1).begin(), agg.update(1).end()) == dense);

  agg.begin();
  const std::vector<std::uint32_t> bad = {1, 8};
  gradcomp::tensor_message<float> out_of_range{0, 8, false, {bad.data(), 2}, {v1.data(), 2}};
  CHECK(agg.add(out_of_range).error() == errc::index_out_of_range);
  gradcomp::tensor_message<float> wrong_numel{0, 9, false, {i1.data(), 2}, {v1.data(), 2}};
  CHECK(agg.add(wrong_numel).error() == errc::layout_mismatch);
  gradcomp::tensor_message<float> wrong_kind{1, 2, false, {i1.data(), 1}, {v1.data(), 1}};
  CHECK(agg.add(wrong_kind).error() == errc::layout_mismatch);
  gradcomp::tensor_message<float> unknown{2, 2, true, {}, {dense.data(), 2}};
  CHECK(agg.add(unknown).error() == errc::unknown_tensor);
  CHECK(std::vector<float>(agg.update(0).begin(), agg.update(0).end()) == std::vector<float>(8, 0.0f));
  CHECK(agg.finish(0).error() == errc::invalid_argument);
}

TEST_CASE("edge cases: empty tensors, wrong sizes, invalid configuration") {
  dgc_config cfg;
  dgc_compressor<float> c(cfg);
  c.add_tensor("empty", {0, 5}, tensor_mode::compressed);
  c.add_tensor("w", {10, 10});
  const std::vector<float> g(100, 1.0f), short_g(99, 1.0f);
  auto r = c.compress({span<const float>(), span<const float>(g.data(), g.size())});
  REQUIRE(r);
  CHECK(c.message(0).indices.size() == 0);
  CHECK(c.message(1).indices.size() == 25);  // all-equal magnitudes: the exact path, 25% of 100
  r = c.compress({span<const float>(), span<const float>(short_g.data(), short_g.size())});
  CHECK(r.error() == errc::size_mismatch);

  dgc_config bad = cfg;
  bad.momentum = 1.0;
  CHECK_THROWS_AS(dgc_compressor<float>{bad}, gradcomp::error);
  bad = cfg;
  bad.num_workers = 0;
  CHECK_THROWS_AS(dgc_compressor<float>{bad}, gradcomp::error);
  bad = cfg;
  bad.sampling.sample_ratio = 0.0;
  CHECK_THROWS_AS(dgc_compressor<float>{bad}, gradcomp::error);
}

TEST_CASE("workers exchange encoded messages: the aggregate equals the in-memory one") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(0.01);
  const std::size_t workers = 3;
  std::vector<dgc_compressor<float>> comp(workers, dgc_compressor<float>(cfg));
  for (auto& c : comp) register_model(c);
  dgc_aggregator<float> direct(comp[0]), wired(comp[0]);
  gradcomp::wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> buffer(comp[0].max_message_bytes(opt));
  for (std::size_t step = 0; step < 3; ++step) {
    direct.begin();
    wired.begin();
    for (std::size_t r = 0; r < workers; ++r) {
      REQUIRE(comp[r].compress(views(model_gradients<float>(40 * step + r))));
      for (std::size_t t = 0; t < kShapes.size(); ++t) REQUIRE(direct.add(comp[r].message(t)));
      const auto n = comp[r].encode_message(opt, span<std::byte>(buffer.data(), buffer.size()));
      REQUIRE(n);
      REQUIRE(wired.add(span<const std::byte>(buffer.data(), *n)));
    }
    REQUIRE(direct.finish(workers));
    REQUIRE(wired.finish(workers));
    for (std::size_t t = 0; t < kShapes.size(); ++t) CHECK(bitwise_equal(wired.update(t),
        std::vector<float>(direct.update(t).begin(), direct.update(t).end())));
  }
  // A damaged message adds nothing: finish then sees a missing message.
  wired.begin();
  REQUIRE(comp[0].compress(views(model_gradients<float>(999))));
  const auto n = comp[0].encode_message(opt, span<std::byte>(buffer.data(), buffer.size()));
  REQUIRE(n);
  buffer[*n / 2] ^= std::byte{1};
  CHECK(wired.add(span<const std::byte>(buffer.data(), *n)).error() == errc::checksum_mismatch);
  CHECK(wired.finish(1).error() == errc::invalid_argument);
}

// The compressor updates the accumulator and counts the first selection round in one fused pass,
// with the threshold taken from a sample of the updated values. That must select exactly what
// the separate building blocks select: update (momentum_correction), then
// sampled_threshold_select on the accumulator with the same seed.
TEST_CASE_TEMPLATE("the fused step selects exactly what update-then-select selects", T, float, double) {
  const std::size_t n = 200003;  // large enough for the sampled path
  for (const bool nesterov : {false, true})
    for (const bool correction : {true, false})
      for (const double density : {0.001, 0.01}) {
        CAPTURE(nesterov);
        CAPTURE(correction);
        CAPTURE(density);
        dgc_config cfg;
        cfg.nesterov = nesterov;
        cfg.momentum_correction = correction;
        cfg.schedule = warmup_schedule::constant(density);
        cfg.clip_norm = 10.0;  // active: the scale is not 1
        cfg.seed = 99;
        dgc_compressor<T> c(cfg);
        c.add_tensor("w", {n}, tensor_mode::compressed);
        std::vector<T> u(n, T(0)), v(n, T(0));
        const auto kind = cfg.sender_momentum();
        const T m = static_cast<T>(cfg.momentum);
        for (std::size_t step = 0; step < 4; ++step) {
          const auto g = random_vector<T>(n, dist::student_t, 1000 + step);
          const std::vector<span<const T>> grads = {span<const T>(g.data(), n)};
          const auto stats = gradcomp_test::compress_step(c, grads);
          REQUIRE(stats);
          const T coef = static_cast<T>(stats->clip_coefficient);
          CHECK(coef < T(1));
          REQUIRE(gradcomp::momentum_correction(gradcomp::cpu_backend{}, kind, m, coef,
                                                span<const T>(g.data(), n), span<T>(u.data(), u.size()),
                                                span<T>(v.data(), n)));
          const std::size_t k = gradcomp::kept_count(n, density);
          std::vector<std::uint32_t> idx(k);
          const auto sel = gradcomp::sampled_threshold_select(
              gradcomp::cpu_backend{}, span<const T>(v.data(), n), k, cfg.sampling,
              gradcomp::detail::derive_seed(cfg.seed, 0, step), span<std::uint32_t>(idx.data(), k));
          REQUIRE(sel);
          idx.resize(sel->count);
          const auto msg = c.message(0);
          REQUIRE(msg.indices.size() == idx.size());
          CHECK(bitwise_equal(msg.indices, idx));
          for (std::size_t j = 0; j < idx.size(); ++j) {
            REQUIRE(msg.values[j] == v[idx[j]]);
            v[idx[j]] = T(0);
            if (correction) u[idx[j]] = T(0);
          }
          CHECK(bitwise_equal(c.residual(0), v));
        }
      }
}

// Spreading the tensors over threads changes nothing: messages, residuals and statistics are
// bitwise those of one thread, step after step (guided passes, clipping and the warm-up
// included), and a bad gradient is refused the same way.
TEST_CASE("compress gives bitwise the same result on any number of threads") {
  const std::vector<std::vector<std::size_t>> shapes = {{300, 700}, {64}, {512, 300}, {10, 64}, {90000}, {7, 7}};
  auto make = [&](std::size_t threads) {
    dgc_config cfg;
    cfg.threads = threads;
    cfg.clip_norm = 20.0;
    cfg.clipping = gradcomp::clip_scope::per_tensor;
    cfg.num_workers = 4;
    cfg.seed = 5;
    cfg.schedule = warmup_schedule::paper(0.001, 2);
    cfg.policy.compress_vectors = true;
    dgc_compressor<float> c(cfg);
    for (std::size_t t = 0; t < shapes.size(); ++t) c.add_tensor(tensor_name(t), shapes[t]);
    return c;
  };
  dgc_compressor<float> one = make(1);
  dgc_compressor<float> three = make(3);
  CHECK_THROWS_AS(make(0), gradcomp::error);
  for (std::size_t step = 0; step < 6; ++step) {
    CAPTURE(step);
    if (step == 3) {
      one.set_epoch(1);
      three.set_epoch(1);
    }
    std::vector<std::vector<float>> g;
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      std::size_t n = 1;
      for (auto d : shapes[t]) n *= d;
      g.push_back(random_vector<float>(n, dist::student_t, 1000 * step + t));
    }
    const auto a = gradcomp_test::compress_step(one, views(g));
    const auto b = gradcomp_test::compress_step(three, views(g));
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->kept_elements == b->kept_elements);
    CHECK(a->target_elements == b->target_elements);
    CHECK(a->clip_coefficient == b->clip_coefficient);
    CHECK(a->clip_coefficient < 1.0);
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      const auto ma = one.message(t), mb = three.message(t);
      REQUIRE(ma.values.size() == mb.values.size());
      CHECK(bitwise_equal(ma.values, mb.values));
      CHECK(bitwise_equal(ma.indices, mb.indices));
      const auto ra = one.residual(t), rb = three.residual(t);
      CHECK(bitwise_equal(ra, rb));
    }
  }
  std::vector<std::vector<float>> bad;
  for (const auto& s : shapes) {
    std::size_t n = 1;
    for (auto d : s) n *= d;
    bad.emplace_back(n, 0.5f);
  }
  bad[4][123] = std::numeric_limits<float>::infinity();
  CHECK(gradcomp_test::compress_step(three, views(bad)).error() == errc::non_finite_input);
  CHECK(three.step() == 6);
}
