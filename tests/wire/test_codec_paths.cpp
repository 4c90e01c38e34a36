// The fast paths of the wire codecs against their references: index payloads written by the
// word-at-a-time encoders against a bit-by-bit encoder written from the spec; the one-pass gap
// measurement (AVX2 and portable) against a direct count; fp16 (F16C) and bf16 (AVX2)
// conversions against the per-value functions on every rounding boundary, with the errors of the
// first refused value; and decoders that check the checksum in the same read as the sections.
#include <gradcomp/wire/tensor_message.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "support/sanitized.hpp"
#include "wire/forge.hpp"

using namespace gradcomp;
namespace cpu = gradcomp::detail::cpu;
namespace wire = gradcomp::wire;

namespace {

// Runs f once on the automatic kernels and once pinned to the portable ones.
template <class F>
void on_every_path(F&& f) {
  for (const int level : {-1, static_cast<int>(cpu::simd_level::portable)}) {
    CAPTURE(level);
    cpu::simd_override().store(level);
    f();
  }
  cpu::simd_override().store(-1);
}

// A bit-by-bit writer, least significant bit first, as the spec describes the bit order.
struct reference_bits {
  std::vector<std::byte> bytes;
  std::uint64_t count = 0;
  void put(bool bit) {
    if (count % 8 == 0) bytes.push_back(std::byte{0});
    if (bit) bytes.back() |= static_cast<std::byte>(1u << (count % 8));
    ++count;
  }
};

std::vector<std::byte> reference_rice(const std::vector<std::uint32_t>& idx, int r) {
  reference_bits w;
  std::uint64_t prev_plus_one = 0;
  for (const std::uint32_t i : idx) {
    const std::uint64_t d = i - prev_plus_one;
    prev_plus_one = std::uint64_t(i) + 1;
    for (std::uint64_t q = d >> r; q > 0; --q) w.put(true);
    w.put(false);
    for (int b = 0; b < r; ++b) w.put(((d >> b) & 1u) != 0);
  }
  return w.bytes;
}

std::vector<std::byte> reference_varint(const std::vector<std::uint32_t>& idx) {
  std::vector<std::byte> out;
  std::uint64_t prev_plus_one = 0;
  for (const std::uint32_t i : idx) {
    std::uint64_t d = i - prev_plus_one;
    prev_plus_one = std::uint64_t(i) + 1;
    do {
      const auto low = static_cast<unsigned>(d & 0x7fu);
      d >>= 7;
      out.push_back(static_cast<std::byte>(low | (d != 0 ? 0x80u : 0u)));
    } while (d != 0);
  }
  return out;
}

// k sorted distinct positions below n, each chosen with probability (still to choose) / (left).
std::vector<std::uint32_t> positions(std::uint32_t n, std::size_t k, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> idx;
  idx.reserve(k);
  for (std::uint64_t i = 0; i < n && idx.size() < k; ++i) {
    const std::uint64_t left = n - i, wanted = k - idx.size();
    if (rng() % left < wanted) idx.push_back(static_cast<std::uint32_t>(i));
  }
  return idx;
}

struct index_case {
  std::uint32_t n;
  std::vector<std::uint32_t> idx;
};

std::vector<index_case> index_cases() {
  std::vector<index_case> cases;
  for (const std::uint32_t n : {1u, 7u, 64u, 1000u, 1u << 20})
    for (const double density : {0.0, 0.0001, 0.001, 0.01, 0.1, 0.5, 1.0}) {
      const auto k = static_cast<std::size_t>(std::llround(n * density));
      cases.push_back({n, positions(n, k, n * 31 + k)});
    }
  // Long gaps: unary runs longer than a word for small parameters, and gaps near 2^32.
  const std::uint32_t top = std::numeric_limits<std::uint32_t>::max();
  cases.push_back({top, {0u, 1u, top - 2, top - 1}});
  cases.push_back({top, {top / 2, top / 2 + 1, top / 2 + 70000, top - 1}});
  std::vector<std::uint32_t> mixed = positions(1u << 24, 3000, 5);
  mixed.push_back((1u << 30) + 17);
  cases.push_back({1u << 31, mixed});
  return cases;
}

std::uint64_t reference_quotients(const std::vector<std::uint32_t>& idx, int r) {
  std::uint64_t sum = 0, prev_plus_one = 0;
  for (const std::uint32_t i : idx) {
    sum += (i - prev_plus_one) >> r;
    prev_plus_one = std::uint64_t(i) + 1;
  }
  return sum;
}

}  // namespace

