/// @file crc32c.hpp
/// @brief CRC-32C (Castagnoli), the optional integrity check of wire messages.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "../span.hpp"

namespace gradcomp {
namespace detail {

// Slicing-by-8 tables for the reflected polynomial 0x82F63B78, built at compile time.
struct crc32c_tables {
  std::uint32_t t[8][256];
  constexpr crc32c_tables() : t{} {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  }
};

inline constexpr crc32c_tables crc32c_table{};

inline std::uint32_t crc32c_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  const auto& t = crc32c_table.t;
  crc = ~crc;
  while (n >= 8) {
    const std::uint32_t lo = (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                              static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24) ^ crc;
    const std::uint32_t hi = static_cast<std::uint32_t>(p[4]) | static_cast<std::uint32_t>(p[5]) << 8 |
                             static_cast<std::uint32_t>(p[6]) << 16 | static_cast<std::uint32_t>(p[7]) << 24;
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ static_cast<std::uint32_t>(*p++)) & 0xffu];
  return ~crc;
}

}  // namespace detail

/**
 * @brief CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected, initial value and final XOR
 * 0xFFFFFFFF) of `data`; `crc32c("123456789") == 0xE3069283`.
 *
 * Pass a previous result as `crc` to continue a checksum over several pieces.
 */
inline std::uint32_t crc32c(span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  return detail::crc32c_update(crc, data.data(), data.size());
}

}  // namespace gradcomp
