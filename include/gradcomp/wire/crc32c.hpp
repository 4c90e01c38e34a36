/// @file crc32c.hpp
/// @brief CRC-32C (Castagnoli), the optional integrity check of wire messages.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codecs/crc32c.hpp"
#include "../span.hpp"

namespace gradcomp {

/**
 * @brief CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected, initial value and final XOR
 * 0xFFFFFFFF) of `data`; `crc32c("123456789") == 0xE3069283`.
 *
 * Pass a previous result as `crc` to continue a checksum over several pieces. Uses the CPU's
 * CRC-32C instructions where it has them (SSE4.2 on x86-64, the CRC extension on ARMv8), chosen
 * at run time, and slicing-by-8 tables elsewhere; every path gives the same value.
 */
inline std::uint32_t crc32c(span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  return detail::crc32c_update(crc, data.data(), data.size());
}

}  // namespace gradcomp