TEST_CASE("Rice and varint payloads are the spec's bits, for every parameter and long gaps") {
  for (const auto& c : index_cases()) {
    CAPTURE(c.n);
    CAPTURE(c.idx.size());
    const span<const std::uint32_t> idx(c.idx.data(), c.idx.size());
    for (int r = 0; r <= 31; ++r) {
      CAPTURE(r);
      // Under the sanitizers, the cases of more than 10^5 indices take every fourth parameter
      // and the largest (the smaller cases take them all): each is seconds of checked reads.
      if (gradcomp_test::sanitized && c.idx.size() > 100000 && r % 4 != 0 && r != 31) continue;
      // Parameters far too small for long gaps make payloads of gigabytes: not these.
      if (reference_quotients(c.idx, r) > (std::uint64_t(1) << 24)) continue;
      const auto want = reference_rice(c.idx, r);
      REQUIRE(gradcomp::detail::rice_bytes(idx, r) == want.size());
      // Room past the payload is filled with a marker that must survive.
      std::vector<std::byte> got(want.size() + 16, std::byte{0xA5});
      gradcomp::detail::encode_rice(idx, r, got.data(), want.size());
      CHECK(std::equal(want.begin(), want.end(), got.begin()));
      CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(want.size()), got.end(),
                        [](std::byte b) { return b == std::byte{0xA5}; }));
      std::vector<std::uint32_t> back(c.idx.size());
      const errc e = gradcomp::detail::decode_rice(want.data(), want.size(), r, c.n, static_cast<std::uint32_t>(c.idx.size()),
                                                   [&](std::uint32_t j, std::uint32_t i) { back[j] = i; });
      CHECK(e == errc::ok);
      CHECK(back == c.idx);
    }
    const auto varint = reference_varint(c.idx);
    std::vector<std::byte> got(varint.size());
    gradcomp::detail::encode_varint(idx, got.data());
    CHECK(got == varint);
  }
}

TEST_CASE("one pass over the gaps: every coding's size and the first bad index, on every path") {
  on_every_path([] {
    for (const auto& c : index_cases()) {
      CAPTURE(c.n);
      CAPTURE(c.idx.size());
      const span<const std::uint32_t> idx(c.idx.data(), c.idx.size());
      const auto s = gradcomp::detail::measure_indices(idx, c.n);
      REQUIRE(s.error == errc::ok);
      CHECK(s.raw == 4 * c.idx.size());
      CHECK(s.bitmap == (std::uint64_t(c.n) + 7) / 8);
      CHECK(s.varint == reference_varint(c.idx).size());
      CHECK(s.rice == gradcomp::detail::rice_bytes(idx, s.rice_parameter));
      // The smallest of the three parameters around the center.
      const int center = gradcomp::detail::rice_center(c.n, c.idx.size());
      for (int r = std::max(0, center - 1); r <= std::min(center + 1, 31); ++r) {
        const std::uint64_t bits = reference_quotients(c.idx, r) + c.idx.size() * (1 + std::uint64_t(r));
        CHECK(s.rice <= (bits + 7) / 8);
      }
    }
    // Errors, at every position of a list long enough for the vector loop: the first in order.
    std::vector<std::uint32_t> base = positions(1u << 16, 40, 9);
    for (std::size_t at = 0; at < base.size(); ++at) {
      CAPTURE(at);
      auto out_of_range = base;
      out_of_range[at] = 1u << 16;
      auto repeated = base;
      repeated[at] = at == 0 ? base[1] : base[at - 1];
      auto both = base;
      both[at] = 1u << 16;  // out of range at `at`, then a decrease right after it
      const auto measure = [](const std::vector<std::uint32_t>& v) {
        return gradcomp::detail::measure_indices(span<const std::uint32_t>(v.data(), v.size()), 1u << 16).error;
      };
      CHECK(measure(out_of_range) == errc::index_out_of_range);
      CHECK(measure(repeated) == errc::indices_not_increasing);
      if (at + 1 < base.size()) {
        both[at + 1] = 0;
        CHECK(measure(both) == errc::index_out_of_range);
        auto later = base;
        later[at + 1] = later[at];  // repeated at at + 1, out of range later on
        later.back() = 1u << 16;
        CHECK(measure(later) == (at + 1 == base.size() - 1 ? errc::index_out_of_range : errc::indices_not_increasing));
      }
    }
  });
}

