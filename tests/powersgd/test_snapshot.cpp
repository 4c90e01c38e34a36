// powersgd_compressor's snapshots (powersgd/snapshot.hpp): a restored worker continues bit for bit
// (with warm start, without, before compression begins, without error feedback), the snapshot's
// sections are each compressed tensor's e and starting Q, and a snapshot of another layout,
// setting or method, or a damaged one, is refused with nothing changed.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/powersgd/snapshot.hpp>
#include <gradcomp/wire/decode.hpp>

#include "powersgd/rounds.hpp"
#include "thrust/data.hpp"

namespace {

using gradcomp::errc;
using gradcomp::span;
using gradcomp_test::gaussian;
using worker = gradcomp::powersgd_compressor<float>;
using grads_t = std::vector<std::vector<std::vector<float>>>;

std::vector<worker> workers(const gradcomp::powersgd_config& cfg, std::size_t n) {
  std::vector<worker> out;
  for (std::size_t w = 0; w < n; ++w) {
    out.emplace_back(cfg);
    out.back().add_tensor("conv", {8, 3, 3, 3});
    out.back().add_tensor("bias", {8});
    out.back().add_tensor("fc", {10, 20});
  }
  return out;
}

grads_t step_grads(std::uint64_t step, std::size_t n) {
  grads_t g(n);
  for (std::size_t w = 0; w < n; ++w)
    g[w] = {gaussian<float>(216, 1000 * step + w), gaussian<float>(8, 1000 * step + 10 + w),
            gaussian<float>(200, 1000 * step + 20 + w)};
  return g;
}

// Every update and e, and every Q once a compressing step made it (before, a restored worker's Q
// is the snapshot's, which it is to start from, and the saved worker's is still unset).
std::vector<float> state_of(const worker& c) {
  std::vector<float> out;
  for (std::size_t t = 0; t < c.num_tensors(); ++t) {
    for (const float x : c.update(t)) out.push_back(x);
    for (const float x : c.error_feedback(t)) out.push_back(x);
    if (c.step() > c.config().start_step)
      for (const float x : c.q(t)) out.push_back(x);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::byte> save(const worker& c, bool checksum = true) { return gradcomp::save_snapshot(c, checksum); }

gradcomp::powersgd_config rank2() {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  return cfg;
}

// Two workers after their first step together.
std::vector<worker> after_one_step(const gradcomp::powersgd_config& cfg) {
  auto a = workers(cfg, 2);
  gradcomp_test::step_together(a, step_grads(0, 2));
  return a;
}

// Runs `before` steps, snapshots every worker, runs `after` more; workers restored from the
// snapshots into fresh compressors run the same `after` steps: every update, e and Q bitwise equal.
void check_continuation(const gradcomp::powersgd_config& cfg, std::uint64_t before, std::uint64_t after) {
  auto a = workers(cfg, 2);
  for (std::uint64_t s = 0; s < before; ++s) gradcomp_test::step_together(a, step_grads(s, 2));
  std::vector<std::vector<std::byte>> saved;
  for (const auto& c : a) saved.push_back(save(c));
  gradcomp::powersgd_config other = cfg;
  other.seed = cfg.seed + 99;  // the snapshot's seed replaces it
  auto b = workers(other, 2);
  for (std::size_t w = 0; w < 2; ++w)
    REQUIRE(gradcomp::restore_snapshot(b[w], span<const std::byte>(saved[w].data(), saved[w].size())));
  CHECK(b[0].step() == before);
  CHECK(b[0].config().seed == cfg.seed);
  for (std::uint64_t s = before; s < before + after; ++s) {
    const auto g = step_grads(s, 2);
    gradcomp_test::step_together(a, g);
    gradcomp_test::step_together(b, g);
    for (std::size_t w = 0; w < 2; ++w) CHECK(same_bits(state_of(a[w]), state_of(b[w])));
  }
}

}  // namespace

TEST_CASE("powersgd snapshot: a restored worker continues bit for bit") {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  cfg.seed = 5;
  SUBCASE("warm start, error feedback") { check_continuation(cfg, 3, 3); }
  SUBCASE("before compression begins: the Q of the first compressing step is its draw") {
    cfg.start_step = 3;
    check_continuation(cfg, 1, 4);
  }
  SUBCASE("without warm start: every step draws") {
    cfg.warm_start = false;
    check_continuation(cfg, 2, 3);
  }
  SUBCASE("without error feedback") {
    cfg.error_feedback = false;
    check_continuation(cfg, 2, 3);
  }
  SUBCASE("a guard: without the snapshot, the fresh workers differ") {
    auto a = workers(cfg, 2), b = workers(cfg, 2);
    for (std::uint64_t s = 0; s < 2; ++s) gradcomp_test::step_together(a, step_grads(s, 2));
    const auto g = step_grads(2, 2);
    gradcomp_test::step_together(a, g);
    gradcomp_test::step_together(b, g);
    CHECK(!same_bits(state_of(a[0]), state_of(b[0])));
  }
}

TEST_CASE("powersgd snapshot: the state, then each compressed tensor's e and starting Q") {
  const gradcomp::powersgd_config cfg = rank2();
  const auto a = after_one_step(cfg);
  const auto msg = save(a[0]);
  CHECK(msg.size() == gradcomp::snapshot_bytes(a[0]));
  const span<const std::byte> m(msg.data(), msg.size());
  REQUIRE(gradcomp::wire::validate<float>(m));
  std::vector<gradcomp::wire::section_header> s;
  (void)gradcomp::wire::for_each_section(m, [&](const gradcomp::wire::section_header& h) { s.push_back(h); });
  using gradcomp::wire::section_role;
  REQUIRE(s.size() == 5);  // the bias is sent dense and keeps nothing
  CHECK(s[0].role == section_role::state);
  CHECK((s[1].role == section_role::residual && s[1].tensor == 0 && s[1].numel == 216));
  CHECK((s[2].role == section_role::factor && s[2].tensor == 0 && s[2].numel == 27 * 2));
  CHECK((s[3].role == section_role::residual && s[3].tensor == 2 && s[3].numel == 200));
  CHECK((s[4].role == section_role::factor && s[4].tensor == 2 && s[4].numel == 20 * 2));
  double words[gradcomp::wire::snapshot_state_words];
  REQUIRE(gradcomp::wire::decode_section<double>(m, s[0], span<std::uint32_t>(), span<double>(words, 9)));
  CHECK(words[gradcomp::wire::state_word::step_low] == 1.0);
  CHECK(words[gradcomp::wire::state_word::selection] == 7.0);
  // With warm start, the factor is the averaged Q of the last step.
  std::vector<float> q(40);
  REQUIRE(gradcomp::wire::decode_section<float>(m, s[4], span<std::uint32_t>(), span<float>(q.data(), q.size())));
  const auto want = a[0].q(2);
  CHECK(std::memcmp(q.data(), want.data(), q.size() * sizeof(float)) == 0);
}

TEST_CASE("powersgd snapshot: refused with nothing changed") {
  const gradcomp::powersgd_config cfg = rank2();
  const auto a = after_one_step(cfg);
  const auto msg = save(a[0]);
  const span<const std::byte> m(msg.data(), msg.size());

  // Restores `bytes` (the snapshot above unless given) into c: refused with `want`, c unchanged;
  // the refusal's detail.
  auto refused = [&](worker& c, errc want, const std::vector<std::byte>& bytes) {
    const auto before = save(c);
    const auto r = gradcomp::restore_snapshot(c, span<const std::byte>(bytes.data(), bytes.size()));
    REQUIRE(!r);
    CHECK(r.error() == want);
    CHECK(save(c) == before);
    return std::string(r.detail());
  };
  SUBCASE("another rank: other sizes of Q") {
    gradcomp::powersgd_config other = cfg;
    other.rank = 3;
    auto b = workers(other, 1);
    refused(b[0], errc::layout_mismatch, msg);
  }
  SUBCASE("without error feedback: no residual sections expected") {
    gradcomp::powersgd_config other = cfg;
    other.error_feedback = false;
    auto b = workers(other, 1);
    refused(b[0], errc::layout_mismatch, msg);
  }
  SUBCASE("another method's snapshot") {
    auto plain = save(a[0], false);
    // Word 8 of the state section (after the message and section headers): EF-SignSGD's method.
    const double ef = 2.0;
    std::memcpy(plain.data() + gradcomp::wire::message_header_bytes + gradcomp::wire::section_header_bytes + 8 * 8, &ef,
                8);
    auto b = workers(cfg, 1);
    CHECK(refused(b[0], errc::config_mismatch, plain) == "selection");
  }
  SUBCASE("a damaged snapshot") {
    auto bad = msg;
    bad[bad.size() / 2] ^= std::byte{0x10};
    auto b = workers(cfg, 1);
    refused(b[0], errc::checksum_mismatch, bad);
  }
  SUBCASE("a refused restore leaves an open step open") {
    auto b = workers(cfg, 2);
    const auto g = step_grads(0, 2);
    std::vector<span<const float>> views;
    for (const auto& x : g[0]) views.emplace_back(x.data(), x.size());
    REQUIRE(b[0].begin_step(span<const span<const float>>(views.data(), views.size())));
    auto bad = msg;
    bad[bad.size() / 2] ^= std::byte{0x10};
    CHECK(!gradcomp::restore_snapshot(b[0], span<const std::byte>(bad.data(), bad.size())));
    CHECK(b[0].round() == 1);
    // A sound one closes it.
    REQUIRE(gradcomp::restore_snapshot(b[0], m));
    CHECK(b[0].round() == 0);
    CHECK(b[0].step() == 1);
  }
}
