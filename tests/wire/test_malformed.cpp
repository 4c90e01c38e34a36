// Every class of damaged message gets its own error code, and nothing is written on error.
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "wire/forge.hpp"

using namespace gradcomp;
using wire::index_coding;
using wire::value_coding;

namespace {

// Offsets in the base message: header 24 bytes, then section 0 at 24 (kSection0).
using gradcomp_test::check;
using gradcomp_test::kSection0;
using gradcomp_test::put;
using gradcomp_test::reseal;

struct fixture {
  std::vector<std::uint32_t> idx = {2, 5, 9};
  std::vector<float> val = {1.0f, -2.0f, 3.0f};
  std::vector<float> dense = {0.5f, 0.25f};

  // Section 0: tensor 0 (numel 10) raw_u32 + fp32; section 1: tensor 1 (numel 2) dense fp32.
  std::vector<std::byte> make(index_coding ic = index_coding::raw_u32, bool checksum = false) const {
    const std::vector<tensor_message<float>> m = {
        {0, 10, false, {idx.data(), idx.size()}, {val.data(), val.size()}},
        {1, 2, true, {}, {dense.data(), dense.size()}}};
    wire::encode_options opt;
    opt.indices = ic;
    opt.checksum = checksum;
    return wire::encode(span<const tensor_message<float>>(m.data(), m.size()), opt);
  }
};

}  // namespace

TEST_CASE("the base messages are valid") {
  fixture f;
  for (auto ic : {index_coding::raw_u32, index_coding::delta_varint, index_coding::rice,
                  index_coding::bitmap}) {
    CHECK(check(f.make(ic)) == errc::ok);
    CHECK(check(f.make(ic, true)) == errc::ok);
  }
}

TEST_CASE("bad magic") {
  auto b = fixture().make();
  b[0] = std::byte{'X'};
  CHECK(check(b) == errc::bad_magic);
  CHECK(wire::peek(span<const std::byte>(b.data(), b.size())).error() == errc::bad_magic);
}

TEST_CASE("unsupported version") {
  auto b = fixture().make();
  put<std::uint16_t>(b, 4, 2);
  CHECK(check(b) == errc::unsupported_version);
  put<std::uint16_t>(b, 4, 0);
  CHECK(check(b) == errc::unsupported_version);
}

TEST_CASE("truncated header, section or payload") {
  const auto b = fixture().make();
  for (std::size_t len : {std::size_t(0), std::size_t(3), std::size_t(23), std::size_t(24),
                          std::size_t(40), b.size() - 1}) {
    CAPTURE(len);
    CHECK(wire::validate(span<const std::byte>(b.data(), len)).error() == errc::truncated);
  }
  // A declared length that matches the buffer but a section that runs past it.
  auto c = b;
  put<std::uint64_t>(c, kSection0, 100);  // section 0 runs 4 bytes past the message end
  CHECK(check(c) == errc::truncated);
}

TEST_CASE("trailing bytes after the message, or between the last section and the end") {
  auto b = fixture().make();
  b.push_back(std::byte{0});
  CHECK(check(b) == errc::trailing_bytes);
  // Declare one more byte and add it: the sections no longer fill the message.
  auto c = fixture().make();
  c.push_back(std::byte{0});
  put<std::uint64_t>(c, 16, c.size());
  CHECK(check(c) == errc::trailing_bytes);
}

TEST_CASE("kept larger than numel") {
  auto b = fixture().make();
  put<std::uint32_t>(b, kSection0 + 12, 2);  // numel 2 < kept 3
  CHECK(check(b) == errc::kept_exceeds_numel);
}

TEST_CASE("index out of range, in every coding") {
  fixture f;
  auto b = f.make(index_coding::raw_u32);
  put<std::uint32_t>(b, kSection0 + 32 + 8, 10);  // third index 10 in a 10-element tensor
  CHECK(check(b) == errc::index_out_of_range);
  for (auto ic : {index_coding::delta_varint, index_coding::rice}) {
    CAPTURE(wire::to_string(ic));
    auto c = f.make(ic);
    put<std::uint32_t>(c, kSection0 + 12, 9);  // shrink numel below the last index (9)
    CHECK(check(c) == errc::index_out_of_range);
  }
}

TEST_CASE("indices not strictly increasing") {
  auto b = fixture().make(index_coding::raw_u32);
  put<std::uint32_t>(b, kSection0 + 32 + 4, 2);  // 2, 2, 9
  CHECK(check(b) == errc::indices_not_increasing);
  put<std::uint32_t>(b, kSection0 + 32 + 4, 1);  // 2, 1, 9
  CHECK(check(b) == errc::indices_not_increasing);
}