namespace {

// Encodes `v` as one dense section of coding c; the error, or the value payload.
result<std::vector<std::byte>> dense_values_payload(const std::vector<float>& v, wire::value_coding c) {
  std::vector<std::byte> out(c == wire::value_coding::fp32 ? 4 * v.size() : 2 * v.size());
  const errc e = gradcomp::detail::encode_values<float>(span<const float>(v.data(), v.size()), c, out.data());
  if (e != errc::ok) return fail(e);
  return out;
}

// The same through the per-value path.
template <class Codec>
result<std::vector<std::byte>> dense_payload_each(const std::vector<float>& v) {
  std::vector<std::byte> out(Codec::fixed_bytes * v.size());
  const errc e = Codec::template encode_each<float>(span<const float>(v.data(), v.size()), out.data());
  if (e != errc::ok) return fail(e);
  return out;
}

float from_bits(std::uint32_t b) { return gradcomp::detail::bits_float(b); }

// Floats on every rounding boundary of a 16-bit coding whose value of bits h is the binary32
// `widen(h)`: each representable value, the midpoints to the next one and their neighbours.
template <class Widen>
std::vector<float> boundaries(Widen&& widen, std::uint32_t finite_top) {
  std::vector<float> v;
  for (std::uint32_t h = 0; h < finite_top; ++h) {
    const std::uint32_t lo = gradcomp::detail::float_bits(widen(h));
    const std::uint32_t hi = gradcomp::detail::float_bits(widen(h + 1));  // h + 1 may be infinity
    const std::uint32_t mid = lo + (hi - lo) / 2;
    for (const std::uint32_t b : {lo, lo + 1, mid - 1, mid, mid + 1, hi - 1}) {
      v.push_back(from_bits(b));
      v.push_back(-from_bits(b));
    }
  }
  return v;
}

// `sound` (all encodable) as one section, then windows of every tail length over `all` (with
// refused values among them): the same bytes or the same error on both paths.
template <class Codec>
void check_conversions(const std::vector<float>& sound, const std::vector<float>& all) {
  const auto fast = dense_values_payload(sound, Codec::code);
  REQUIRE(fast);
  CHECK(*fast == *dense_payload_each<Codec>(sound));
  for (const std::size_t len : {1, 7, 8, 15, 16, 17, 33}) {
    for (std::size_t first = 0; first + len <= all.size(); first += 37 * len + 1) {
      const std::vector<float> v(all.begin() + static_cast<std::ptrdiff_t>(first),
                                 all.begin() + static_cast<std::ptrdiff_t>(first + len));
      const auto a = dense_values_payload(v, Codec::code);
      const auto b = dense_payload_each<Codec>(v);
      REQUIRE(a.has_value() == b.has_value());
      if (a) {
        CHECK(*a == *b);
      } else {
        CHECK(a.error() == b.error());
      }
    }
  }
}

}  // namespace

