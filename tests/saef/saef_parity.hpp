// Step-Ahead Error Feedback on a backend against the CPU backend: workers and a server of the same
// compressor on `Backend` and on the CPU take the same steps (the gradients at the CPU's
// step-ahead points), and every step's step-ahead points, messages, server update, weights and,
// after averaging, residuals must be bitwise the same.
#pragma once

#include <gradcomp/backend_memory.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include "support/quantiser_helpers.hpp"
#include "support/transfer.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

namespace gradcomp_test {
namespace saef_parity {

inline const std::vector<std::vector<std::size_t>>& shapes() {
  static const std::vector<std::vector<std::size_t>> s = {{20, 30}, {30}, {7, 5, 3, 3}};
  return s;
}
constexpr std::size_t workers = 3;

// Top-k with error feedback: DGC's exact top-k without momentum correction (5% kept).
template <class B>
gradcomp::dgc_compressor<float, B> topk(const B& b) {
  gradcomp::dgc_config cfg;
  cfg.momentum_correction = false;
  cfg.momentum_masking = false;
  cfg.selection = gradcomp::selection_method::exact_topk;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.05);
  gradcomp::dgc_compressor<float, B> c(cfg, b);
  for (std::size_t t = 0; t < shapes().size(); ++t) c.add_tensor(tensor_name(t), shapes()[t]);
  return c;
}

// Scaled signs with error feedback, learning rate 1.
template <class B>
gradcomp::ef_signsgd_compressor<float, B> scaled_sign(const B& b) {
  gradcomp::ef_signsgd_config cfg;
  cfg.learning_rate = 1.0;
  gradcomp::ef_signsgd_compressor<float, B> c(cfg, b);
  for (std::size_t t = 0; t < shapes().size(); ++t) c.add_tensor(tensor_name(t), shapes()[t]);
  return c;
}

template <class B>
std::vector<gradcomp::backend_span<const float, B>> views_of(const B&,
                                                             const std::vector<gradcomp::backend_buffer<float, B>>& v) {
  std::vector<gradcomp::backend_span<const float, B>> out;
  for (const auto& x : v) out.push_back(x.view());
  return out;
}

inline std::vector<gradcomp::span<const float>> views_of(const std::vector<std::vector<float>>& v) {
  std::vector<gradcomp::span<const float>> out;
  for (const auto& x : v) out.emplace_back(x.data(), x.size());
  return out;
}

inline bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

template <class S>
std::vector<float> host_copy(const S& s) {
  return std::vector<float>(s.begin(), s.end());
}

// Worker k's gradient at weights x: a diagonal quadratic plus noise of step s.
inline std::vector<std::vector<float>> gradient_at(const std::vector<std::vector<float>>& x, std::size_t k,
                                                   std::size_t s) {
  std::vector<std::vector<float>> g;
  for (std::size_t t = 0; t < x.size(); ++t) {
    std::mt19937_64 rng(1000 * s + 31 * t + 7 * k + 3);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    std::vector<float> v(x[t].size());
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = (0.5f + static_cast<float>((i + k) % 7) * 0.25f) * (x[t][i] - std::sin(static_cast<float>(i + 13 * t + k))) +
             noise(rng);
    g.push_back(std::move(v));
  }
  return g;
}

template <class C>
std::vector<std::byte> encoded(C& c) {
  std::vector<std::byte> out(c.max_message_bytes());
  const auto n = c.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size()));
  REQUIRE(n);
  out.resize(*n);
  return out;
}

