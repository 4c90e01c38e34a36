// CRC-32C (reflected polynomial 0x82F63B78) on three paths with bitwise the same result: the
// slicing-by-8 tables (portable, and the reference), the SSE4.2 `crc32` instruction on x86-64 and
// the CRC32C instructions of ARMv8. The instruction paths run three independent streams over
// consecutive blocks, so the instruction's latency does not limit them, and join the streams by
// shifting a CRC over a block of zeros (a linear map, applied through four 256-entry tables).
//
// The path is chosen at run time, as the AVX2 kernels are (detail/simd.hpp): the instructions where
// the CPU has them, the tables where it does not or where GRADCOMP_CPU_SIMD=portable (or
// cpu::simd_override) pins the portable kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../../config.hpp"
#include "../../detail/simd.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GRADCOMP_NO_CRC32C_INSTRUCTIONS)
#define GRADCOMP_HAVE_SSE42_CRC 1
#include <nmmintrin.h>
#define GRADCOMP_TARGET_SSE42 __attribute__((target("sse4.2")))
#else
#define GRADCOMP_HAVE_SSE42_CRC 0
#endif

#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32) && !defined(GRADCOMP_NO_CRC32C_INSTRUCTIONS)
#define GRADCOMP_HAVE_ARM_CRC 1
#include <arm_acle.h>
#else
#define GRADCOMP_HAVE_ARM_CRC 0
#endif

namespace gradcomp {
namespace detail {

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;

// Slicing-by-8 tables, built at compile time.
struct crc32c_tables {
  std::uint32_t t[8][256];
  constexpr crc32c_tables() : t{} {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (crc32c_polynomial & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  }
};

inline constexpr crc32c_tables crc32c_table{};

// The register-level update (no pre- or post-inversion) over n bytes, with the tables.
inline std::uint32_t crc32c_tables_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  const auto& t = crc32c_table.t;
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
  return crc;
}

// The map "append `Bytes` zero bytes" of the CRC register, as four byte tables: the register c
// becomes z[0][c & 0xff] ^ z[1][(c >> 8) & 0xff] ^ z[2][(c >> 16) & 0xff] ^ z[3][c >> 24]. The
// map is linear over GF(2), so it is built from the images of the 32 unit registers, each found
// by running the table update over `Bytes` zeros.
template <std::size_t Bytes>
struct crc32c_zeros {
  std::uint32_t z[4][256];
  crc32c_zeros() noexcept : z{} {
    static const std::byte zeros[Bytes] = {};
    std::uint32_t unit[32];
    for (int b = 0; b < 32; ++b) unit[b] = crc32c_tables_update(std::uint32_t(1) << b, zeros, Bytes);
    for (int k = 0; k < 4; ++k)
      for (std::uint32_t v = 0; v < 256; ++v) {
        std::uint32_t out = 0;
        for (int b = 0; b < 8; ++b)
          if ((v >> b) & 1u) out ^= unit[8 * k + b];
        z[k][v] = out;
      }
  }
  std::uint32_t shift(std::uint32_t c) const noexcept {
    return z[0][c & 0xff] ^ z[1][(c >> 8) & 0xff] ^ z[2][(c >> 16) & 0xff] ^ z[3][c >> 24];
  }
  static const crc32c_zeros& get() noexcept {
    static const crc32c_zeros tables;
    return tables;
  }
};

// Block lengths of the three streams: long blocks for long buffers, short ones for the rest.
inline constexpr std::size_t crc32c_long_block = 8192;
inline constexpr std::size_t crc32c_short_block = 256;

inline std::uint64_t crc32c_load64(const std::byte* p) noexcept {
  std::uint64_t x;
  std::memcpy(&x, p, 8);
  return x;  // the instructions take little-endian words; both targets are little-endian here
}

// The instruction paths share their structure: Step8(c, p) and Step1(c, p) are the instruction
// on 8 bytes and on 1 byte. Everything that calls them carries the instructions' target, so that
// they are inlined.
#if GRADCOMP_HAVE_SSE42_CRC
#define GRADCOMP_CRC_TARGET GRADCOMP_TARGET_SSE42
#else
#define GRADCOMP_CRC_TARGET
#endif

using crc32c_step = std::uint32_t (*)(std::uint32_t, const std::byte*);

// Whole groups of three blocks of `Block` bytes: one stream per block, joined by shifting.
template <crc32c_step Step8, std::size_t Block>
GRADCOMP_CRC_TARGET inline std::uint32_t crc32c_streams(std::uint32_t crc, const std::byte*& p, std::size_t& n) noexcept {
  if (n < 3 * Block) return crc;
  const auto& zeros = crc32c_zeros<Block>::get();
  while (n >= 3 * Block) {
    std::uint32_t c1 = 0, c2 = 0;
    for (const std::byte* end = p + Block; p < end; p += 8) {
      crc = Step8(crc, p);
      c1 = Step8(c1, p + Block);
      c2 = Step8(c2, p + 2 * Block);
    }
    crc = zeros.shift(crc) ^ c1;
    crc = zeros.shift(crc) ^ c2;
    p += 2 * Block;
    n -= 3 * Block;
  }
  return crc;
}

template <crc32c_step Step8, crc32c_step Step1>
GRADCOMP_CRC_TARGET inline std::uint32_t crc32c_three_streams(std::uint32_t crc, const std::byte* p,
                                                              std::size_t n) noexcept {
  // Bytes up to an 8-byte boundary one at a time.
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0) {
    crc = Step1(crc, p++);
    --n;
  }
  crc = crc32c_streams<Step8, crc32c_long_block>(crc, p, n);
  crc = crc32c_streams<Step8, crc32c_short_block>(crc, p, n);
  for (; n >= 8; n -= 8, p += 8) crc = Step8(crc, p);
  for (; n > 0; --n) crc = Step1(crc, p++);
  return crc;
}

#if GRADCOMP_HAVE_SSE42_CRC
GRADCOMP_TARGET_SSE42 inline std::uint32_t crc32c_sse42_step8(std::uint32_t c, const std::byte* p) noexcept {
  return static_cast<std::uint32_t>(_mm_crc32_u64(c, crc32c_load64(p)));
}
GRADCOMP_TARGET_SSE42 inline std::uint32_t crc32c_sse42_step1(std::uint32_t c, const std::byte* p) noexcept {
  return _mm_crc32_u8(c, static_cast<unsigned char>(*p));
}
inline std::uint32_t crc32c_sse42_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  return crc32c_three_streams<crc32c_sse42_step8, crc32c_sse42_step1>(crc, p, n);
}
inline bool crc32c_sse42_available() noexcept {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
}
#endif

