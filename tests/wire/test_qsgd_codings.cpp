// The qsgd and qsgd_gamma value codings (docs/wire_format.md, "Value codings"): a norm per bucket
// and a level per value, in fixed-width codes or Elias-gamma codes of the non-zero levels and their
// gaps. Exact round trips through both forms with the layout read back, the encoder's choice of
// the shorter form (and of the fixed one for device receivers), the literal bytes of both forms,
// what the encoder refuses (values on no level, non-finite values or norms, bad layouts), what the
// decoder refuses in either form (layout words, norms, levels, signs, gaps, stream lengths,
// padding), and sums through decode_accumulate.
#include <gradcomp/wire/codecs/qsgd.hpp>
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

// Values of `n` elements on the levels of `levels` under random norms (one per bucket), a share
// `nonzero` of them on a non-zero level.
template <class T>
std::vector<T> on_levels(std::size_t n, std::uint32_t bucket, std::uint32_t levels, double nonzero, std::uint64_t seed,
                         std::vector<float>& norms) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  norms.assign((n + bucket - 1) / bucket, 0.0f);
  for (auto& x : norms) x = static_cast<float>(u(rng) * 8.0);
  std::vector<T> v(n);
  for (std::size_t j = 0; j < n; ++j) {
    const auto level = u(rng) < nonzero ? static_cast<std::uint32_t>(1 + rng() % levels) : 0u;
    v[j] = gradcomp::detail::qsgd_value<T>(norms[j / bucket], level, levels, rng() % 2 != 0);
  }
  return v;
}

wire::encode_options qsgd_options(bool device_readable = false) {
  wire::encode_options o;
  o.values = o.dense_values = wire::value_coding::qsgd;
  o.device_readable = device_readable;
  return o;
}

template <class T>
tensor_message<T> with_layout(tensor_message<T> m, std::uint32_t bucket, std::uint32_t levels,
                              const float* scales) {
  m.parameters.bucket = bucket;
  m.parameters.levels = levels;
  m.parameters.scales = scales;
  return m;
}

wire::value_coding coding_of(const std::vector<std::byte>& msg) {
  return static_cast<wire::value_coding>(msg[wire::message_header_bytes + 21]);
}

}  // namespace

TEST_CASE_TEMPLATE("qsgd: values round-trip exactly in both forms, the layout with them", T, float, double) {
  for (const std::uint32_t levels : {1u, 3u, 15u, 255u, 65535u}) {
    for (const std::uint32_t bucket : {1u, 7u, 512u}) {
      for (const double nonzero : {0.0, 0.05, 0.9}) {
        for (const std::size_t n : {0u, 1u, 13u, 1000u}) {
          CAPTURE(levels);
          CAPTURE(bucket);
          CAPTURE(nonzero);
          CAPTURE(n);
          std::vector<float> norms;
          const auto v = on_levels<T>(n, bucket, levels, nonzero, levels + bucket + n, norms);
          for (const bool device : {false, true}) {
            const auto msg = encode_one(with_layout(dense(v), bucket, levels, norms.data()), qsgd_options(device));
            REQUIRE(msg);
            const auto c = coding_of(*msg);
            CHECK((c == wire::value_coding::qsgd || (!device && c == wire::value_coding::qsgd_gamma)));
            const auto decoded = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
            REQUIRE(decoded.size() == 1);
            CHECK(decoded[0].header.parameters.bucket == bucket);
            CHECK(decoded[0].header.parameters.levels == levels);
            REQUIRE(decoded[0].values.size() == v.size());
            for (std::size_t j = 0; j < v.size(); ++j) CHECK(same_bits(decoded[0].values[j], v[j] + T(0)));
          }
        }
      }
    }
  }
  // Sparse sections: the kept values form the buckets.
  const std::vector<std::uint32_t> idx = {0, 3, 4, 200, 201, 999};
  const std::vector<T> vals = {T(0.5), T(-1), T(0), T(1), T(0), T(-0.5)};
  tensor_message<T> m;
  m.numel = 1000;
  m.indices = span<const std::uint32_t>(idx.data(), idx.size());
  m.values = span<const T>(vals.data(), vals.size());
  for (const auto ic : {wire::index_coding::raw_u32, wire::index_coding::rice, wire::index_coding::bitmap}) {
    CAPTURE(std::string(wire::to_string(ic)));
    auto o = qsgd_options();
    o.indices = ic;
    const auto msg = encode_one(with_layout(m, 4, 2, nullptr), o);  // norms 1 and 1: each bucket's largest
    REQUIRE(msg);
    const auto d = wire::decode<T>(span<const std::byte>(msg->data(), msg->size()));
    CHECK(d[0].indices == idx);
    CHECK(d[0].values == vals);
  }
}

