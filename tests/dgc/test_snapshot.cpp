// Snapshots: train, save, restore into fresh objects, continue: bitwise the same as never stopping.
#include <gradcomp/dgc/snapshot.hpp>
#include <gradcomp/wire/decode.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "support/inputs.hpp"

using namespace gradcomp;
using namespace gradcomp_test;

namespace {

const std::vector<std::vector<std::size_t>> kSnapshotShapes = {{200, 300}, {300}, {50, 40}};

dgc_config make_config(std::uint64_t seed) {
  dgc_config cfg;
  cfg.nesterov = true;
  cfg.clip_norm = 50.0;
  cfg.num_workers = 2;
  cfg.seed = seed;
  cfg.schedule = warmup_schedule::paper(0.001, 4, schedule_unit::step, 2);
  return cfg;
}

template <class T>
void register_snapshot_model(dgc_compressor<T>& c) {
  const char* names[] = {"a", "b", "c"};
  for (std::size_t t = 0; t < kSnapshotShapes.size(); ++t) c.add_tensor(names[t], kSnapshotShapes[t]);
}

// One step's gradients of a model (the tensors' shapes), heavy-tailed.
template <class T>
std::vector<std::vector<T>> gradients(std::size_t step,
                                      const std::vector<std::vector<std::size_t>>& shapes = kSnapshotShapes) {
  std::vector<std::vector<T>> g;
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    std::size_t n = 1;
    for (auto d : shapes[t]) n *= d;
    g.push_back(random_vector<T>(n, dist::student_t, 1000 * step + t));
  }
  return g;
}

template <class T>
bool same_message(const tensor_message<T>& a, const tensor_message<T>& b) {
  return a.dense == b.dense && bitwise_equal(a.indices, b.indices) && bitwise_equal(a.values, b.values);
}

// One training step of a single worker: compress, aggregate, apply.
template <class T>
void step(dgc_compressor<T>& c, dgc_aggregator<T>& agg, std::vector<std::vector<T>>& w,
          std::size_t s) {
  const auto g = gradients<T>(s);
  std::vector<span<const T>> views;
  for (const auto& x : g) views.emplace_back(x.data(), x.size());
  REQUIRE(c.compress(views));
  agg.begin();
  for (std::size_t t = 0; t < g.size(); ++t) REQUIRE(agg.add(c.message(t)));
  REQUIRE(agg.finish(1));
  for (std::size_t t = 0; t < w.size(); ++t)
    for (std::size_t i = 0; i < w[t].size(); ++i) w[t][i] -= T(0.1) * agg.update(t)[i];
}

}  // namespace

TEST_CASE_TEMPLATE("save, restore into fresh objects, continue: bitwise identical", T, float, double) {
  dgc_compressor<T> a(make_config(7));
  register_snapshot_model(a);
  dgc_aggregator<T> agg_a(a);
  auto w_a = gradients<T>(999);
  for (std::size_t s = 0; s < 5; ++s) step(a, agg_a, w_a, s);

  const auto snap = save_snapshot(a);
  CHECK(snap.size() == snapshot_bytes(a));
  const auto agg_snap = save_snapshot(agg_a);
  const auto w_saved = w_a;

  // A fresh process: another seed in its configuration, which the snapshot replaces.
  dgc_compressor<T> b(make_config(12345));
  register_snapshot_model(b);
  dgc_aggregator<T> agg_b(b);
  REQUIRE(restore_snapshot(b, span<const std::byte>(snap.data(), snap.size())));
  REQUIRE(restore_snapshot(agg_b, span<const std::byte>(agg_snap.data(), agg_snap.size())));
  CHECK(b.step() == 5);
  CHECK(b.config().seed == 7);
  auto w_b = w_saved;

  for (std::size_t s = 5; s < 12; ++s) {
    step(a, agg_a, w_a, s);
    step(b, agg_b, w_b, s);
    for (std::size_t t = 0; t < kSnapshotShapes.size(); ++t) {
      CAPTURE(s);
      CAPTURE(t);
      CHECK(same_message(a.message(t), b.message(t)));
      CHECK(bitwise_equal(a.residual(t), b.residual(t)));
    }
  }
  for (std::size_t t = 0; t < w_a.size(); ++t)
    CHECK(bitwise_equal(span<const T>(w_a[t].data(), w_a[t].size()), span<const T>(w_b[t].data(), w_b[t].size())));
}

