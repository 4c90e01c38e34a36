// How a decoder learns a value payload's length: from the header alone for the codings of this
// version, and from the parameter block for a coding that states its own layout there (the hook
// per-bucket and per-column scales use). A test-only coding stands for the latter.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace gradcomp;

namespace {

// Parameter block: a bucket size b as a little-endian u32 (b >= 1), then one binary32 scale per
// bucket of b values; then one sign bit per value, ceil(kept / 8) bytes.
struct bucketed_signs_codec {
  static constexpr wire::value_coding code = static_cast<wire::value_coding>(60);
  static constexpr std::uint64_t payload_bytes(std::uint64_t kept) noexcept {  // with b = 8
    return 4 + 4 * ((kept + 7) / 8) + (kept + 7) / 8;
  }
  static bool payload_fits(const std::byte* p, std::uint64_t bytes, std::uint64_t kept) noexcept {
    if (bytes < 4) return false;
    const auto b = gradcomp::detail::load_le<std::uint32_t>(p);
    if (b == 0) return false;
    const std::uint64_t buckets = (kept + b - 1) / b;
    return bytes == 4 + 4 * buckets + (kept + 7) / 8;
  }
};
using test_codecs = gradcomp::detail::codec_list<bucketed_signs_codec>;

std::vector<std::byte> block(std::uint32_t bucket, std::size_t bytes) {
  std::vector<std::byte> p(bytes + 4);
  gradcomp::detail::store_le<std::uint32_t>(p.data(), bucket);
  return p;
}

}  // namespace

TEST_CASE("a payload's length comes from the header for this version's codings") {
  std::vector<std::byte> p(64);
  using gradcomp::detail::value_payload_fits;
  CHECK(value_payload_fits(wire::value_coding::fp32, p.data(), 40, 10));
  CHECK(!value_payload_fits(wire::value_coding::fp32, p.data(), 36, 10));
  CHECK(value_payload_fits(wire::value_coding::fp16, p.data(), 20, 10));
  CHECK(value_payload_fits(wire::value_coding::scaled_sign, p.data(), 4 + 2, 10));
  CHECK(!value_payload_fits(wire::value_coding::scaled_sign, p.data(), 4 + 1, 10));
  CHECK(!value_payload_fits(static_cast<wire::value_coding>(60), p.data(), 40, 10));  // not known
}

TEST_CASE("a coding may state its payload's layout in its parameter block") {
  using gradcomp::detail::value_payload_fits;
  const auto c = bucketed_signs_codec::code;
  // 100 values in buckets of 25: 4 scales, 13 bytes of signs.
  auto p = block(25, 4 + 16 + 13);
  CHECK(value_payload_fits<test_codecs>(c, p.data(), 4 + 16 + 13, 100));
  CHECK(!value_payload_fits<test_codecs>(c, p.data(), 4 + 16 + 12, 100));
  CHECK(!value_payload_fits<test_codecs>(c, p.data(), 4 + 20 + 13, 100));
  // The same length means other buckets elsewhere: buckets of 20 need 5 scales.
  p = block(20, 4 + 16 + 13);
  CHECK(!value_payload_fits<test_codecs>(c, p.data(), 4 + 16 + 13, 100));
  CHECK(value_payload_fits<test_codecs>(c, block(20, 4 + 20 + 13).data(), 4 + 20 + 13, 100));
  // A bucket size of 0, and a payload too short for the block, are refused without reading past it.
  CHECK(!value_payload_fits<test_codecs>(c, block(0, 0).data(), 4, 0));
  CHECK(!value_payload_fits<test_codecs>(c, p.data(), 3, 0));
  // Without payload_fits the header decides: payload_bytes(kept).
  CHECK(!value_payload_fits<gradcomp::detail::codec_list<gradcomp::detail::fp32_codec>>(c, p.data(), 400, 100));
  CHECK(value_payload_fits<gradcomp::detail::codec_list<gradcomp::detail::fp32_codec>>(wire::value_coding::fp32,
                                                                                       p.data(), 400, 100));
}
