// The ternary value coding (docs/wire_format.md, "Value codings"): one binary32 scale per section
// and a two-bit code per value (0, +scale, -scale). Exact round trips, the payload length around
// byte boundaries, the literal bytes of a payload, what the encoder refuses (a second magnitude, a
// scale binary32 does not hold), what the decoder refuses (the scale, the reserved code, codes
// under a zero scale, padding), and sums through decode_accumulate.
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

// n values drawn from {0, +s, -s}, each with probability 1/3.
template <class T>
std::vector<T> ternary_of(std::size_t n, T s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    const auto r = rng() % 3;
    x = r == 0 ? T(0) : (r == 1 ? s : -s);
  }
  return v;
}

wire::encode_options ternary_options(wire::index_coding ic = wire::index_coding::automatic) {
  wire::encode_options o;
  o.indices = ic;
  o.values = o.dense_values = wire::value_coding::ternary;
  return o;
}

}  // namespace

TEST_CASE_TEMPLATE("ternary: dense and sparse sections round-trip exactly", T, float, double) {
  for (std::size_t n : {1u, 3u, 4u, 5u, 7u, 8u, 9u, 1000u}) {
    CAPTURE(n);
    auto v = ternary_of<T>(n, T(0.375), n);
    v[0] = T(-0.375);  // the scale is present
    const auto msg = encode_one(dense(v), ternary_options());
    REQUIRE(msg);
    CHECK(msg->size() == dense_payload + 4 + (n + 3) / 4);
    const auto decoded = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
    REQUIRE(decoded.size() == 1);
    REQUIRE(decoded[0].values.size() == n);
    for (std::size_t j = 0; j < n; ++j) CHECK(same_bits(decoded[0].values[j], v[j]));
  }
  // All zeros, of either sign: scale 0, every code 0, every value +0.
  const std::vector<T> zeros = {T(0), -T(0), -T(0), T(0), -T(0)};
  const auto z = encode_one(dense(zeros), ternary_options());
  REQUIRE(z);
  CHECK(gradcomp::detail::load_le<std::uint32_t>(z->data() + dense_payload) == 0u);
  const auto dz = wire::decode<T>(span<const std::byte>(z->data(), z->size()));
  for (std::size_t j = 0; j < zeros.size(); ++j) CHECK(same_bits(dz[0].values[j], T(0)));
  // Sparse: every index coding carries the positions.
  const std::vector<std::uint32_t> idx = {0, 3, 4, 200, 201, 999};
  const std::vector<T> vals = {T(0.25), T(0), T(-0.25), T(-0.25), T(0.25), T(0)};
  tensor_message<T> m;
  m.numel = 1000;
  m.indices = span<const std::uint32_t>(idx.data(), idx.size());
  m.values = span<const T>(vals.data(), vals.size());
  for (const auto ic : {wire::index_coding::raw_u32, wire::index_coding::delta_varint, wire::index_coding::rice,
                        wire::index_coding::bitmap}) {
    CAPTURE(std::string(wire::to_string(ic)));
    const auto msg = encode_one(m, ternary_options(ic));
    REQUIRE(msg);
    const auto d = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
    CHECK(d[0].indices == idx);
    for (std::size_t j = 0; j < vals.size(); ++j) CHECK(same_bits(d[0].values[j], vals[j]));
  }
}

TEST_CASE("ternary: payload length, name, literal bytes") {
  for (std::uint64_t k = 0; k < 40; ++k) CHECK(*wire::value_payload_bytes(wire::value_coding::ternary, k) == 4 + (k + 3) / 4);
  CHECK(wire::value_bytes_per_element(wire::value_coding::ternary) == 0);
  CHECK(std::strcmp(wire::to_string(wire::value_coding::ternary), "ternary") == 0);
  CHECK(wire::is_known(wire::value_coding::ternary));
  CHECK(*wire::max_section_bytes(100, 100, true, ternary_options()) == wire::section_header_bytes + 4 + 25);
  // 0.5 = 0x3f000000; codes 1 0 3 0 | 0 1 3 (least significant first).
  const std::vector<float> v = {0.5f, 0.0f, -0.5f, 0.0f, 0.0f, 0.5f, -0.5f};
  const auto msg = encode_one(dense(v), ternary_options());
  REQUIRE(msg);
  const std::vector<unsigned> payload = {0x00, 0x00, 0x00, 0x3f, 0x31, 0x34};
  REQUIRE(msg->size() == dense_payload + payload.size());
  for (std::size_t i = 0; i < payload.size(); ++i) CHECK(static_cast<unsigned>((*msg)[dense_payload + i]) == payload[i]);
}

