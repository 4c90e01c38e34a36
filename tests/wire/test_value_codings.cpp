// fp16 and bf16 conversions (exhaustive over every 16-bit pattern) and CRC-32C check values.
#include <gradcomp/detail/half.hpp>
#include <gradcomp/wire/crc32c.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace gradcomp::detail;

TEST_CASE("every finite fp16 value round-trips, and midpoints round to even") {
  std::size_t failures = 0;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    if (((h >> 10) & 0x1fu) == 0x1fu) continue;  // infinities and NaN are never encoded
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    std::uint16_t back = 0;
    failures += !(float_to_half(f, &back) && back == h);
  }
  CHECK(failures == 0);

  failures = 0;
  for (std::uint32_t h = 0; h < 0x7bffu; ++h) {  // consecutive positive halves h, h + 1
    const double a = half_to_float(static_cast<std::uint16_t>(h));
    const double b = half_to_float(static_cast<std::uint16_t>(h + 1));
    const auto mid = static_cast<float>((a + b) / 2);  // exact: halves have 11-bit significands
    std::uint16_t r = 0;
    failures += !(float_to_half(mid, &r) && r == ((h & 1u) ? h + 1 : h));  // ties to even
    failures += !(float_to_half(std::nextafter(mid, 1e9f), &r) && r == h + 1);
    failures += !(float_to_half(std::nextafter(mid, -1e9f), &r) && r == h);
    failures += !(float_to_half(-mid, &r) && r == (0x8000u | ((h & 1u) ? h + 1 : h)));
  }
  CHECK(failures == 0);
}

TEST_CASE("fp16 overflow, underflow and signed zero") {
  std::uint16_t h = 0;
  CHECK(float_to_half(65504.0f, &h));
  CHECK(h == 0x7bffu);
  CHECK(float_to_half(65519.99f, &h));  // still rounds down to 65504
  CHECK(h == 0x7bffu);
  CHECK_FALSE(float_to_half(65520.0f, &h));  // rounds to infinity: not encodable
  CHECK_FALSE(float_to_half(-1e30f, &h));
  CHECK(float_to_half(std::ldexp(1.0f, -25), &h));  // half the smallest subnormal: ties to 0
  CHECK(h == 0);
  CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f), &h));
  CHECK(h == 1);
  CHECK(float_to_half(-0.0f, &h));
  CHECK(h == 0x8000u);
  CHECK(float_to_half(std::numeric_limits<float>::denorm_min(), &h));
  CHECK(h == 0);
}

TEST_CASE("every finite bf16 value round-trips; float to bf16 rounds to nearest even") {
  std::size_t failures = 0;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    if (((b >> 7) & 0xffu) == 0xffu) continue;
    std::uint16_t back = 0;
    failures += !(float_to_bf16(bf16_to_float(static_cast<std::uint16_t>(b)), &back) && back == b);
  }
  CHECK(failures == 0);
  std::uint16_t r = 0;
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8), &r));  // exactly between 1 and 1 + 2^-7
  CHECK(r == 0x3f80u);                                     // ties to even: 1.0
  CHECK(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8), &r));
  CHECK(r == 0x3f82u);  // between 1 + 2^-7 (odd) and 1 + 2^-6: up to even
  CHECK_FALSE(float_to_bf16(std::numeric_limits<float>::max(), &r));
  CHECK(float_to_bf16(3.38e38f, &r));
}

TEST_CASE("CRC-32C check values") {
  const std::string s = "123456789";
  const gradcomp::span<const std::byte> all(reinterpret_cast<const std::byte*>(s.data()), s.size());
  CHECK(gradcomp::crc32c(all) == 0xE3069283u);
  CHECK(gradcomp::crc32c(all.subspan(4, 5), gradcomp::crc32c(all.first(4))) == 0xE3069283u);
  CHECK(gradcomp::crc32c(gradcomp::span<const std::byte>()) == 0u);
  std::vector<std::byte> zeros(32, std::byte{0});
  CHECK(gradcomp::crc32c(gradcomp::span<const std::byte>(zeros.data(), zeros.size())) == 0x8A9136AAu);
  std::vector<std::byte> ones(32, std::byte{0xff});
  CHECK(gradcomp::crc32c(gradcomp::span<const std::byte>(ones.data(), ones.size())) == 0x62A8AB43u);
}
