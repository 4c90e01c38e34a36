// The counter-based generator behind every stochastic decision (detail/philox.hpp): the
// known-answer vectors of the reference implementation, the mapping of (seed, step, tensor,
// element) to counter and key, and the uniform draw's exact values and its frequency.
#include <gradcomp/detail/philox.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>

using gradcomp::detail::element_block;
using gradcomp::detail::element_draw;
using gradcomp::detail::philox4x32_10;
using gradcomp::detail::philox_block;

namespace {
void check_block(const philox_block& got, const philox_block& want) {
  for (int i = 0; i < 4; ++i) CHECK(got.w[i] == want.w[i]);
}
}  // namespace

TEST_CASE("philox4x32-10 gives the reference implementation's known answers") {
  // Random123, tests/kat_vectors: counter (4 words), key (2 words), result (4 words).
  check_block(philox4x32_10({{0, 0, 0, 0}}, 0, 0), {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  check_block(philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu),
              {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  check_block(philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u),
              {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
  // Usable at compile time, so a device compiler can fold it too.
  static_assert(philox4x32_10({{0, 0, 0, 0}}, 0, 0).w[0] == 0x6627e8d5u, "constexpr Philox");
}

TEST_CASE("element draws: counter (block, tensor, step), key the seed; four elements per block") {
  const std::uint64_t seed = 0x299f31d0a4093822ull, step = 0x0370734413198a2eull;
  // The third known answer, as (seed, step, tensor, element): counter words 0 and 1 are the block
  // and the tensor, words 2 and 3 the step's low and high halves.
  check_block(element_block(seed, step, 0x85a308d3u, 0x243f6a88u),
              {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
  const std::uint32_t i = 4u * 0x243f6a88u;  // wraps: the block of element i is i / 4 in 32 bits
  CHECK(element_draw(seed, step, 0x85a308d3u, i / 4 * 4 + 2) == 0x5001e420u);
  // Each input changes the draws: seed, step (both halves), tensor, element.
  std::set<std::uint32_t> seen;
  for (std::uint64_t s : {1ull, 2ull})
    for (std::uint64_t t : {0ull, 1ull, 1ull << 32})
      for (std::uint32_t tensor : {0u, 7u})
        for (std::uint32_t e : {0u, 1u, 5u}) seen.insert(element_draw(s, t, tensor, e));
  CHECK(seen.size() == 2 * 3 * 2 * 3);
}

TEST_CASE("uniform draws: exactly draw / 2^32, and uniform_below's frequency is p") {
  using gradcomp::detail::uniform_below;
  using gradcomp::detail::uniform_of_draw;
  CHECK(uniform_of_draw(0) == 0.0);
  CHECK(uniform_of_draw(0x80000000u) == 0.5);
  CHECK(uniform_of_draw(0xffffffffu) == 1.0 - std::ldexp(1.0, -32));
  CHECK(uniform_below(0xffffffffu, 1.0));
  CHECK(!uniform_below(0, 0.0));
  // Over 2^20 draws of one tensor, the frequency of draw < p is p within 5 standard deviations.
  const std::uint32_t n = 1u << 20;
  for (const double p : {0.001, 0.1, 0.5, 0.9}) {
    std::uint32_t hits = 0;
    for (std::uint32_t e = 0; e < n; ++e) hits += uniform_below(element_draw(42, 3, 1, e), p) ? 1 : 0;
    const double sd = std::sqrt(p * (1 - p) * n);
    CAPTURE(p);
    CHECK(std::fabs(hits - p * n) < 5 * sd);
  }
}
