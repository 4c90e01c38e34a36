// EF-SignSGD snapshots: save, restore into a fresh compressor, continue bitwise; the step counter
// comes back; another compressor's snapshot, another layout or damaged bytes change nothing.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace gradcomp;

namespace {

const std::vector<std::vector<std::size_t>> kShapes = {{40, 30}, {257}, {3, 3, 5}};

template <class T>
std::vector<std::vector<T>> gradients(std::size_t step) {
  std::vector<std::vector<T>> g;
  std::mt19937_64 rng(step + 101);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const auto& shape : kShapes) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<T> v(n);
    for (auto& x : v) x = static_cast<T>(normal(rng));
    g.push_back(std::move(v));
  }
  return g;
}

template <class T>
ef_signsgd_compressor<T> make(std::size_t tensors = kShapes.size()) {
  ef_signsgd_config cfg;
  cfg.learning_rate = 0.05;
  ef_signsgd_compressor<T> c(cfg);
  for (std::size_t t = 0; t < tensors; ++t) {
    std::string name = "t";
    name += std::to_string(t);
    c.add_tensor(name, kShapes[t], t == 1 ? tensor_mode::dense : tensor_mode::automatic);
  }
  return c;
}

template <class C>
std::vector<std::byte> step(C& c, std::size_t s) {
  using T = typename C::tensor_view::value_type;
  const auto g = gradients<std::remove_const_t<T>>(s);
  std::vector<typename C::tensor_view> v;
  for (const auto& x : g) v.emplace_back(x.data(), x.size());
  REQUIRE(c.compress(v));
  std::vector<std::byte> out(c.max_message_bytes());
  out.resize(c.encode_message({}, span<std::byte>(out.data(), out.size())).value());
  return out;
}

span<const std::byte> bytes(const std::vector<std::byte>& v) { return span<const std::byte>(v.data(), v.size()); }

}  // namespace

TEST_CASE_TEMPLATE("EF-SignSGD snapshot: restore into a fresh compressor and continue bitwise", T, float, double) {
  auto a = make<T>();
  for (std::size_t s = 0; s < 4; ++s) (void)step(a, s);
  const auto saved = save_snapshot(a);
  CHECK(saved.size() == snapshot_bytes(a));
  CHECK(saved.size() == snapshot_bytes(a, false) + wire::checksum_bytes);
  // Only the compressed tensors' errors are stored: tensor 1 goes whole and keeps none.
  const auto header = wire::validate(bytes(saved));
  REQUIRE(header);
  CHECK(header->section_count == 1 + 2);

  auto b = make<T>();
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
  auto c = make<float>();
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
  auto small = make<float>(2);
  CHECK(restore_snapshot(c, bytes(save_snapshot(small))).error() == errc::layout_mismatch);
  CHECK(restore_snapshot(small, bytes(before)).error() == errc::layout_mismatch);
  // Another value type.
  auto wide = make<double>();
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
