// Helpers of the quantising compressors' tests: gradient views, tensor names, bitwise comparison,
// the snapshot of a seeded quantiser.
#pragma once

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/span.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "support/step.hpp"  // views: a model's gradients, one view per tensor

namespace gradcomp_test {

// "t0", "t1", ... (appended, not prepended: GCC 12 warns falsely on a literal + std::string in C++20).
inline std::string tensor_name(std::size_t t) {
  std::string name = "t";
  name += std::to_string(t);
  return name;
}

// Whether a and b hold the same bits.
template <class T>
bool same_bits(const gradcomp::span<const T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A message held in a vector, as a view.
inline gradcomp::span<const std::byte> bytes(const std::vector<std::byte>& v) {
  return gradcomp::span<const std::byte>(v.data(), v.size());
}

// One step of compressor `c` on gradients `g`, encoded without a checksum.
template <class C, class G>
std::vector<std::byte> encoded_step(C& c, const G& g) {
  REQUIRE(c.compress(views(g)));
  std::vector<std::byte> out(c.max_message_bytes());
  out.resize(c.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size())).value());
  return out;
}

// Whether building a C from `cfg` throws gradcomp::error with errc::invalid_argument.
template <class C, class Config>
bool refuses(const Config& cfg) {
  try {
    C c(cfg);
    return false;
  } catch (const gradcomp::error& e) {
    return e.code() == gradcomp::errc::invalid_argument;
  }
}

// The snapshot of a quantiser with error feedback: after 4 steps of `make()` (`step(c, s)` takes
// step s and returns its message), the snapshot holds the state section and `residuals` residual
// sections, restores into a fresh `make()` with the same residuals and step counter, and the two
// continue bit for bit; the snapshot of `other` (another method whose snapshot has the same
// sections) is refused both ways as another "selection", and damage anywhere is refused; neither
// changes anything.
template <class Make, class Step, class Other>
void check_residual_snapshot(Make make, Step step, std::size_t residuals, Other& other) {
  auto a = make();
  for (std::size_t s = 0; s < 4; ++s) (void)step(a, s);
  const auto saved = gradcomp::save_snapshot(a);
  CHECK(saved.size() == gradcomp::snapshot_bytes(a));
  const auto header = gradcomp::wire::validate(bytes(saved));
  REQUIRE(header);
  CHECK(header->section_count == 1 + residuals);
  auto b = make();
  REQUIRE(gradcomp::restore_snapshot(b, bytes(saved)));
  CHECK(b.step() == 4);
  using T = typename decltype(a)::tensor_view::value_type;
  for (std::size_t t = 0; t < a.num_tensors(); ++t)
    CHECK(same_bits(b.error_feedback(t), std::vector<T>(a.error_feedback(t).begin(), a.error_feedback(t).end())));
  for (std::size_t s = 4; s < 8; ++s) {
    CAPTURE(s);
    CHECK(step(a, s) == step(b, s));
  }
  const auto before = gradcomp::save_snapshot(a);
  CHECK(before == gradcomp::save_snapshot(b));
  const auto other_before = gradcomp::save_snapshot(other);
  auto r = gradcomp::restore_snapshot(a, bytes(other_before));
  CHECK(r.error() == gradcomp::errc::config_mismatch);
  CHECK(std::string(r.detail()) == "selection");
  CHECK(gradcomp::restore_snapshot(other, bytes(before)).error() == gradcomp::errc::config_mismatch);
  CHECK(gradcomp::save_snapshot(other) == other_before);
  for (std::size_t at = 0; at < before.size(); at += 53) {
    auto bad = before;
    bad[at] ^= std::byte{0x10};
    CHECK(!gradcomp::restore_snapshot(a, bytes(bad)));
  }
  CHECK(gradcomp::save_snapshot(a) == before);
}

// The snapshot of a quantiser whose state is its step counter and seed (TernGrad, QSGD):
// `make(cfg)` builds one with the tests' tensors, `gradients(s)` gives step s's gradients (float),
// `other` is a compressor of another method with the same tensors. The snapshot is the state
// section alone; restored into a compressor of another seed it brings the step counter and seed,
// and the run continues bit for bit; another method's snapshot is refused both ways and changes
// nothing.
template <class Make, class Config, class Gradients, class Other>
void check_seeded_snapshot(Make make, Config cfg, Gradients gradients, Other& other) {
  cfg.seed = 0x1234567890abcdefull;
  auto a = make(cfg);
  for (std::size_t s = 0; s < 3; ++s) REQUIRE(a.compress(views(gradients(s))));
  const auto snap = gradcomp::save_snapshot(a);
  CHECK(snap.size() == gradcomp::snapshot_bytes(a));
  CHECK(snap.size() == gradcomp::wire::message_header_bytes + gradcomp::wire::section_header_bytes +
                           8 * gradcomp::wire::snapshot_state_words + gradcomp::wire::checksum_bytes);
  Config fresh = cfg;
  fresh.seed = 7;
  auto b = make(fresh);
  REQUIRE(gradcomp::restore_snapshot(b, bytes(snap)));
  CHECK(b.step() == 3);
  CHECK(b.config().seed == cfg.seed);
  const auto g = gradients(3);
  REQUIRE(a.compress(views(g)));
  REQUIRE(b.compress(views(g)));
  for (std::size_t t = 0; t < a.num_tensors(); ++t)
    CHECK(same_bits(b.message(t).values, std::vector<float>(a.message(t).values.begin(), a.message(t).values.end())));
  const auto other_snap = gradcomp::save_snapshot(other);
  CHECK(gradcomp::restore_snapshot(b, bytes(other_snap)).error() == gradcomp::errc::config_mismatch);
  CHECK(b.step() == 4);
  const std::size_t other_step = other.step();
  CHECK(gradcomp::restore_snapshot(other, bytes(snap)).error() == gradcomp::errc::config_mismatch);
  CHECK(other.step() == other_step);
}

}  // namespace gradcomp_test
