// PowerSGD on the Thrust backend: its products (a thread per row of M for P, per column for Q, per
// element of the update; a thread per orthogonalised matrix) bitwise the CPU backend's over
// several steps, with and without error feedback and warm start, at a rank whose columns take two
// reads of M; snapshots the same bytes and restored across backends; the same refusals.
#include <cmath>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "powersgd/powersgd_parity.hpp"
#include "thrust/systems.hpp"

// On the primary system only (OpenMP, or CUDA under nvcc): PowerSGD's kernels are element-wise
// for_each functors that Thrust's C++ system would only run one at a time, the separate backend's
// test runs them again, and the C++ system's instantiations cost the Release build 4.3 s of this
// file's 17.8 s.
TEST_CASE_TEMPLATE("thrust: PowerSGD's steps and snapshots are bitwise the CPU backend's", Backend,
                   gradcomp_test::primary_backend) {
  using namespace gradcomp_test::powersgd_parity;
  auto cfg = config();
  SUBCASE("warm start, error feedback") { check_against_cpu(Backend{}, cfg); }
  SUBCASE("rank 10: the products read M once per group of 8 columns") {
    cfg.rank = 10;                    // fc (12 x 40) at rank 10: groups of 8 and 2; conv at rank 8
    cfg.min_compression_rate = 0.25;  // so that both are compressed
    const auto ws = workers(gradcomp::cpu_backend{}, cfg, 1);
    REQUIRE(ws[0].rank(0) == 8);
    REQUIRE(ws[0].rank(2) == 10);
    check_against_cpu(Backend{}, cfg);
  }
  SUBCASE("neither") {
    cfg.warm_start = false;
    cfg.error_feedback = false;
    cfg.orthogonalization_epsilon = 0.0;
    check_against_cpu(Backend{}, cfg);
  }
}

TEST_CASE_TEMPLATE("thrust: PowerSGD refuses what the CPU backend refuses, with nothing changed", Backend,
                   gradcomp_test::primary_backend) {
  using namespace gradcomp_test::powersgd_parity;
  using gradcomp_test::bitwise_same;
  using gradcomp_test::download;
  using gradcomp_test::upload;
  const Backend b{};
  auto ws = workers(b, config(), 2);
  step_together(b, ws, step_grads(0, 2));
  step_together(b, ws, step_grads(1, 2));
  const auto before = state_of(b, ws[0]);
  auto g = step_grads(2, 2)[0];
  g[2][17] = std::nanf("");
  std::vector<gradcomp::backend_buffer<float, Backend>> up;
  std::vector<gradcomp::backend_span<const float, Backend>> views;
  for (const auto& x : g) up.push_back(upload(b, x));
  for (const auto& d : up) views.push_back(d.view());
  const gradcomp::span<const gradcomp::backend_span<const float, Backend>> all(views.data(), views.size());
  CHECK(ws[0].begin_step(all).error() == gradcomp::errc::non_finite_input);
  CHECK(ws[0].round() == 0);
  CHECK(bitwise_same(state_of(b, ws[0]), before));
  // A gradient whose sum with the error leaves float's range: an error of 3e38 restored from a
  // snapshot (the first value of the first residual section, after the headers and the state).
  auto snap = gradcomp::save_snapshot(ws[0], false);
  const float big = 3e38f;
  std::memcpy(snap.data() + gradcomp::wire::message_header_bytes + 2 * gradcomp::wire::section_header_bytes + 9 * 8, &big,
              sizeof big);
  REQUIRE(gradcomp::restore_snapshot(ws[0], gradcomp::span<const std::byte>(snap.data(), snap.size())));
  const auto restored = state_of(b, ws[0]);
  g[2][17] = 0.5f;
  g[0][0] = big;
  for (std::size_t t = 0; t < 3; ++t) up[t] = upload(b, g[t]), views[t] = up[t].view();
  CHECK(ws[0].begin_step(all).error() == gradcomp::errc::state_overflow);
  CHECK(ws[0].round() == 0);
  CHECK(bitwise_same(state_of(b, ws[0]), restored));
  // An average of the wrong size, then a NaN in one: each closes the step with nothing changed.
  for (std::size_t t = 0; t < 3; ++t) up[t] = upload(b, step_grads(2, 2)[0][t]), views[t] = up[t].view();
  REQUIRE(ws[0].begin_step(all));
  const auto short_average = upload(b, std::vector<float>(3, 0.5f));
  CHECK(ws[0].end_round(readonly(short_average.view())).error() == gradcomp::errc::size_mismatch);
  CHECK(ws[0].round() == 0);
  REQUIRE(ws[0].begin_step(all));
  std::vector<float> bad(ws[0].payload().size(), 0.25f);
  bad.back() = std::nanf("");
  const auto nan_average = upload(b, bad);
  CHECK(ws[0].end_round(readonly(nan_average.view())).error() == gradcomp::errc::non_finite_input);
  CHECK(bitwise_same(state_of(b, ws[0]), restored));
}