TEST_CASE("qsgd: the encoder writes the shorter form, and the fixed one for device receivers") {
  std::vector<float> norms;
  for (const double nonzero : {0.0, 0.02, 0.2, 0.5, 1.0}) {
    CAPTURE(nonzero);
    const auto v = on_levels<float>(4096, 512, 15, nonzero, 7, norms);
    const auto m = with_layout(dense(v), 512, 15, norms.data());
    const auto chosen = encode_one(m, qsgd_options());
    const auto fixed = encode_one(m, qsgd_options(true));
    REQUIRE(chosen);
    REQUIRE(fixed);
    CHECK(coding_of(*fixed) == wire::value_coding::qsgd);
    const std::size_t fixed_bytes = dense_payload + 12 + 4 * 8 + 4096 * 5 / 8;
    CHECK(fixed->size() == fixed_bytes);
    // The gamma form's length: 20 bytes, the norms, then per non-zero level its gap's code, a sign
    // and its level's code.
    auto gamma_bits = [](std::uint64_t x) {  // floor(log2 x) zeros, then the bits of x
      std::uint64_t zeros = 0;
      while ((x >> (zeros + 1)) != 0) ++zeros;
      return 2 * zeros + 1;
    };
    std::uint64_t bits = 0, next = 0;
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (v[j] == 0.0f) continue;
      const auto level = static_cast<std::uint32_t>(std::lround(std::fabs(v[j]) / norms[j / 512] * 15));
      bits += gamma_bits(j + 1 - next) + 1 + gamma_bits(level);
      next = j + 1;
    }
    const std::size_t gamma_bytes = dense_payload + 20 + 4 * 8 + (bits + 7) / 8;
    CHECK(chosen->size() == std::min(fixed_bytes, gamma_bytes));
    const auto shorter = gamma_bytes < fixed_bytes ? wire::value_coding::qsgd_gamma : wire::value_coding::qsgd;
    CHECK(coding_of(*chosen) == shorter);
    if (nonzero <= 0.2) CHECK(coding_of(*chosen) == wire::value_coding::qsgd_gamma);
    // The bound of a section is the fixed form's length.
    CHECK(*wire::max_section_bytes(4096, 4096, true, qsgd_options(), m.parameters) ==
          fixed_bytes - wire::message_header_bytes);
  }
  // Asking for qsgd_gamma is asking for the shorter form too.
  const auto v = on_levels<float>(64, 8, 3, 1.0, 9, norms);
  auto m = with_layout(dense(v), 8, 3, norms.data());
  m.coding = wire::value_coding::qsgd_gamma;
  const auto msg = encode_one(m, wire::encode_options{});
  REQUIRE(msg);
  CHECK(coding_of(*msg) == wire::value_coding::qsgd);
}