TEST_CASE("unknown codings, roles and kinds") {
  fixture f;
  auto b = f.make();
  b[kSection0 + 20] = std::byte{9};
  CHECK(check(b) == errc::unknown_coding);
  b = f.make();
  b[kSection0 + 21] = std::byte{0};
  CHECK(check(b) == errc::unknown_coding);
  for (int code = 5; code < 256; ++code) {  // every code but the known ones is reserved or invalid
    if (code >= 16 && code <= 21) continue;  // scaled_sign, ternary, one_bit, qsgd, qsgd_gamma, isgq
    CAPTURE(code);
    b = f.make();
    b[kSection0 + 21] = static_cast<std::byte>(code);
    CHECK(check(b) == errc::unknown_coding);
  }
  b = f.make();
  b[kSection0 + 23] = std::byte{9};
  CHECK(check(b) == errc::unknown_coding);
  b = f.make();
  put<std::uint32_t>(b, 8, 7);
  CHECK(check(b) == errc::unknown_coding);
}

TEST_CASE("reserved fields must be zero") {
  fixture f;
  auto b = f.make();
  put<std::uint16_t>(b, 6, 2);
  CHECK(check(b) == errc::reserved_field);
  b = f.make(index_coding::raw_u32);
  b[kSection0 + 22] = std::byte{3};  // a parameter on raw_u32
  CHECK(check(b) == errc::reserved_field);
  b = f.make(index_coding::rice);
  b[kSection0 + 22] = std::byte{32};  // Rice parameter above 31
  CHECK(check(b) == errc::reserved_field);
}

TEST_CASE("checksum mismatch, for a change anywhere in the message") {
  const auto good = fixture().make(index_coding::rice, true);
  for (std::size_t at : {std::size_t(10), kSection0 + 8, kSection0 + 33, good.size() - 9,
                         good.size() - 1}) {
    CAPTURE(at);
    auto b = good;
    b[at] ^= std::byte{0x10};
    CHECK(check(b) == errc::checksum_mismatch);
  }
}

TEST_CASE("section count or size that overflows") {
  fixture f;
  auto b = f.make();
  put<std::uint32_t>(b, 12, std::numeric_limits<std::uint32_t>::max());
  CHECK(check(b) == errc::size_overflow);
  b = f.make();
  put<std::uint64_t>(b, kSection0, std::numeric_limits<std::uint64_t>::max());
  CHECK(check(b) == errc::truncated);  // a section running past the section area, however far
  b = f.make();
  put<std::uint64_t>(b, kSection0 + 24, std::numeric_limits<std::uint64_t>::max());  // index_bytes
  CHECK(check(b) == errc::malformed_payload);
  b = f.make();
  put<std::uint64_t>(b, 16, std::numeric_limits<std::uint64_t>::max());  // total_bytes
  CHECK(check(b) == errc::truncated);
}

TEST_CASE("malformed payloads") {
  fixture f;
  auto b = f.make(index_coding::raw_u32);
  put<std::uint64_t>(b, kSection0 + 24, 8);  // index bytes disagree with 4 x kept
  CHECK(check(b) == errc::malformed_payload);

  b = f.make(index_coding::delta_varint);  // gaps 2, 2, 3: bytes 02 02 03
  b[kSection0 + 32 + 2] = std::byte{0x83};  // the last varint continues past its payload
  CHECK(check(b) == errc::malformed_payload);

  // A varint longer than 32 bits: 5 continuation-capable bytes with high bits set.
  tensor_message<float> one{0, 1000, false, {}, {}};
  const std::uint32_t i0 = 999;
  const float v0 = 1.0f;
  one.indices = span<const std::uint32_t>(&i0, 1);
  one.values = span<const float>(&v0, 1);
  wire::encode_options vopt;
  vopt.indices = index_coding::delta_varint;
  auto c = wire::encode(span<const tensor_message<float>>(&one, 1), vopt);  // 999 = e7 07
  REQUIRE(c.size() == 24 + 32 + 2 + 4);
  c[kSection0 + 33] = std::byte{0x87};  // continuation into a third byte that is the value
  CHECK(check(c) != errc::ok);

  // The same gap written in a longer form than needed: 999 as e7 87 00 instead of e7 07.
  tensor_message<float> two{0, 1000, false, {}, {}};
  const std::uint32_t i2[2] = {3, 999};
  const float v2[2] = {1.0f, 2.0f};
  two.indices = span<const std::uint32_t>(i2, 2);
  two.values = span<const float>(v2, 2);
  auto d = wire::encode(span<const tensor_message<float>>(&two, 1), vopt);  // gaps 3, 995: 03 e3 07
  REQUIRE(detail::load_le<std::uint64_t>(d.data() + kSection0 + 24) == 3);
  d[kSection0 + 32] = std::byte{0x83};  // 3 as 83 00: one byte longer...
  d[kSection0 + 33] = std::byte{0x00};
  d[kSection0 + 34] = std::byte{0x00};  // ...and the next gap becomes 0 (00): same length
  CHECK(check(d) == errc::malformed_payload);

  b = f.make(index_coding::rice);
  b[kSection0 + 32 + static_cast<std::size_t>(detail::load_le<std::uint64_t>(b.data() + kSection0 + 24)) - 1] |=
      std::byte{0x80};  // a set padding bit (the stream does not fill its last byte)
  CHECK(check(b) == errc::malformed_payload);

  b = f.make(index_coding::bitmap);  // 10 elements: 2 bytes, bits 2, 5, 9
  b[kSection0 + 32] |= std::byte{0x01};  // a fourth bit set: popcount != kept
  CHECK(check(b) == errc::malformed_payload);
  b = f.make(index_coding::bitmap);
  b[kSection0 + 33] |= std::byte{0x80};  // padding bit 15 of a 10-element bitmap
  CHECK(check(b) == errc::malformed_payload);

  b = f.make();
  put<std::uint64_t>(b, kSection0, 32 + 12 + 8);  // section length cuts into the values
  put<std::uint64_t>(b, 16, b.size());
  CHECK(check(b) != errc::ok);
}

