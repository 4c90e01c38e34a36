// CRC-32C on every path: the CPU's instructions (three streams joined by shifts) against the
// slicing-by-8 tables, which are the reference, on every length 0-4096 at every alignment, on
// long buffers that use the long and the short blocks, and when continued over pieces.
#include <gradcomp/wire/crc32c.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

using namespace gradcomp;
namespace cpu = gradcomp::detail::cpu;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

// The tables' value, the CRC-32C definition this library started from.
std::uint32_t reference(span<const std::byte> x, std::uint32_t crc = 0) {
  return ~gradcomp::detail::crc32c_tables_update(~crc, x.data(), x.size());
}

// crc32c with the automatic path (the instructions where the CPU has them).
std::uint32_t automatic(span<const std::byte> x, std::uint32_t crc = 0) {
  cpu::simd_override().store(-1);
  return crc32c(x, crc);
}

}  // namespace

TEST_CASE("CRC-32C: the path in use and the pinned portable path") {
  cpu::simd_override().store(static_cast<int>(cpu::simd_level::portable));
  CHECK(gradcomp::detail::active_crc32c_path() == gradcomp::detail::crc32c_path::tables);
  cpu::simd_override().store(-1);
#if GRADCOMP_HAVE_SSE42_CRC
  if (!cpu::portable_pinned() && gradcomp::detail::crc32c_sse42_available())
    CHECK(gradcomp::detail::active_crc32c_path() == gradcomp::detail::crc32c_path::sse42);
#endif
#if GRADCOMP_HAVE_ARM_CRC
  if (!cpu::portable_pinned())
    CHECK(gradcomp::detail::active_crc32c_path() == gradcomp::detail::crc32c_path::armv8);
#elif defined(GRADCOMP_TEST_EXPECT_ARM_CRC)
  FAIL("built without the ARMv8 CRC-32C instructions (-march=armv8-a+crc)");
#endif
  const char text[] = "123456789";
  CHECK(automatic(span<const std::byte>(reinterpret_cast<const std::byte*>(text), 9)) == 0xE3069283u);
}

TEST_CASE("CRC-32C: every length 0-4096 at every alignment equals the tables") {
  const auto data = random_bytes(4096 + 16, 1);
  std::size_t mismatches = 0;
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t n = 0; n <= 4096; ++n) {
      const span<const std::byte> x(data.data() + offset, n);
      mismatches += automatic(x) != reference(x) ? 1 : 0;
    }
  CHECK(mismatches == 0);
}

TEST_CASE("CRC-32C: long buffers (long and short blocks and the tail) equal the tables") {
  const std::size_t long_group = 3 * gradcomp::detail::crc32c_long_block;
  const std::size_t short_group = 3 * gradcomp::detail::crc32c_short_block;
  const auto data = random_bytes(4 * long_group + 2 * short_group + 128, 2);
  for (const std::size_t n : {short_group - 1, short_group, short_group + 7, long_group - 1, long_group,
                              long_group + short_group + 13, 4 * long_group + 2 * short_group + 63}) {
    for (std::size_t offset : {0, 1, 5}) {
      CAPTURE(n);
      CAPTURE(offset);
      const span<const std::byte> x(data.data() + offset, n);
      CHECK(automatic(x) == reference(x));
    }
  }
  // A message of zeros and of ones: the shift tables see every register value pattern too.
  const std::vector<std::byte> zeros(long_group + 100, std::byte{0}), ones(long_group + 100, std::byte{0xff});
  CHECK(automatic(span<const std::byte>(zeros.data(), zeros.size())) ==
        reference(span<const std::byte>(zeros.data(), zeros.size())));
  CHECK(automatic(span<const std::byte>(ones.data(), ones.size())) ==
        reference(span<const std::byte>(ones.data(), ones.size())));
}

TEST_CASE("CRC-32C: continued over pieces, on every path") {
  const auto data = random_bytes(100000, 3);
  const span<const std::byte> all(data.data(), data.size());
  const std::uint32_t whole = reference(all);
  for (const int level : {-1, static_cast<int>(cpu::simd_level::portable)}) {
    CAPTURE(level);
    cpu::simd_override().store(level);
    std::uint32_t crc = 0;
    std::size_t at = 0;
    for (const std::size_t piece : {std::size_t(3), std::size_t(70000), std::size_t(1), std::size_t(29996)}) {
      crc = crc32c(all.subspan(at, piece), crc);
      at += piece;
    }
    CHECK(at == data.size());
    CHECK(crc == whole);
  }
  cpu::simd_override().store(-1);
}

TEST_CASE("CRC-32C: the CRC of two pieces joined from theirs (the encoder's one-pass checksum)") {
  const auto data = random_bytes(70000, 4);
  const span<const std::byte> all(data.data(), data.size());
  for (const std::size_t split : {std::size_t(0), std::size_t(1), std::size_t(24), std::size_t(4099), std::size_t(70000)}) {
    CAPTURE(split);
    const auto a = all.first(split);
    const auto b = all.subspan(split, all.size() - split);
    CHECK(gradcomp::detail::crc32c_combine(crc32c(a), crc32c(b), b.size()) == reference(all));
  }
}