TEST_CASE("fp16 and bf16 encoding: the vector conversions are the per-value ones on every boundary") {
  using gradcomp::detail::bf16_codec;
  using gradcomp::detail::fp16_codec;
  const auto half = boundaries([](std::uint32_t h) { return gradcomp::detail::half_to_float(static_cast<std::uint16_t>(h)); }, 0x7c00);
  const auto bf16 = boundaries([](std::uint32_t h) { return gradcomp::detail::bf16_to_float(static_cast<std::uint16_t>(h)); }, 0x7f80);
  // Values that round beyond the coding: refused as value_out_of_range.
  REQUIRE(std::count_if(half.begin(), half.end(), [](float f) { return std::fabs(f) >= 65520.0f; }) > 0);
  on_every_path([&] {
    std::vector<float> sound_half, sound_bf16;
    for (const float f : half)
      if (std::fabs(f) < 65520.0f) sound_half.push_back(f);
    for (const float f : bf16)
      if (std::fabs(f) < from_bits(0x7f7f8000u)) sound_bf16.push_back(f);  // from there on: infinity
    check_conversions<fp16_codec>(sound_half, half);
    check_conversions<bf16_codec>(sound_bf16, bf16);
    // A random sweep of every exponent.
    std::mt19937 rng(3);
    std::vector<float> sweep, sweep_half, sweep_bf16;
    for (int j = 0; j < 100000; ++j) {
      const float f = from_bits(rng());
      if (!std::isfinite(f)) continue;
      sweep.push_back(f);
      if (std::fabs(f) < 65520.0f) sweep_half.push_back(f);
      if (std::fabs(f) < from_bits(0x7f7f8000u)) sweep_bf16.push_back(f);
    }
    check_conversions<fp16_codec>(sweep_half, sweep);
    check_conversions<bf16_codec>(sweep_bf16, sweep);
  });
}

TEST_CASE("fp16 and bf16 encoding: the first refused value decides the error, on every path") {
  on_every_path([] {
    for (const auto coding : {wire::value_coding::fp16, wire::value_coding::bf16, wire::value_coding::fp32}) {
      CAPTURE(wire::to_string(coding));
      const float too_big = coding == wire::value_coding::fp16 ? 70000.0f : std::numeric_limits<float>::max();
      for (const std::size_t at : {std::size_t(0), std::size_t(5), std::size_t(8), std::size_t(31), std::size_t(32),
                                   std::size_t(40)}) {
        CAPTURE(at);
        std::vector<float> v(41, 0.25f);
        v[at] = std::numeric_limits<float>::quiet_NaN();
        CHECK(dense_values_payload(v, coding).error() == errc::non_finite_input);
        if (coding == wire::value_coding::fp32) continue;
        // The max float rounds to infinity in bf16: out of range, like 70000 in fp16.
        v[at] = too_big;
        CHECK(dense_values_payload(v, coding).error() == errc::value_out_of_range);
        if (at + 1 < v.size()) {
          v[at + 1] = std::numeric_limits<float>::infinity();  // refused too, but later
          CHECK(dense_values_payload(v, coding).error() == errc::value_out_of_range);
          v[at] = -std::numeric_limits<float>::infinity();
          v[at + 1] = too_big;
          CHECK(dense_values_payload(v, coding).error() == errc::non_finite_input);
        }
      }
    }
  });
}

TEST_CASE("fp16 decoding: the F16C conversion is the per-value one for every finite half") {
  std::vector<std::byte> all(2 * 0x7c00 * 2);
  std::vector<float> want;
  for (std::uint32_t h = 0; h < 0x7c00; ++h)
    for (const std::uint32_t sign : {0u, 0x8000u}) {
      gradcomp::detail::store_le<std::uint16_t>(all.data() + 2 * want.size(), static_cast<std::uint16_t>(h | sign));
      want.push_back(gradcomp::detail::half_to_float(static_cast<std::uint16_t>(h | sign)));
    }
  on_every_path([&] {
    for (const std::size_t len : {want.size(), std::size_t(9), std::size_t(255), std::size_t(256), std::size_t(257)}) {
      std::vector<float> acc(len, 0.0f);
      gradcomp::detail::add_values<float>(all.data(), wire::value_coding::fp16, 0, len, acc.data(),
                                          [](std::size_t j) { return j; });
      for (std::size_t j = 0; j < len; ++j)
        REQUIRE(gradcomp::detail::float_bits(acc[j]) == gradcomp::detail::float_bits(0.0f + want[j]));
    }
  });
}