TEST_CASE("non-finite values on the wire are rejected") {
  auto b = fixture().make();
  const std::size_t values_at = kSection0 + 32 + 12;
  put<std::uint32_t>(b, values_at + 4, 0x7fc00000u);  // NaN
  CHECK(check(b) == errc::non_finite_input);
  put<std::uint32_t>(b, values_at + 4, 0xff800000u);  // -inf
  CHECK(check(b) == errc::non_finite_input);
}

TEST_CASE("destinations that are too small, and decode errors that leave them unchanged") {
  fixture f;
  const auto good = f.make(index_coding::rice, true);
  const span<const std::byte> msg(good.data(), good.size());
  std::vector<float> acc0(10, 1.0f), acc1(2, 1.0f), short0(9, 1.0f);
  std::vector<span<float>> dest = {span<float>(short0.data(), 9), span<float>(acc1.data(), 2)};
  CHECK(wire::decode_accumulate<float>(msg, span<const span<float>>(dest.data(), 2)).error() ==
        errc::output_too_small);
  CHECK(short0 == std::vector<float>(9, 1.0f));
  CHECK(acc1 == std::vector<float>(2, 1.0f));
  dest = {span<float>(acc0.data(), 10)};
  CHECK(wire::decode_accumulate<float>(msg, span<const span<float>>(dest.data(), 1)).error() ==
        errc::unknown_tensor);
  CHECK(acc0 == std::vector<float>(10, 1.0f));

  // The second section is damaged: the first must not have been applied either.
  auto bad = f.make(index_coding::raw_u32, true);
  const std::size_t section1 = kSection0 + 32 + 12 + 12;
  put<std::uint32_t>(bad, section1 + 32 + 4, 0x7f800000u);  // +inf in the dense values
  reseal(bad);
  dest = {span<float>(acc0.data(), 10), span<float>(acc1.data(), 2)};
  CHECK(wire::decode_accumulate<float>(span<const std::byte>(bad.data(), bad.size()),
                                       span<const span<float>>(dest.data(), 2))
            .error() == errc::non_finite_input);
  CHECK(acc0 == std::vector<float>(10, 1.0f));
  CHECK(acc1 == std::vector<float>(2, 1.0f));

  // decode_section: too small, and untouched on error.
  std::vector<std::uint32_t> idx(2, 77);
  std::vector<float> val(3, 7.0f);
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) {
    if (s.tensor != 0) return;
    CHECK(wire::decode_section<float>(msg, s, span<std::uint32_t>(idx.data(), 2),
                                      span<float>(val.data(), 3))
              .error() == errc::output_too_small);
  });
  CHECK(idx == std::vector<std::uint32_t>(2, 77));
  CHECK(val == std::vector<float>(3, 7.0f));

  // An fp64 value beyond float range decodes into double but not into float.
  const std::uint32_t i0 = 0;
  const double huge = 1e300;
  tensor_message<double> m{0, 1, false, {&i0, 1}, {&huge, 1}};
  wire::encode_options o64;
  o64.values = value_coding::fp64;
  const auto big = wire::encode(span<const tensor_message<double>>(&m, 1), o64);
  const span<const std::byte> bm(big.data(), big.size());
  CHECK(wire::validate(bm));
  std::vector<float> f1(1, 0.0f);
  std::vector<span<float>> fd = {span<float>(f1.data(), 1)};
  CHECK(wire::decode_accumulate<float>(bm, span<const span<float>>(fd.data(), 1)).error() ==
        errc::value_out_of_range);
  std::vector<double> d1(1, 0.0);
  std::vector<span<double>> dd = {span<double>(d1.data(), 1)};
  CHECK(wire::decode_accumulate<double>(bm, span<const span<double>>(dd.data(), 1)));
  CHECK(d1[0] == 1e300);
}

TEST_CASE("peek reads only the header") {
  const auto b = fixture().make(index_coding::bitmap, true);
  const auto h = wire::peek(span<const std::byte>(b.data(), b.size()));
  REQUIRE(h);
  CHECK(h->version == 1);
  CHECK(h->section_count == 2);
  CHECK(h->total_bytes == b.size());
  CHECK(h->has_checksum());
  CHECK(h->kind == wire::message_kind::gradients);
  auto damaged = b;
  damaged[kSection0 + 40] ^= std::byte{1};  // payload damage is not peek's business
  CHECK(wire::peek(span<const std::byte>(damaged.data(), damaged.size())));
  CHECK(check(damaged) == errc::checksum_mismatch);
}
