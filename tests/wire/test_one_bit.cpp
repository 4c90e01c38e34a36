// The one_bit value coding (docs/wire_format.md, "Value codings"): a column count, two binary32
// values per column, one bit per value. Exact round trips with the column count read back, the
// payload length, the literal bytes of a payload, what the encoder refuses (a layout that does not
// fit, a second value of one sign in a column, values binary32 does not hold), what the decoder
// refuses (a column count that does not fit the length, bad pairs, padding), and sums through
// decode_accumulate.
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

// A rows x cols matrix (row-major) whose column c holds neg[c] or pos[c] at random.
template <class T>
std::vector<T> two_valued(std::size_t rows, std::size_t cols, std::uint64_t seed, std::vector<T>& neg,
                          std::vector<T>& pos) {
  std::mt19937_64 rng(seed);
  neg.resize(cols);
  pos.resize(cols);
  for (std::size_t c = 0; c < cols; ++c) {
    neg[c] = -static_cast<T>(static_cast<float>(1 + rng() % 1000) / 64.0f);
    pos[c] = static_cast<T>(static_cast<float>(rng() % 1000) / 128.0f);  // 0 included
  }
  std::vector<T> v(rows * cols);
  for (std::size_t j = 0; j < v.size(); ++j) v[j] = rng() % 2 != 0 ? neg[j % cols] : pos[j % cols];
  return v;
}

wire::encode_options one_bit_options(wire::index_coding ic = wire::index_coding::automatic) {
  wire::encode_options o;
  o.indices = ic;
  o.values = o.dense_values = wire::value_coding::one_bit;
  return o;
}

template <class T>
tensor_message<T> with_columns(tensor_message<T> m, std::uint32_t columns) {
  m.parameters.columns = columns;
  return m;
}

}  // namespace

TEST_CASE_TEMPLATE("one_bit: matrices round-trip exactly, the column count with them", T, float, double) {
  for (std::size_t cols : {1u, 3u, 8u, 17u}) {
    for (std::size_t rows : {0u, 1u, 2u, 5u, 64u}) {
      CAPTURE(cols);
      CAPTURE(rows);
      std::vector<T> neg, pos;
      const auto v = two_valued<T>(rows, cols, 100 * cols + rows, neg, pos);
      const auto msg = encode_one(with_columns(dense(v), static_cast<std::uint32_t>(cols)), one_bit_options());
      REQUIRE(msg);
      CHECK(msg->size() == dense_payload + 4 + 8 * cols + (v.size() + 7) / 8);
      const auto decoded = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
      REQUIRE(decoded.size() == 1);
      CHECK(decoded[0].header.parameters.columns == cols);
      REQUIRE(decoded[0].values.size() == v.size());
      for (std::size_t j = 0; j < v.size(); ++j) CHECK(same_bits(decoded[0].values[j], v[j]));
    }
  }
  // Zeros of both signs are the two values of a column: -0 (bit set) and +0.
  const std::vector<T> zeros = {T(0), -T(0), -T(0), T(0)};
  const auto z = encode_one(dense(zeros), one_bit_options());
  REQUIRE(z);
  const auto dz = wire::decode<T>(span<const std::byte>(z->data(), z->size()));
  for (std::size_t j = 0; j < zeros.size(); ++j) CHECK(same_bits(dz[0].values[j], zeros[j]));
  // Sparse sections: the kept values form the matrix.
  const std::vector<std::uint32_t> idx = {0, 3, 4, 200, 201, 999};
  const std::vector<T> vals = {T(0.25), T(-1), T(-0.5), T(0.25), T(-1), T(2)};
  tensor_message<T> m;
  m.numel = 1000;
  m.indices = span<const std::uint32_t>(idx.data(), idx.size());
  m.values = span<const T>(vals.data(), vals.size());
  m.parameters.columns = 3;
  for (const auto ic : {wire::index_coding::raw_u32, wire::index_coding::delta_varint, wire::index_coding::rice,
                        wire::index_coding::bitmap}) {
    CAPTURE(std::string(wire::to_string(ic)));
    const auto msg = encode_one(m, one_bit_options(ic));
    REQUIRE(msg);
    const auto d = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
    CHECK(d[0].indices == idx);
    CHECK(d[0].header.parameters.columns == 3u);
    for (std::size_t j = 0; j < vals.size(); ++j) CHECK(same_bits(d[0].values[j], vals[j]));
  }
}

TEST_CASE("one_bit: payload length, name, literal bytes") {
  wire::coding_parameters three;
  three.columns = 3;
  for (std::uint64_t k = 0; k < 40; ++k) {
    CHECK(*wire::value_payload_bytes(wire::value_coding::one_bit, k) == 4 + 8 + (k + 7) / 8);
    CHECK(*wire::value_payload_bytes(wire::value_coding::one_bit, k, three) == 4 + 24 + (k + 7) / 8);
  }
  CHECK(wire::value_bytes_per_element(wire::value_coding::one_bit) == 0);
  CHECK(std::strcmp(wire::to_string(wire::value_coding::one_bit), "one_bit") == 0);
  CHECK(wire::is_known(wire::value_coding::one_bit));
  CHECK(*wire::max_section_bytes(100, 100, true, one_bit_options(), three) == wire::section_header_bytes + 4 + 24 + 13);
  // A 3 x 2 matrix: column 0 holds -1 (0xbf800000) and 0.5 (0x3f000000), column 1 only 2
  // (0x40000000), so its negative value is -0 (0x80000000). Bits 1 0 | 0 0 | 1 0.
  const std::vector<float> v = {-1.0f, 2.0f, 0.5f, 2.0f, -1.0f, 2.0f};
  const auto msg = encode_one(with_columns(dense(v), 2), one_bit_options());
  REQUIRE(msg);
  const std::vector<unsigned> payload = {0x02, 0x00, 0x00, 0x00,                          // 2 columns
                                         0x00, 0x00, 0x80, 0xbf, 0x00, 0x00, 0x00, 0x3f,  // -1, 0.5
                                         0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x40,  // -0, 2
                                         0x11};
  REQUIRE(msg->size() == dense_payload + payload.size());
  for (std::size_t i = 0; i < payload.size(); ++i)
    CHECK(static_cast<unsigned>((*msg)[dense_payload + i]) == payload[i]);
}