namespace {

std::vector<std::byte> message_with_checksum(std::size_t dense_values) {
  std::vector<float> dense(dense_values);
  for (std::size_t j = 0; j < dense.size(); ++j) dense[j] = 0.001f * static_cast<float>(j % 977) - 0.3f;
  static std::vector<std::uint32_t> idx = {3, 90, 91, 700};
  static std::vector<float> val = {1.0f, -2.0f, 0.5f, 4.0f};
  tensor_message<float> m[2];
  m[0].tensor = 0;
  m[0].numel = 1000;
  m[0].indices = span<const std::uint32_t>(idx.data(), idx.size());
  m[0].values = span<const float>(val.data(), val.size());
  m[1].tensor = 1;
  m[1].numel = dense.size();
  m[1].dense = true;
  m[1].values = span<const float>(dense.data(), dense.size());
  wire::encode_options opt;
  opt.checksum = true;
  opt.indices = wire::index_coding::rice;
  return wire::encode(span<const tensor_message<float>>(m, 2), opt);
}

using gradcomp_test::reseal;

}  // namespace

TEST_CASE("one read of a checksummed message: a mismatch comes before every section error") {
  // A dense section of many checksum blocks, so that the checks and the checksum interleave.
  for (const std::size_t dense_values : {std::size_t(10), std::size_t(20000)}) {
    CAPTURE(dense_values);
    const auto good = message_with_checksum(dense_values);
    const std::size_t dense_values_at = good.size() - 4 - 4 * dense_values;
    std::vector<float> acc0(1000, 0.0f), acc1(dense_values, 0.0f);
    std::vector<span<float>> dest = {span<float>(acc0.data(), acc0.size()), span<float>(acc1.data(), acc1.size())};
    std::vector<std::uint32_t> scratch(16);
    const auto accumulate = [&](const std::vector<std::byte>& b) {
      return wire::decode_accumulate<float>(span<const std::byte>(b.data(), b.size()),
                                            span<const span<float>>(dest.data(), dest.size()),
                                            span<std::uint32_t>(scratch.data(), scratch.size()));
    };
    const auto validate = [](const std::vector<std::byte>& b) { return wire::validate(span<const std::byte>(b.data(), b.size())); };
    REQUIRE(validate(good));
    REQUIRE(accumulate(good));
    const std::vector<float> once0 = acc0, once1 = acc1;
    struct damage {
      std::size_t at;
      std::byte to;
      errc error;  // once the checksum is made to match
    };
    const damage cases[] = {
        {8, std::byte{7}, errc::unknown_coding},                                 // message kind
        {wire::message_header_bytes + 19, std::byte{0xff}, errc::kept_exceeds_numel},  // kept
        {wire::message_header_bytes + 21, std::byte{99}, errc::unknown_coding},  // value coding
        {dense_values_at + 3, std::byte{0x7f}, errc::non_finite_input},          // a dense value's exponent...
        {good.size() - 5, std::byte{0x7f}, errc::non_finite_input},              // ...the last value's
    };
    for (const auto& d : cases) {
      CAPTURE(d.at);
      auto b = good;
      b[d.at] = d.to;
      if (d.error == errc::non_finite_input) b[d.at - 1] |= std::byte{0x80};  // exponent all ones
      CHECK(validate(b).error() == errc::checksum_mismatch);
      CHECK(accumulate(b).error() == errc::checksum_mismatch);
      reseal(b);
      CHECK(validate(b).error() == d.error);
      CHECK(accumulate(b).error() == d.error);
      CHECK(acc0 == once0);  // nothing was added by a refused message
      CHECK(acc1 == once1);
    }
  }
}

