// PowerSGD on another backend against the CPU backend (tests/thrust/test_thrust_powersgd.cpp):
// workers on backend B and on the CPU take the same steps, each round's messages averaged by a
// host aggregator in worker order (tests/powersgd/rounds.hpp); every update, error and Q comes out
// bitwise the same, and so does a snapshot, which restores across backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/aggregator.hpp>
#include <gradcomp/backend_memory.hpp>
#include <gradcomp/powersgd/snapshot.hpp>

#include "powersgd/rounds.hpp"
#include "support/transfer.hpp"
#include "thrust/data.hpp"

namespace gradcomp_test {
namespace powersgd_parity {

template <class B>
using worker = gradcomp::powersgd_compressor<float, B>;

inline gradcomp::powersgd_config config() {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  cfg.start_step = 1;  // one dense step first
  cfg.seed = 3;
  cfg.orthogonalization_epsilon = 1e-8;
  return cfg;
}

template <class B>
std::vector<worker<B>> workers(const B& b, const gradcomp::powersgd_config& cfg, std::size_t n) {
  std::vector<worker<B>> out;
  for (std::size_t w = 0; w < n; ++w) {
    out.emplace_back(cfg, b);
    out.back().add_tensor("conv", {8, 3, 3, 3});
    out.back().add_tensor("bias", {8});
    out.back().add_tensor("fc", {12, 40});
  }
  return out;
}

inline std::vector<std::vector<std::vector<float>>> step_grads(std::uint64_t step, std::size_t n) {
  std::vector<std::vector<std::vector<float>>> g(n);
  for (std::size_t w = 0; w < n; ++w)
    g[w] = {gaussian<float>(216, 500 * step + w), gaussian<float>(8, 500 * step + 50 + w),
            gaussian<float>(480, 500 * step + 100 + w)};
  return g;
}

// One step of workers on B: the gradients uploaded, each round's messages averaged on the host,
// the average uploaded and given back to every worker.
template <class B>
void step_together(const B& b, std::vector<worker<B>>& ws, const std::vector<std::vector<std::vector<float>>>& grads) {
  for (std::size_t w = 0; w < ws.size(); ++w) {
    std::vector<gradcomp::backend_buffer<float, B>> up;
    std::vector<gradcomp::backend_span<const float, B>> views;
    for (const auto& g : grads[w]) up.push_back(upload(b, g));
    for (const auto& d : up) views.push_back(d.view());
    REQUIRE(ws[w].begin_step(gradcomp::span<const gradcomp::backend_span<const float, B>>(views.data(), views.size())));
  }
  while (ws[0].round() != 0) {
    const auto d = upload(b, round_average(ws));
    for (auto& c : ws) REQUIRE(c.end_round(readonly(d.view())));
  }
}

// Every update, error and Q of a worker, on the host.
template <class B>
std::vector<float> state_of(const B& b, const worker<B>& c) {
  std::vector<float> out;
  for (std::size_t t = 0; t < c.num_tensors(); ++t)
    for (const auto& v : {download(b, c.update(t)), download(b, c.error_feedback(t)), download(b, c.q(t))})
      out.insert(out.end(), v.begin(), v.end());
  return out;
}

// Steps on B and on the CPU from the same gradients: bitwise the same state after every step;
// then a snapshot of B's worker restores into a CPU worker and the reverse, each continuing with
// the same bits.
template <class B>
void check_against_cpu(const B& b, const gradcomp::powersgd_config& cfg) {
  auto dev = workers(b, cfg, 2);
  auto host = workers(gradcomp::cpu_backend{}, cfg, 2);
  for (std::uint64_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    const auto g = step_grads(s, 2);
    step_together(b, dev, g);
    gradcomp_test::step_together(host, g);
    for (std::size_t w = 0; w < 2; ++w) CHECK(bitwise_same(state_of(b, dev[w]), state_of(gradcomp::cpu_backend{}, host[w])));
  }
  // Across backends through snapshots: the device's into a CPU worker, the CPU's into a device one.
  auto from_dev = workers(gradcomp::cpu_backend{}, cfg, 2);
  auto from_host = workers(b, cfg, 2);
  for (std::size_t w = 0; w < 2; ++w) {
    const auto a = gradcomp::save_snapshot(dev[w]);
    const auto h = gradcomp::save_snapshot(host[w]);
    CHECK(a == h);
    REQUIRE(gradcomp::restore_snapshot(from_dev[w], gradcomp::span<const std::byte>(a.data(), a.size())));
    REQUIRE(gradcomp::restore_snapshot(from_host[w], gradcomp::span<const std::byte>(h.data(), h.size())));
  }
  const auto g = step_grads(4, 2);
  step_together(b, dev, g);
  step_together(b, from_host, g);
  gradcomp_test::step_together(from_dev, g);
  for (std::size_t w = 0; w < 2; ++w) {
    CHECK(bitwise_same(state_of(b, from_host[w]), state_of(b, dev[w])));
    CHECK(bitwise_same(state_of(gradcomp::cpu_backend{}, from_dev[w]), state_of(b, dev[w])));
  }
}

}  // namespace powersgd_parity
}  // namespace gradcomp_test
