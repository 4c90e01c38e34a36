// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
// SC 2011): a counter-based generator. Its output is a function of a 128-bit counter and a 64-bit
// key alone, so a stochastic decision keyed by (seed, step, tensor, element) is the same whichever
// thread, backend or device takes it, and in whatever order. The stochastic compressors draw every
// random decision through `element_draw` (docs/algorithms.md, "Reproducible randomness").
#pragma once

#include <cstdint>

#include "../config.hpp"

namespace gradcomp {
namespace detail {

// Four 32-bit words: a counter or an output block.
struct philox_block {
  std::uint32_t w[4];
};

// The high and low 32 bits of a * b.
GRADCOMP_HD constexpr void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                          std::uint32_t& lo) noexcept {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// Philox4x32 with 10 rounds: the counter `c` under the key (k0, k1). Matches the known-answer
// vectors of the reference implementation (Random123, tests/kat_vectors).
GRADCOMP_HD constexpr philox_block philox4x32_10(philox_block c, std::uint32_t k0, std::uint32_t k1) noexcept {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // round multipliers
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // key increments (Weyl sequence)
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += w0;
      k1 += w1;
    }
    std::uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
    philox_mulhilo(m0, c.w[0], hi0, lo0);
    philox_mulhilo(m1, c.w[2], hi1, lo1);
    c = philox_block{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
  }
  return c;
}

// The block of four 32-bit draws shared by elements 4b .. 4b+3 of a tensor: key = the seed,
// counter = (block, tensor, step low, step high). Element i takes word i % 4 of block i / 4.
GRADCOMP_HD constexpr philox_block element_block(std::uint64_t seed, std::uint64_t step, std::uint32_t tensor,
                                                 std::uint32_t block) noexcept {
  return philox4x32_10(philox_block{{block, tensor, static_cast<std::uint32_t>(step),
                                     static_cast<std::uint32_t>(step >> 32)}},
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// The 32-bit draw of element i of a tensor at a step (one Philox call; a kernel that takes four
// consecutive elements can share element_block instead).
GRADCOMP_HD constexpr std::uint32_t element_draw(std::uint64_t seed, std::uint64_t step, std::uint32_t tensor,
                                                 std::uint32_t i) noexcept {
  return element_block(seed, step, tensor, i / 4).w[i % 4];
}

// A 32-bit draw as a uniform value in [0, 1): exactly draw / 2^32, a double every device computes
// alike. `uniform_below(draw, p)` is true with probability ceil(p * 2^32) / 2^32 for p in [0, 1]
// (within 2^-32 of p), and always for p >= 1.
GRADCOMP_HD constexpr double uniform_of_draw(std::uint32_t draw) noexcept {
  return static_cast<double>(draw) * (1.0 / 4294967296.0);
}
GRADCOMP_HD constexpr bool uniform_below(std::uint32_t draw, double p) noexcept { return uniform_of_draw(draw) < p; }

}  // namespace detail
}  // namespace gradcomp
