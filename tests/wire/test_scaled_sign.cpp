// The scaled_sign value coding (docs/wire_format.md, "Value codings"): one binary32 scale per
// section and one sign bit per value. Exact round trips (signed zeros included), the payload
// length for every kept count around byte boundaries, what the encoder refuses, what the decoder
// refuses (scale and padding), and sums through decode_accumulate.
#include <gradcomp/wire/accumulate.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>
#include <gradcomp/wire/value_codecs.hpp>

#include <doctest/doctest.h>

#include "wire/one_section.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace wire = gradcomp::wire;
using gradcomp::errc;
using gradcomp::span;
using gradcomp::tensor_message;
using gradcomp_test::dense;
using gradcomp_test::dense_payload;
using gradcomp_test::encode_one;
using gradcomp_test::same_bits;

namespace {

template <class T>
std::vector<T> signs_of(std::size_t n, T magnitude, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = (rng() & 1) ? -magnitude : magnitude;
  return v;
}

wire::encode_options sign_options(wire::index_coding ic = wire::index_coding::automatic) {
  wire::encode_options o;
  o.indices = ic;
  o.values = o.dense_values = wire::value_coding::scaled_sign;
  return o;
}

}  // namespace

TEST_CASE_TEMPLATE("scaled_sign: dense and sparse sections round-trip exactly, signed zeros included", T, float,
                   double) {
  for (std::size_t n : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 1000u}) {
    CAPTURE(n);
    auto v = signs_of<T>(n, T(0.375), n);
    const auto msg = encode_one(dense(v), sign_options());
    REQUIRE(msg);
    CHECK(msg->size() == wire::message_header_bytes + wire::section_header_bytes + 4 + (n + 7) / 8);
    const auto decoded = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
    REQUIRE(decoded.size() == 1);
    REQUIRE(decoded[0].values.size() == n);
    for (std::size_t j = 0; j < n; ++j) CHECK(same_bits(decoded[0].values[j], v[j]));
  }
  // Zeros: the scale is 0 and each zero keeps its sign.
  const std::vector<T> zeros = {T(0), -T(0), -T(0), T(0), -T(0)};
  const auto z = encode_one(dense(zeros), sign_options());
  REQUIRE(z);
  const auto dz = wire::decode<T>(span<const std::byte>(z->data(), z->size()));
  for (std::size_t j = 0; j < zeros.size(); ++j) CHECK(same_bits(dz[0].values[j], zeros[j]));
  // Sparse: every index coding carries the positions; the values are the signs of one scale.
  const std::vector<std::uint32_t> idx = {0, 3, 4, 200, 201, 999};
  const auto vals = signs_of<T>(idx.size(), static_cast<T>(std::ldexp(1.0, -66)), 5);
  tensor_message<T> m;
  m.numel = 1000;
  m.indices = span<const std::uint32_t>(idx.data(), idx.size());
  m.values = span<const T>(vals.data(), vals.size());
  for (const auto ic : {wire::index_coding::raw_u32, wire::index_coding::delta_varint, wire::index_coding::rice,
                        wire::index_coding::bitmap}) {
    CAPTURE(std::string(wire::to_string(ic)));
    const auto msg = encode_one(m, sign_options(ic));
    REQUIRE(msg);
    const auto d = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
    CHECK(d[0].indices == idx);
    for (std::size_t j = 0; j < vals.size(); ++j) CHECK(same_bits(d[0].values[j], vals[j]));
  }
}

TEST_CASE("scaled_sign: payload length, name, and no fixed size per value") {
  for (std::uint64_t k = 0; k < 40; ++k) CHECK(*wire::value_payload_bytes(wire::value_coding::scaled_sign, k) == 4 + (k + 7) / 8);
  CHECK(*wire::value_payload_bytes(wire::value_coding::fp16, 5) == 10);
  CHECK(wire::value_payload_bytes(static_cast<wire::value_coding>(22), 5).error() == errc::unknown_coding);
  CHECK(wire::value_bytes_per_element(wire::value_coding::scaled_sign) == 0);
  CHECK(std::strcmp(wire::to_string(wire::value_coding::scaled_sign), "scaled_sign") == 0);
  CHECK(wire::is_known(wire::value_coding::scaled_sign));
  CHECK(!wire::is_known(static_cast<wire::value_coding>(22)));
  // The bound of max_section_bytes holds the payload.
  CHECK(*wire::max_section_bytes(100, 100, true, sign_options()) == wire::section_header_bytes + 4 + 13);
}

