// Portable, reproducible random numbers. The standard distributions are implementation-defined,
// so every worker (and every platform) would draw different samples with them; gradcomp uses
// SplitMix64 and its own bounded draw instead. The whole generator state is one 64-bit word.
#pragma once

#include <cstdint>

#include "../config.hpp"

namespace gradcomp {
namespace detail {

GRADCOMP_HD constexpr std::uint64_t splitmix64_mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Derives an independent stream seed from a user seed and two counters (e.g. tensor, step), so a
// draw depends only on (seed, tensor, step) and never on the order of earlier draws.
GRADCOMP_HD constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t a,
                                                std::uint64_t b) noexcept {
  return splitmix64_mix(splitmix64_mix(splitmix64_mix(seed) ^ (a + 0x9e3779b97f4a7c15ull)) ^
                        (b + 0x632be59bd9b4e019ull));
}

class splitmix64 {
 public:
  GRADCOMP_HD constexpr explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}
  GRADCOMP_HD constexpr std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ull;
    return splitmix64_mix(state_);
  }
  // Uniform in [0, bound), bound > 0, without modulo bias (rejection of the short last range).
  GRADCOMP_HD constexpr std::uint64_t below(std::uint64_t bound) noexcept {
    const std::uint64_t reject_under = (0 - bound) % bound;
    for (;;) {
      const std::uint64_t r = next();
      if (r >= reject_under) return r % bound;
    }
  }
  GRADCOMP_HD constexpr std::uint64_t state() const noexcept { return state_; }

 private:
  std::uint64_t state_;
};

}  // namespace detail
}  // namespace gradcomp