TEST_CASE_TEMPLATE("ternary: the encoder refuses values it cannot hold exactly", T, float, double) {
  CHECK(encode_one(dense(std::vector<T>{T(1), T(0), T(-2)}), ternary_options()).error() == errc::value_out_of_range);
  CHECK(encode_one(dense(std::vector<T>{T(1), std::numeric_limits<T>::quiet_NaN()}), ternary_options()).error() ==
        errc::non_finite_input);
  CHECK(encode_one(dense(std::vector<T>{T(0), -std::numeric_limits<T>::infinity()}), ternary_options()).error() ==
        errc::non_finite_input);
  if (std::is_same<T, double>::value) {
    CHECK(encode_one(dense(std::vector<T>{T(0.1), T(0)}), ternary_options()).error() == errc::value_out_of_range);
    CHECK(encode_one(dense(std::vector<T>{T(-1e300)}), ternary_options()).error() == errc::value_out_of_range);
  }
}

TEST_CASE("ternary: the decoder refuses a bad scale, the reserved code, codes under a zero scale, padding") {
  const auto check = gradcomp_test::validate_bytes;
  for (std::size_t n : {0u, 5u, 8u}) {
    CAPTURE(n);
    std::vector<float> v(n, 0.0f);
    for (std::size_t j = 0; j < n; j += 2) v[j] = j % 4 == 0 ? 2.0f : -2.0f;
    const auto good = encode_one(dense(v), ternary_options());
    REQUIRE(good);
    REQUIRE(check(*good));
    auto with_scale = [&](std::uint32_t bits) { return gradcomp_test::with_word(*good, dense_payload, bits); };
    CHECK(check(with_scale(0x7f800000u)).error() == errc::non_finite_input);  // +inf
    CHECK(check(with_scale(0x7fc00000u)).error() == errc::non_finite_input);  // NaN
    CHECK(check(with_scale(0xbf800000u)).error() == errc::malformed_payload);  // -1
    CHECK(check(with_scale(0x80000000u)).error() == errc::malformed_payload);  // -0
    CHECK(check(with_scale(0x00000001u)));                                     // a denormal is a scale
    if (n != 0) {
      // A zero scale with a non-zero code; a code 2 anywhere.
      CHECK(check(with_scale(0u)).error() == errc::malformed_payload);
      for (std::size_t j = 0; j < n; ++j) {
        auto b = *good;
        auto& byte = b[dense_payload + 4 + j / 4];
        byte = (byte & static_cast<std::byte>(~(3u << (2 * (j % 4))))) | static_cast<std::byte>(2u << (2 * (j % 4)));
        CHECK(check(b).error() == errc::malformed_payload);
      }
    }
    if (n % 4 != 0) {
      auto b = *good;
      b[dense_payload + 4 + n / 4] |= static_cast<std::byte>(1u << 7);  // a padding bit
      CHECK(check(b).error() == errc::malformed_payload);
    }
  }
  // A zero scale with every code zero is a payload of zeros.
  const std::vector<float> zeros(6, 0.0f);
  const auto z = encode_one(dense(zeros), ternary_options());
  REQUIRE(z);
  CHECK(check(*z));
}

TEST_CASE("ternary: decode_accumulate adds 0 or +-scale at every position") {
  const std::vector<std::uint32_t> idx = {1, 2, 5, 6};
  const std::vector<float> vals = {-0.5f, 0.5f, 0.0f, -0.5f};
  tensor_message<float> m;
  m.numel = 8;
  m.indices = span<const std::uint32_t>(idx.data(), idx.size());
  m.values = span<const float>(vals.data(), vals.size());
  const auto msg = encode_one(m, ternary_options());
  REQUIRE(msg);
  std::vector<float> acc = {1, 1, 1, 1, 1, 1, 1, 1};
  const span<float> dest(acc.data(), acc.size());
  REQUIRE(wire::decode_accumulate<float>(span<const std::byte>(msg->data(), msg->size()), span<const span<float>>(&dest, 1)));
  CHECK(acc == std::vector<float>{1, 0.5f, 1.5f, 1, 1, 1, 0.5f, 1});
}