// Ten steps of the loop (step ahead, residuals averaged every 3 steps) with make(backend)'s
// compressors on `b` and on the CPU backend, compared at every step.
template <class B, class Make>
void check_against_cpu(const B& b, Make make) {
  const gradcomp::cpu_backend host{};
  gradcomp::saef_config cfg;
  cfg.learning_rate = 0.05;
  cfg.momentum = 0.9;
  cfg.average_every = 3;
  using cpu_compressor = decltype(make(host));
  using compressor = decltype(make(b));
  std::vector<cpu_compressor> cpu_cs;
  std::vector<compressor> cs;
  for (std::size_t k = 0; k < workers; ++k) {
    cpu_cs.push_back(make(host));
    cs.push_back(make(b));
  }
  auto cpu_sc = make(host);
  auto sc = make(b);
  std::vector<gradcomp::saef_worker<cpu_compressor>> cpu_w;
  std::vector<gradcomp::saef_worker<compressor>> w;
  for (std::size_t k = 0; k < workers; ++k) {
    cpu_w.emplace_back(cpu_cs[k], cfg);
    w.emplace_back(cs[k], cfg);
  }
  gradcomp::saef_server<cpu_compressor> cpu_server(cpu_sc);
  gradcomp::saef_server<compressor> server(sc);
  std::vector<std::vector<float>> x;
  std::vector<gradcomp::backend_buffer<float, B>> xd, at_d;
  for (const auto& s : shapes()) {
    std::size_t n = 1;
    for (std::size_t d : s) n *= d;
    x.emplace_back(n, 0.0f);
    xd.push_back(upload(b, x.back()));
    at_d.push_back(gradcomp::allocate_buffer<float>(b, n));
  }
  std::size_t averaged = 0;
  for (std::size_t s = 0; s < 10; ++s) {
    CAPTURE(s);
    gradcomp::aggregator<float> agg(cpu_w[0].receiver());
    agg.begin();
    for (std::size_t k = 0; k < workers; ++k) {
      CAPTURE(k);
      auto at = x;
      for (std::size_t t = 0; t < x.size(); ++t) {
        REQUIRE(cpu_w[k].lookahead(t, gradcomp::span<const float>(x[t].data(), x[t].size()),
                                   gradcomp::span<float>(at[t].data(), at[t].size())));
        REQUIRE(w[k].lookahead(t, gradcomp::readonly(xd[t].view()), at_d[t].view()));
        CHECK(same(download(b, gradcomp::readonly(at_d[t].view())), at[t]));
      }
      const auto g = gradient_at(at, k, s);
      std::vector<gradcomp::backend_buffer<float, B>> gd;
      for (const auto& v : g) gd.push_back(upload(b, v));
      REQUIRE(cpu_w[k].step(views_of(g)));
      REQUIRE(w[k].step(views_of(b, gd)));
      const auto sent = encoded(cpu_w[k].compressor());
      CHECK(encoded(w[k].compressor()) == sent);
      for (std::size_t t = 0; t < x.size(); ++t) {
        CHECK(same(download(b, w[k].update(t)), host_copy(cpu_w[k].update(t))));
        CHECK(same(download(b, w[k].momentum_buffer(t)), host_copy(cpu_w[k].momentum_buffer(t))));
      }
      REQUIRE(agg.add(gradcomp::span<const std::byte>(sent.data(), sent.size())));
    }
    REQUIRE(agg.finish(workers));
    std::vector<std::vector<float>> mean;
    std::vector<gradcomp::backend_buffer<float, B>> mean_d;
    for (std::size_t t = 0; t < x.size(); ++t) {
      mean.push_back(host_copy(agg.update(t)));
      mean_d.push_back(upload(b, mean.back()));
    }
    REQUIRE(cpu_server.step(views_of(mean)));
    REQUIRE(server.step(views_of(b, mean_d)));
    for (std::size_t t = 0; t < x.size(); ++t) {
      CHECK(same(download(b, server.update(t)), host_copy(cpu_server.update(t))));
      REQUIRE(cpu_server.apply(t, gradcomp::span<float>(x[t].data(), x[t].size())));
      REQUIRE(server.apply(t, xd[t].view()));
      CHECK(same(download(b, gradcomp::readonly(xd[t].view())), x[t]));
    }
    if (cpu_w[0].averaging_due()) {
      REQUIRE(w[0].averaging_due());
      ++averaged;
      std::vector<std::vector<float>> e_mean;
      std::vector<gradcomp::backend_buffer<float, B>> e_mean_d;
      for (std::size_t t = 0; t < x.size(); ++t) {
        std::vector<float> acc(cpu_w[0].residual(t).size(), 0.0f);
        for (auto& cw : cpu_w)
          for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += cw.residual(t)[i];
        for (auto& a : acc) a /= static_cast<float>(workers);
        e_mean_d.push_back(upload(b, acc));
        e_mean.push_back(std::move(acc));
      }
      for (std::size_t k = 0; k < workers; ++k) {
        REQUIRE(cpu_w[k].set_residuals(views_of(e_mean)));
        REQUIRE(w[k].set_residuals(views_of(b, e_mean_d)));
        for (std::size_t t = 0; t < x.size(); ++t) CHECK(same(download(b, w[k].residual(t)), e_mean[t]));
      }
    }
  }
  CHECK(averaged == 3);
  // The weights moved: the comparison is not of zeros.
  double moved = 0.0;
  for (const auto& v : x)
    for (const float y : v) moved += std::fabs(y);
  CHECK(moved > 1.0);
}

}  // namespace saef_parity
}  // namespace gradcomp_test