TEST_CASE("qsgd: payload length, names, literal bytes of both forms") {
  wire::coding_parameters p;
  p.bucket = 4;
  p.levels = 3;
  for (std::uint64_t k = 0; k < 40; ++k) {
    CHECK(*wire::value_payload_bytes(wire::value_coding::qsgd, k, p) == 12 + 4 * ((k + 3) / 4) + (3 * k + 7) / 8);
    CHECK(*wire::value_payload_bytes(wire::value_coding::qsgd_gamma, k, p) ==
          *wire::value_payload_bytes(wire::value_coding::qsgd, k, p));
  }
  CHECK(wire::value_bytes_per_element(wire::value_coding::qsgd) == 0);
  CHECK(std::strcmp(wire::to_string(wire::value_coding::qsgd), "qsgd") == 0);
  CHECK(std::strcmp(wire::to_string(wire::value_coding::qsgd_gamma), "qsgd_gamma") == 0);
  CHECK(wire::is_known(wire::value_coding::qsgd_gamma));
  // Fixed: bucket 4, 3 levels (3-bit codes: 2 bits of level, the sign on top), norms 1.5 and 3:
  // 0.5 -1 1.5 -0.5 | 2 -1 are levels 1 2 3 1 | 2 1 with signs 0 1 0 1 | 0 1.
  const std::vector<float> v = {0.5f, -1.0f, 1.5f, -0.5f, 2.0f, -1.0f};
  const std::vector<float> norms = {1.5f, 3.0f};
  const auto fixed = encode_one(with_layout(dense(v), 4, 3, norms.data()), qsgd_options());
  REQUIRE(fixed);
  const std::vector<unsigned> fixed_payload = {
      0x04, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,  // bucket 4, 3 levels, 2 norms
      0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x40, 0x40,                          // 1.5, 3
      0xf1, 0xaa, 0x02};  // codes 1, 6, 3, 5 | 2, 5 (3 bits each, least significant first)
  REQUIRE(fixed->size() == dense_payload + fixed_payload.size());
  for (std::size_t i = 0; i < fixed_payload.size(); ++i)
    CHECK(static_cast<unsigned>((*fixed)[dense_payload + i]) == fixed_payload[i]);
  // Gamma: 40 values, bucket 64, 7 levels, norm 7: 1 at 2 (level 1), -3 at 9 (level 3).
  std::vector<float> w(40, 0.0f);
  w[2] = 1.0f;
  w[9] = -3.0f;
  const float seven = 7.0f;
  const auto gamma = encode_one(with_layout(dense(w), 64, 7, &seven), qsgd_options());
  REQUIRE(gamma);
  CHECK(coding_of(*gamma) == wire::value_coding::qsgd_gamma);
  const std::vector<unsigned> gamma_payload = {
      0x40, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,  // bucket 64, 7 levels, 1 norm
      0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,                          // 2 non-zero, 2 stream bytes
      0x00, 0x00, 0xe0, 0x40,                                                  // 7
      // stream order: gap 3 (0 11), sign 0, level 1 (1); gap 7 (00 111), sign 1, level 3 (0 11)
      0x96, 0x37};
  REQUIRE(gamma->size() == dense_payload + gamma_payload.size());
  for (std::size_t i = 0; i < gamma_payload.size(); ++i)
    CHECK(static_cast<unsigned>((*gamma)[dense_payload + i]) == gamma_payload[i]);
}

TEST_CASE_TEMPLATE("qsgd: the encoder refuses layouts, norms and values it cannot hold", T, float, double) {
  std::vector<float> norms;
  const auto v = on_levels<T>(20, 8, 5, 0.5, 3, norms);
  CHECK(encode_one(with_layout(dense(v), 0, 5, norms.data()), qsgd_options()).error() == errc::invalid_argument);
  CHECK(encode_one(with_layout(dense(v), 8, 0, norms.data()), qsgd_options()).error() == errc::invalid_argument);
  CHECK(encode_one(with_layout(dense(v), 8, 65536, norms.data()), qsgd_options()).error() == errc::invalid_argument);
  CHECK(encode_one(with_layout(dense(v), 8, 5, norms.data()), qsgd_options()));
  // A value on no level of its bucket: another level count, another norm, a value in between.
  CHECK(encode_one(with_layout(dense(v), 8, 4, norms.data()), qsgd_options()).error() == errc::value_out_of_range);
  auto off = v;
  std::size_t j = 0;
  while (off[j] == T(0)) ++j;
  off[j] = off[j] * T(0.999);
  CHECK(encode_one(with_layout(dense(off), 8, 5, norms.data()), qsgd_options()).error() == errc::value_out_of_range);
  off = v;
  off[j] = off[j] > T(0) ? T(norms[j / 8]) * T(1.5) : T(-norms[j / 8]) * T(1.5);  // beyond the norm
  CHECK(encode_one(with_layout(dense(off), 8, 5, norms.data()), qsgd_options()).error() == errc::value_out_of_range);
  // Norms: not finite, negative.
  auto bad = norms;
  bad[1] = std::numeric_limits<float>::infinity();
  CHECK(encode_one(with_layout(dense(v), 8, 5, bad.data()), qsgd_options()).error() == errc::non_finite_input);
  bad[1] = -norms[1];
  CHECK(encode_one(with_layout(dense(v), 8, 5, bad.data()), qsgd_options()).error() == errc::value_out_of_range);
  bad[1] = 1e-40f;  // subnormal: two levels could give one value
  CHECK(encode_one(with_layout(dense(v), 8, 5, bad.data()), qsgd_options()).error() == errc::value_out_of_range);
  CHECK(encode_one(with_layout(dense(std::vector<T>{T(1e-40f), T(0)}), 8, 5, nullptr), qsgd_options()).error() ==
        errc::value_out_of_range);
  // Non-finite values, with and without norms.
  off = v;
  off[5] = std::numeric_limits<T>::quiet_NaN();
  CHECK(encode_one(with_layout(dense(off), 8, 5, norms.data()), qsgd_options()).error() == errc::non_finite_input);
  CHECK(encode_one(with_layout(dense(off), 8, 5, nullptr), qsgd_options()).error() == errc::non_finite_input);
  // Without norms, each bucket's largest magnitude is its norm: v does not put one at level 5.
  CHECK(encode_one(with_layout(dense(v), 8, 5, nullptr), qsgd_options()).error() == errc::value_out_of_range);
  if (std::is_same<T, double>::value)
    CHECK(encode_one(with_layout(dense(std::vector<T>{T(0.1)}), 8, 5, nullptr), qsgd_options()).error() ==
          errc::value_out_of_range);
  // The size functions state the same errors.
  std::vector<tensor_message<T>> ms = {with_layout(dense(v), 8, 4, norms.data())};
  CHECK(wire::encoded_bytes(span<const tensor_message<T>>(ms.data(), ms.size()), qsgd_options()).error() ==
        errc::value_out_of_range);
}