TEST_CASE_TEMPLATE("scaled_sign: the encoder refuses values it cannot hold exactly", T, float, double) {
  CHECK(encode_one(dense(std::vector<T>{T(1), T(-1), T(2)}), sign_options()).error() == errc::value_out_of_range);
  CHECK(encode_one(dense(std::vector<T>{T(1), std::numeric_limits<T>::quiet_NaN()}), sign_options()).error() ==
        errc::non_finite_input);
  CHECK(encode_one(dense(std::vector<T>{-std::numeric_limits<T>::infinity(), T(1)}), sign_options()).error() ==
        errc::non_finite_input);
  CHECK(encode_one(dense(std::vector<T>{T(0), T(1)}), sign_options()).error() == errc::value_out_of_range);
  if (std::is_same<T, double>::value) {
    // A magnitude binary32 does not hold exactly, and one beyond its range.
    CHECK(encode_one(dense(std::vector<T>{T(0.1), T(-0.1)}), sign_options()).error() == errc::value_out_of_range);
    CHECK(encode_one(dense(std::vector<T>{T(1e300)}), sign_options()).error() == errc::value_out_of_range);
  }
}

TEST_CASE("scaled_sign: the decoder refuses a bad scale and set padding bits, with kept 0 too") {
  for (std::size_t n : {0u, 5u, 8u}) {
    CAPTURE(n);
    std::vector<float> v = signs_of<float>(n, 2.0f, 1);
    const auto good = encode_one(dense(v), sign_options());
    REQUIRE(good);
    const auto check = gradcomp_test::validate_bytes;
    REQUIRE(check(*good));
    auto with_scale = [&](std::uint32_t bits) { return gradcomp_test::with_word(*good, dense_payload, bits); };
    CHECK(check(with_scale(0x7f800000u)).error() == errc::non_finite_input);  // +inf
    CHECK(check(with_scale(0x7fc00000u)).error() == errc::non_finite_input);  // NaN
    CHECK(check(with_scale(0xbf800000u)).error() == errc::malformed_payload);  // -1
    CHECK(check(with_scale(0x80000000u)).error() == errc::malformed_payload);  // -0
    CHECK(check(with_scale(0x00000001u)));                                     // a denormal is a scale
    if (n % 8 != 0) {
      auto b = *good;
      b[dense_payload + 4 + n / 8] |= static_cast<std::byte>(1u << 7);  // a padding bit
      CHECK(check(b).error() == errc::malformed_payload);
    }
    // One byte more or less than the payload length: the section's length disagrees.
    auto shorter = *good;
    shorter.pop_back();
    shorter[16] = static_cast<std::byte>(shorter.size());
    shorter[wire::message_header_bytes] = static_cast<std::byte>(shorter.size() - wire::message_header_bytes);
    CHECK(check(shorter).error() == errc::malformed_payload);
  }
}

TEST_CASE("scaled_sign: decode_accumulate adds +-scale at every position") {
  const std::vector<std::uint32_t> idx = {1, 2, 6};
  const std::vector<float> vals = {-0.5f, 0.5f, -0.5f};
  tensor_message<float> m;
  m.numel = 8;
  m.indices = span<const std::uint32_t>(idx.data(), idx.size());
  m.values = span<const float>(vals.data(), vals.size());
  const auto msg = encode_one(m, sign_options());
  REQUIRE(msg);
  std::vector<float> acc = {1, 1, 1, 1, 1, 1, 1, 1};
  const span<float> dest(acc.data(), acc.size());
  REQUIRE(wire::decode_accumulate<float>(span<const std::byte>(msg->data(), msg->size()), span<const span<float>>(&dest, 1)));
  CHECK(acc == std::vector<float>{1, 0.5f, 1.5f, 1, 1, 1, 0.5f, 1});
}