#if GRADCOMP_HAVE_ARM_CRC
inline std::uint32_t crc32c_arm_step8(std::uint32_t c, const std::byte* p) noexcept {
  return __crc32cd(c, crc32c_load64(p));
}
inline std::uint32_t crc32c_arm_step1(std::uint32_t c, const std::byte* p) noexcept {
  return __crc32cb(c, static_cast<std::uint8_t>(*p));
}
inline std::uint32_t crc32c_arm_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  return crc32c_three_streams<crc32c_arm_step8, crc32c_arm_step1>(crc, p, n);
}
#endif

// Which path crc32c_update takes now.
enum class crc32c_path { tables, sse42, armv8 };

inline crc32c_path active_crc32c_path() noexcept {
  if (cpu::portable_pinned()) return crc32c_path::tables;
#if GRADCOMP_HAVE_SSE42_CRC
  return crc32c_sse42_available() ? crc32c_path::sse42 : crc32c_path::tables;
#elif GRADCOMP_HAVE_ARM_CRC
  return crc32c_path::armv8;
#else
  return crc32c_path::tables;
#endif
}

// CRC-32C of n bytes continuing `crc` (a previous result, 0 to start).
inline std::uint32_t crc32c_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  crc = ~crc;
  switch (active_crc32c_path()) {
#if GRADCOMP_HAVE_SSE42_CRC
    case crc32c_path::sse42: crc = crc32c_sse42_update(crc, p, n); break;
#endif
#if GRADCOMP_HAVE_ARM_CRC
    case crc32c_path::armv8: crc = crc32c_arm_update(crc, p, n); break;
#endif
    default: crc = crc32c_tables_update(crc, p, n); break;
  }
  return ~crc;
}

// Bytes a checksum that follows an encoder or a decoder folds in at a time: the encoder writes (or
// the decoder checks) a block, and the checksum reads it while it is still in the L1 cache.
inline constexpr std::size_t crc32c_follow_block = 16384;

// Polynomial arithmetic modulo the CRC polynomial, in the reflected bit order of the register
// (bit 31 holds x^0): a * b mod P.
GRADCOMP_HD inline std::uint32_t crc32c_multiply_mod(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t product = 0;
  for (std::uint32_t m = 0x80000000u; m != 0; m >>= 1) {
    if ((a & m) != 0) product ^= b;
    b = (b & 1u) != 0 ? (b >> 1) ^ crc32c_polynomial : b >> 1;
  }
  return product;
}

// x^(8 * bytes) mod P: the factor that moves a CRC past `bytes` bytes (square and multiply).
GRADCOMP_HD inline std::uint32_t crc32c_shift_factor(std::uint64_t bytes) noexcept {
  std::uint32_t result = 0x80000000u;  // x^0
  std::uint32_t power = 0x00800000u;   // x^8: one byte
  for (; bytes != 0; bytes >>= 1) {
    if ((bytes & 1u) != 0) result = crc32c_multiply_mod(power, result);
    power = crc32c_multiply_mod(power, power);
  }
  return result;
}

// The CRC-32C of A followed by B, from crc32c(A), crc32c(B) and the length of B.
GRADCOMP_HD inline std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b) noexcept {
  return crc32c_multiply_mod(crc32c_shift_factor(bytes_b), crc_a) ^ crc_b;
}

}  // namespace detail
}  // namespace gradcomp