TEST_CASE("qsgd: the decoder refuses layout words, norms, codes and padding the rules forbid") {
  const auto check = gradcomp_test::validate_bytes;
  std::vector<float> norms;
  for (const std::size_t n : {0u, 5u, 21u}) {
    CAPTURE(n);
    const auto v = on_levels<float>(n, 8, 5, 1.0, n, norms);  // 4-bit codes
    const auto good = encode_one(with_layout(dense(v), 8, 5, norms.data()), qsgd_options(true));
    REQUIRE(good);
    REQUIRE(check(*good));
    auto with = [&](std::size_t at, std::uint32_t bits) {
      return gradcomp_test::with_word(*good, dense_payload + at, bits);
    };
    // Bucket 0, another bucket (the norm count then disagrees), levels 0 and 65536, another level
    // count (the length then disagrees), a norm count that disagrees.
    CHECK(check(with(0, 0)).error() == errc::malformed_payload);
    if (n > 8) CHECK(check(with(0, 4)).error() == errc::malformed_payload);
    CHECK(check(with(4, 0)).error() == errc::malformed_payload);
    CHECK(check(with(4, 65536)).error() == errc::malformed_payload);
    if (n != 0) CHECK(check(with(4, 100)).error() == errc::malformed_payload);
    CHECK(check(with(8, static_cast<std::uint32_t>((n + 7) / 8 + 1))).error() == errc::malformed_payload);
    for (std::size_t b = 0; b < (n + 7) / 8; ++b) {
      CAPTURE(b);
      CHECK(check(with(12 + 4 * b, 0x7f800000u)).error() == errc::non_finite_input);
      CHECK(check(with(12 + 4 * b, 0xffc00000u)).error() == errc::non_finite_input);
      CHECK(check(with(12 + 4 * b, 0xbf800000u)).error() == errc::malformed_payload);
      CHECK(check(with(12 + 4 * b, 0x80000000u)).error() == errc::malformed_payload);
      CHECK(check(with(12 + 4 * b, 0x00000001u)).error() == errc::malformed_payload);  // subnormal
      CHECK(check(with(12 + 4 * b, 0x007fffffu)).error() == errc::malformed_payload);
      CHECK(check(with(12 + 4 * b, 0x00800000u)));  // the smallest normal
      if (norms[b] != 0.0f) CHECK(check(with(12 + 4 * b, 0)).error() == errc::malformed_payload);  // levels under 0
    }
    const std::size_t codes = dense_payload + 12 + 4 * ((n + 7) / 8);
    if (n != 0) {
      // Value 0's code (4 bits): level 6 > 5, and level 0 with the sign bit.
      auto b = *good;
      b[codes] = static_cast<std::byte>((static_cast<unsigned>(b[codes]) & 0xf0u) | 6u);
      CHECK(check(b).error() == errc::malformed_payload);
      b[codes] = static_cast<std::byte>((static_cast<unsigned>(b[codes]) & 0xf0u) | 8u);
      CHECK(check(b).error() == errc::malformed_payload);
    }
    if (n % 2 != 0) {
      auto b = *good;
      b[b.size() - 1] |= static_cast<std::byte>(0x80u);  // a padding bit
      CHECK(check(b).error() == errc::malformed_payload);
    }
  }
}