TEST_CASE("a snapshot is refused, and nothing changes, when it does not fit") {
  dgc_compressor<float> a(make_config(1));
  register_snapshot_model(a);
  dgc_aggregator<float> agg(a);
  std::vector<std::vector<float>> w = gradients<float>(50);
  for (std::size_t s = 0; s < 3; ++s) step(a, agg, w, s);
  const auto snap = save_snapshot(a);
  const span<const std::byte> msg(snap.data(), snap.size());

  dgc_compressor<float> other(make_config(1));  // different tensors
  other.add_tensor("a", {200, 300});
  CHECK(restore_snapshot(other, msg).error() == errc::layout_mismatch);
  CHECK(other.step() == 0);

  dgc_config no_momentum = make_config(1);
  no_momentum.momentum_correction = false;  // the snapshot records momentum correction
  dgc_compressor<float> nm(no_momentum);
  register_snapshot_model(nm);
  CHECK(restore_snapshot(nm, msg).error() == errc::config_mismatch);

  dgc_compressor<double> wider(make_config(1));  // fp64 state expected
  register_snapshot_model(wider);
  CHECK(restore_snapshot(wider, msg).error() == errc::layout_mismatch);

  dgc_compressor<float> fresh(make_config(1));
  register_snapshot_model(fresh);
  auto damaged = snap;
  damaged[damaged.size() / 2] ^= std::byte{0x40};
  CHECK(restore_snapshot(fresh, span<const std::byte>(damaged.data(), damaged.size())).error() ==
        errc::checksum_mismatch);
  CHECK(fresh.step() == 0);
  bool all_zero = true;
  for (float x : fresh.residual(0)) all_zero &= x == 0.0f;
  CHECK(all_zero);

  // A gradient message is not a snapshot.
  const auto m = a.message(0);
  const auto grad = wire::encode(span<const tensor_message<float>>(&m, 1));
  CHECK(restore_snapshot(fresh, span<const std::byte>(grad.data(), grad.size())).error() ==
        errc::layout_mismatch);
  // An aggregator snapshot is not a compressor snapshot.
  const auto agg_snap = save_snapshot(agg);
  CHECK(restore_snapshot(fresh, span<const std::byte>(agg_snap.data(), agg_snap.size())).error() ==
        errc::layout_mismatch);
  CHECK(wire::validate(msg));
}

// An empty tensor among compressed ones, in every position, with and without momentum
// correction: its residual section is followed by its momentum section like every other tensor's,
// so the snapshot validates, restores and continues bitwise (the empty tensor's momentum section
// was left out, and the snapshot was refused as section_not_allowed).
TEST_CASE("a snapshot with an empty tensor in any position restores and continues bitwise") {
  for (const bool momentum_correction : {true, false})
    for (std::size_t empty_at = 0; empty_at < 3; ++empty_at) {
      CAPTURE(momentum_correction);
      CAPTURE(empty_at);
      std::vector<std::vector<std::size_t>> shapes = {{3, 4}, {7}, {2, 5}};
      shapes[empty_at] = {0};
      dgc_config cfg = make_config(3);
      cfg.momentum_correction = momentum_correction;
      cfg.schedule = warmup_schedule::constant(0.25);
      cfg.policy = compression_policy::every_tensor();  // the empty tensor is compressed too
      const auto model = [&](dgc_compressor<float>& c) {
        for (std::size_t t = 0; t < shapes.size(); ++t) c.add_tensor("t" + std::to_string(t), shapes[t]);
      };
      const auto compress = [&](dgc_compressor<float>& c, std::size_t s) {
        const auto g = gradients<float>(s, shapes);
        std::vector<span<const float>> views;
        for (const auto& x : g) views.emplace_back(x.data(), x.size());
        REQUIRE(c.compress(views));
      };
      dgc_compressor<float> a(cfg);
      model(a);
      for (std::size_t s = 0; s < 3; ++s) compress(a, s);
      const auto snap = save_snapshot(a);
      const span<const std::byte> msg(snap.data(), snap.size());
      REQUIRE(wire::validate(msg));
      for (std::size_t t = 0; t < shapes.size(); ++t) REQUIRE(a.info(t).compressed);
      dgc_compressor<float> b(cfg);
      model(b);
      REQUIRE(restore_snapshot(b, msg));
      for (std::size_t s = 3; s < 5; ++s) {
        compress(a, s);
        compress(b, s);
        for (std::size_t t = 0; t < shapes.size(); ++t) {
          CHECK(same_message(a.message(t), b.message(t)));
          CHECK(bitwise_equal(a.residual(t), b.residual(t)));
        }
      }
    }
}
