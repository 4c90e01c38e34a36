// IEEE binary16 and bfloat16 conversions with round-to-nearest-even, independent of the host's
// floating-point environment. Overflow is reported to the caller instead of being turned into an
// infinity (see docs/wire_format.md, "Value codings").
#pragma once

#include <cstdint>

#include "bytes.hpp"

namespace gradcomp {
namespace detail {

// float -> binary16 bits. Returns false when the finite input rounds to a magnitude above 65504
// (the largest finite half); NaN and infinity inputs must be screened by the caller.
inline bool float_to_half(float f, std::uint16_t* out) noexcept {
  const std::uint32_t x = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x477ff000u) {  // >= 65520: rounds to infinity under RNE
    return false;
  }
  if (abs >= 0x38800000u) {  // normal half: |f| >= 2^-14
    const std::uint32_t mant_round = abs + 0x00000fffu + ((abs >> 13) & 1u);
    *out = static_cast<std::uint16_t>(sign | ((mant_round - 0x38000000u) >> 13));
    return true;
  }
  if (abs < 0x33000000u) {  // below half of the smallest subnormal (2^-25): +-0 (ties to even)
    *out = sign;
    return true;
  }
  // Subnormal half: value = m * 2^-24 with m in [1, 1023], rounded to nearest even.
  const std::uint32_t exp = abs >> 23;                    // biased float exponent, 102..112
  const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24-bit significand
  const std::uint32_t shift = 126u - exp;                 // so that m = mant >> shift
  const std::uint32_t m = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1u);
  const std::uint32_t half_ulp = 1u << (shift - 1u);
  const std::uint32_t rounded = m + ((rem > half_ulp || (rem == half_ulp && (m & 1u))) ? 1u : 0u);
  *out = static_cast<std::uint16_t>(sign | rounded);
  return true;
}

GRADCOMP_HD inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // +-0 or subnormal: exactly mant * 2^-24.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16 bits (the high half of the float, rounded to nearest even). Returns false
// when a finite input rounds to infinity.
inline bool float_to_bf16(float f, std::uint16_t* out) noexcept {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  if ((rounded & 0x7f800000u) == 0x7f800000u) return false;
  *out = static_cast<std::uint16_t>(rounded >> 16);
  return true;
}

GRADCOMP_HD inline float bf16_to_float(std::uint16_t b) noexcept {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail
}  // namespace gradcomp