TEST_CASE("qsgd_gamma: the decoder refuses counts, gaps, levels, stream lengths and padding the rules forbid") {
  const auto check = gradcomp_test::validate_bytes;
  // 40 values, bucket 64, 7 levels, norm 7: 1 at 2, -3 at 9 (the literal payload above).
  std::vector<float> w(40, 0.0f);
  w[2] = 1.0f;
  w[9] = -3.0f;
  const float seven = 7.0f;
  const auto good = encode_one(with_layout(dense(w), 64, 7, &seven), qsgd_options());
  REQUIRE(good);
  REQUIRE(coding_of(*good) == wire::value_coding::qsgd_gamma);
  REQUIRE(check(*good));
  auto with = [&](std::size_t at, std::uint32_t bits) {
    return gradcomp_test::with_word(*good, dense_payload + at, bits);
  };
  auto stream = [&](unsigned b0, unsigned b1) {
    auto b = *good;
    b[dense_payload + 24] = static_cast<std::byte>(b0);
    b[dense_payload + 25] = static_cast<std::byte>(b1);
    return b;
  };
  CHECK(check(with(0, 0)).error() == errc::malformed_payload);   // bucket 0
  CHECK(check(with(4, 0)).error() == errc::malformed_payload);   // levels 0
  CHECK(check(with(8, 2)).error() == errc::malformed_payload);   // 2 norms for 40 values in buckets of 64
  CHECK(check(with(12, 41)).error() == errc::malformed_payload);  // more non-zero values than values
  CHECK(check(with(12, 1)).error() == errc::malformed_payload);  // one entry: the stream has bits left
  CHECK(check(with(12, 3)).error() == errc::malformed_payload);  // three: the stream ends inside the third
  CHECK(check(with(16, 3)).error() == errc::malformed_payload);  // a stream length that is not the payload's
  CHECK(check(with(20, 0x7f800000u)).error() == errc::non_finite_input);
  CHECK(check(with(20, 0xc0e00000u)).error() == errc::malformed_payload);  // -7
  CHECK(check(with(20, 0)).error() == errc::malformed_payload);            // levels under a zero norm
  // The stream (bits in stream order): the valid one, a set padding bit, a level above 7 (gap 3
  // 011, sign 0, level 8 0001000), a gap past the values (gap 41 00000101001), zeros only.
  CHECK(check(stream(0x96, 0x37)));
  CHECK(check(stream(0x96, 0xb7)).error() == errc::malformed_payload);
  CHECK(check(stream(0x86, 0x00)).error() == errc::malformed_payload);
  CHECK(check(stream(0xa0, 0x04)).error() == errc::malformed_payload);
  CHECK(check(stream(0x00, 0x00)).error() == errc::malformed_payload);
  // And the device-readable form of the same values is the fixed one.
  const auto fixed = encode_one(with_layout(dense(w), 64, 7, &seven), qsgd_options(true));
  REQUIRE(fixed);
  CHECK(coding_of(*fixed) == wire::value_coding::qsgd);
}

TEST_CASE("qsgd: decode_accumulate adds every value, zeros included, from either form") {
  std::vector<float> norms;
  const auto v = on_levels<float>(300, 64, 9, 0.1, 5, norms);
  for (const bool device : {false, true}) {
    const auto msg = encode_one(with_layout(dense(v), 64, 9, norms.data()), qsgd_options(device));
    REQUIRE(msg);
    CHECK(coding_of(*msg) == (device ? wire::value_coding::qsgd : wire::value_coding::qsgd_gamma));
    std::vector<float> acc(300, 1.0f);
    acc[7] = -0.0f;
    const span<float> dest(acc.data(), acc.size());
    REQUIRE(wire::decode_accumulate<float>(span<const std::byte>(msg->data(), msg->size()),
                                           span<const span<float>>(&dest, 1)));
    for (std::size_t j = 0; j < v.size(); ++j) {
      const float before = j == 7 ? -0.0f : 1.0f;
      CHECK(same_bits(acc[j], before + v[j]));
    }
  }
}