TEST_CASE("decode_accumulate without scratch: positions kept on the stack while they fit, the same sums") {
  // Sections of 1500, 1000 and 300 kept positions in Rice and varint: the first and the third
  // fit in the stack positions (2048), the second is decoded twice; a damaged last section
  // changes nothing.
  std::mt19937_64 rng(71);
  const std::uint32_t numel = 200000;
  const std::size_t kept[] = {1500, 1000, 300};
  std::vector<std::vector<std::uint32_t>> idx(3);
  std::vector<std::vector<float>> val(3);
  std::vector<tensor_message<float>> m(3);
  for (std::size_t t = 0; t < 3; ++t) {
    idx[t] = positions(numel, kept[t], 71 + t);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t j = 0; j < kept[t]; ++j) val[t].push_back(normal(rng));
    m[t].tensor = static_cast<std::uint32_t>(t);
    m[t].numel = numel;
    m[t].dense = false;
    m[t].indices = span<const std::uint32_t>(idx[t].data(), idx[t].size());
    m[t].values = span<const float>(val[t].data(), val[t].size());
  }
  static_assert(wire::decode_accumulate_stack_positions == 2048, "the sections above are sized for 2048");
  for (const auto coding : {wire::index_coding::rice, wire::index_coding::delta_varint}) {
    CAPTURE(static_cast<int>(coding));
    wire::encode_options opt;
    opt.indices = coding;
    opt.checksum = true;
    const auto msg = wire::encode(span<const tensor_message<float>>(m.data(), m.size()), opt);
    std::vector<std::vector<float>> a(3, std::vector<float>(numel, 0.5f)), b = a;
    std::vector<span<float>> da, db;
    for (std::size_t t = 0; t < 3; ++t) {
      da.emplace_back(a[t].data(), numel);
      db.emplace_back(b[t].data(), numel);
    }
    std::vector<std::uint32_t> scratch(2800);
    const span<const std::byte> view(msg.data(), msg.size());
    REQUIRE(wire::decode_accumulate<float>(view, span<const span<float>>(da.data(), 3)));
    REQUIRE(wire::decode_accumulate<float>(view, span<const span<float>>(db.data(), 3),
                                           span<std::uint32_t>(scratch.data(), scratch.size())));
    CHECK(a == b);
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t j = 0; j < kept[t]; ++j) REQUIRE(a[t][idx[t][j]] == 0.5f + val[t][j]);
    // The last section's last value made infinite (checksum resealed): refused, nothing added.
    auto bad = msg;
    bad[bad.size() - 5] = std::byte{0x7f};
    bad[bad.size() - 6] |= std::byte{0x80};
    reseal(bad);
    const auto before = a;
    CHECK(wire::decode_accumulate<float>(span<const std::byte>(bad.data(), bad.size()),
                                         span<const span<float>>(da.data(), 3))
              .error() == errc::non_finite_input);
    CHECK(a == before);
  }
}

TEST_CASE("a dense fp32 section past the streaming size: the same bytes and checksum, at any alignment") {
  // Written past the caches (non-temporal stores) with its checksum in one read of the values;
  // the sections must be the bytes of the ordinary path (the same message without a checksum),
  // the trailer the CRC-32C of everything before it, whatever the output's alignment.
  const std::size_t n = wire::detail::streaming_payload_bytes / 4 + 12345;
  std::vector<float> dense(n);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : dense) x = normal(rng);
  tensor_message<float> m;
  m.tensor = 3;
  m.numel = n;
  m.dense = true;
  m.values = span<const float>(dense.data(), n);
  const span<const tensor_message<float>> one(&m, 1);
  wire::encode_options plain;
  const auto reference = wire::encode(one, plain);
  wire::encode_options sealed;
  sealed.checksum = true;
  const std::size_t bytes = reference.size() + 4;
  std::vector<std::byte> buffer(bytes + 64);
  for (const std::size_t offset : {std::size_t(0), std::size_t(1), std::size_t(6), std::size_t(13)}) {
    CAPTURE(offset);
    const span<std::byte> out(buffer.data() + offset, bytes);
    REQUIRE(wire::encode(one, sealed, out).value() == bytes);
    CHECK(std::memcmp(out.data() + wire::message_header_bytes, reference.data() + wire::message_header_bytes,
                      reference.size() - wire::message_header_bytes) == 0);
    CHECK(gradcomp::detail::load_le<std::uint32_t>(out.data() + bytes - 4) ==
          crc32c(span<const std::byte>(out.data(), bytes - 4)));
    CHECK(wire::validate(span<const std::byte>(out.data(), bytes)));
  }
  // A value that is not finite is refused, first block or last, as on the ordinary path.
  for (const std::size_t bad : {std::size_t(0), n / 2, n - 1}) {
    CAPTURE(bad);
    auto v = dense;
    v[bad] = bad == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    m.values = span<const float>(v.data(), n);
    CHECK(wire::encode(one, sealed, span<std::byte>(buffer.data(), bytes)).error() == errc::non_finite_input);
  }
}