TEST_CASE_TEMPLATE("one_bit: the encoder refuses layouts and values it cannot hold", T, float, double) {
  const std::vector<T> v = {T(-1), T(1), T(-1), T(1), T(-1), T(1)};
  CHECK(encode_one(with_columns(dense(v), 0), one_bit_options()).error() == errc::invalid_argument);
  CHECK(encode_one(with_columns(dense(v), 4), one_bit_options()).error() == errc::invalid_argument);
  CHECK(encode_one(with_columns(dense(v), 6), one_bit_options()));
  // Two negative values in one column (fine as two columns).
  const std::vector<T> w = {T(-1), T(-2), T(1), T(1)};
  CHECK(encode_one(dense(w), one_bit_options()).error() == errc::value_out_of_range);
  CHECK(encode_one(with_columns(dense(w), 2), one_bit_options()));
  CHECK(encode_one(dense(std::vector<T>{T(1), std::numeric_limits<T>::quiet_NaN()}), one_bit_options()).error() ==
        errc::non_finite_input);
  CHECK(encode_one(dense(std::vector<T>{-std::numeric_limits<T>::infinity()}), one_bit_options()).error() ==
        errc::non_finite_input);
  if (std::is_same<T, double>::value) {
    CHECK(encode_one(dense(std::vector<T>{T(0.1)}), one_bit_options()).error() == errc::value_out_of_range);
    CHECK(encode_one(dense(std::vector<T>{T(-1e300)}), one_bit_options()).error() == errc::value_out_of_range);
  }
  // The size bound states the same layout error as the encoder.
  std::vector<tensor_message<T>> ms = {with_columns(dense(v), 4)};
  CHECK(wire::encoded_bytes(span<const tensor_message<T>>(ms.data(), ms.size()), one_bit_options()).error() ==
        errc::invalid_argument);
}

TEST_CASE("one_bit: the decoder refuses a column count, pairs or padding the rules forbid") {
  const auto check = gradcomp_test::validate_bytes;
  std::vector<float> neg, pos;
  for (std::size_t rows : {0u, 3u, 4u}) {
    CAPTURE(rows);
    const auto v = two_valued<float>(rows, 2, rows, neg, pos);
    const auto good = encode_one(with_columns(dense(v), 2), one_bit_options());
    REQUIRE(good);
    REQUIRE(check(*good));
    auto with = [&](std::size_t at, std::uint32_t bits) {
      return gradcomp_test::with_word(*good, dense_payload + at, bits);
    };
    // Column counts: 0, one that does not divide the count, one that changes the length.
    CHECK(check(with(0, 0)).error() == errc::malformed_payload);
    if (rows != 0) CHECK(check(with(0, 4)).error() == errc::malformed_payload);
    CHECK(check(with(0, 1)).error() == errc::malformed_payload);
    CHECK(check(with(0, 0xffffffffu)).error() == errc::malformed_payload);
    // Each pair: the negative value first (sign bit set), then the non-negative one.
    for (std::size_t at : {4u, 8u, 12u, 16u}) {
      const bool negative = at % 8 == 4;
      CAPTURE(at);
      CHECK(check(with(at, 0x7f800000u)).error() == errc::non_finite_input);
      CHECK(check(with(at, 0xffc00000u)).error() == errc::non_finite_input);
      CHECK(check(with(at, negative ? 0x3f800000u : 0xbf800000u)).error() == errc::malformed_payload);
      CHECK(check(with(at, negative ? 0x00000000u : 0x80000000u)).error() == errc::malformed_payload);
      CHECK(check(with(at, negative ? 0x80000001u : 0x00000001u)));  // denormals of the right sign
    }
    if (v.size() % 8 != 0) {
      auto b = *good;
      b[dense_payload + 20 + v.size() / 8] |= static_cast<std::byte>(1u << 7);  // a padding bit
      CHECK(check(b).error() == errc::malformed_payload);
    }
  }
}

TEST_CASE("one_bit: decode_accumulate adds each column's value at every position") {
  const std::vector<float> v = {-1.0f, 2.0f, 0.5f, 2.0f, -1.0f, -3.0f};
  const auto msg = encode_one(with_columns(dense(v), 2), one_bit_options());
  REQUIRE(msg);
  std::vector<float> acc = {1, 1, 1, 1, 1, 1};
  const span<float> dest(acc.data(), acc.size());
  REQUIRE(wire::decode_accumulate<float>(span<const std::byte>(msg->data(), msg->size()),
                                         span<const span<float>>(&dest, 1)));
  CHECK(acc == std::vector<float>{0, 3, 1.5f, 3, 0, -2});
}
