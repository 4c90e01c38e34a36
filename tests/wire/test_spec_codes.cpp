// The conditions docs/wire_format.md settles with a single error code each ("What a decoder must
// reject"), one test per condition, on messages forged byte by byte.
#include <gradcomp/wire/decode.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "wire/forge.hpp"

using namespace gradcomp;
using namespace gradcomp_test;
using wire::section_role;
using wire::value_coding;

namespace {

// One dense gradient section of 3 fp32 values (section bytes 44), and a raw_u32 one of 2 of 10.
std::vector<std::byte> two_sections(bool checksum) {
  return forge(wire::message_kind::gradients,
               {dense_section(section_role::gradient, 0, {1.0, 2.0, 3.0}),
                raw_section(section_role::gradient, 1, 10, {2, 7}, {0.5, -0.5})},
               checksum);
}

}  // namespace

TEST_CASE("section_bytes running past the end of the section area is truncated, however large") {
  for (const bool crc : {false, true}) {
    CAPTURE(crc);
    const auto good = two_sections(crc);
    REQUIRE(check(good) == errc::ok);
    const std::uint64_t area = good.size() - wire::message_header_bytes - (crc ? 4 : 0);
    for (const std::uint64_t bytes :
         {area + 1, area + 4, std::uint64_t(good.size()), std::uint64_t(good.size()) + 1,
          std::uint64_t(1) << 40, std::numeric_limits<std::uint64_t>::max()}) {
      CAPTURE(bytes);
      auto b = good;
      put<std::uint64_t>(b, kSection0, bytes);
      if (crc) reseal(b);
      CHECK(check(b) == errc::truncated);
    }
    // The second section running into the checksum trailer (or past the message end).
    auto b = good;
    const std::size_t second = kSection0 + 44;
    put<std::uint64_t>(b, second, detail::load_le<std::uint64_t>(b.data() + second) + 1);
    if (crc) reseal(b);
    CHECK(check(b) == errc::truncated);
  }
}

TEST_CASE("section_bytes below the section header is malformed_payload") {
  auto b = two_sections(false);
  put<std::uint64_t>(b, kSection0, 31);
  CHECK(check(b) == errc::malformed_payload);
  put<std::uint64_t>(b, kSection0, 0);
  CHECK(check(b) == errc::malformed_payload);
}

TEST_CASE("total_bytes smaller than the header (and trailer) is malformed_payload") {
  for (const std::uint64_t total : {0, 1, 23}) {
    CAPTURE(total);
    auto b = two_sections(false);
    put<std::uint64_t>(b, 16, total);
    CHECK(check(b) == errc::malformed_payload);
    CHECK(wire::peek(span<const std::byte>(b.data(), b.size())).error() == errc::malformed_payload);
  }
  // With the checksum flag the trailer counts: 27 bytes cannot hold header and trailer.
  auto b = two_sections(true);
  put<std::uint64_t>(b, 16, 27);
  CHECK(check(b) == errc::malformed_payload);
}

TEST_CASE("more sections than total_bytes can hold is size_overflow") {
  const auto good = two_sections(false);
  const std::uint32_t can_hold =
      static_cast<std::uint32_t>((good.size() - wire::message_header_bytes) / 32);
  auto b = good;
  put<std::uint32_t>(b, 12, can_hold + 1);
  CHECK(check(b) == errc::size_overflow);
  put<std::uint32_t>(b, 12, std::numeric_limits<std::uint32_t>::max());
  CHECK(check(b) == errc::size_overflow);
  // As many as it can hold is not an overflow.
  put<std::uint32_t>(b, 12, can_hold);
  CHECK(check(b) != errc::size_overflow);
}

TEST_CASE("a Rice parameter of 32 or more is reserved_field") {
  auto b = two_sections(false);
  const std::size_t second = kSection0 + 44;
  b[second + 20] = static_cast<std::byte>(wire::index_coding::rice);
  for (const int r : {32, 33, 255}) {
    CAPTURE(r);
    b[second + 22] = static_cast<std::byte>(r);
    CHECK(check(b) == errc::reserved_field);
  }
}

TEST_CASE("a dense section with kept != numel is malformed_payload") {
  auto b = two_sections(false);
  put<std::uint32_t>(b, kSection0 + 12, 4);  // numel 4, kept 3
  CHECK(check(b) == errc::malformed_payload);
  // kept above numel keeps its own code.
  put<std::uint32_t>(b, kSection0 + 12, 2);
  CHECK(check(b) == errc::kept_exceeds_numel);
}

TEST_CASE("a dense section with an index payload is malformed_payload") {
  // Section 1 (raw_u32, kept 2 of 10) relabelled dense: index bytes 8 and kept != numel.
  auto b = two_sections(false);
  const std::size_t second = kSection0 + 44;
  b[second + 20] = static_cast<std::byte>(wire::index_coding::dense);
  CHECK(check(b) == errc::malformed_payload);
}

TEST_CASE("an fp64 value beyond the destination type is value_out_of_range") {
  const auto b = forge(wire::message_kind::gradients,
                       {dense_section(section_role::gradient, 0, {3.5e38}, value_coding::fp64)});
  const span<const std::byte> msg(b.data(), b.size());
  CHECK(wire::validate(msg));
  CHECK(wire::validate<float>(msg).error() == errc::value_out_of_range);
}

TEST_CASE("the fp64 limit for binary32 is FLT_MAX + 2^103: at it refused, just below it FLT_MAX") {
  // docs/wire_format.md: the midpoint between FLT_MAX and 2^128 rounds up (to even) to an
  // infinity; every smaller magnitude rounds to FLT_MAX.
  const double limit = 0x1.ffffffp+127;
  REQUIRE(limit == static_cast<double>(std::numeric_limits<float>::max()) + 0x1p103);
  for (const double sign : {1.0, -1.0}) {
    CAPTURE(sign);
    const auto at = forge(wire::message_kind::gradients,
                          {dense_section(section_role::gradient, 0, {sign * limit}, value_coding::fp64)});
    CHECK(wire::validate<float>(span<const std::byte>(at.data(), at.size())).error() == errc::value_out_of_range);
    const auto below = forge(wire::message_kind::gradients,
                             {dense_section(section_role::gradient, 0, {sign * std::nextafter(limit, 0.0)},
                                            value_coding::fp64)});
    const span<const std::byte> msg(below.data(), below.size());
    REQUIRE(wire::validate<float>(msg));
    const auto d = wire::decode<float>(msg);
    REQUIRE(d.size() == 1);
    CHECK(d[0].values[0] == static_cast<float>(sign) * std::numeric_limits<float>::max());
  }
}
