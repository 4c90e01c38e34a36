// Round trips through encode -> validate -> decode for every index coding x value coding, over
// densities 0 ... 1 and sizes 0 ... 1e7, plus the size promises of the encoder.
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "support/inputs.hpp"
#include "support/sanitized.hpp"
#include "wire/forge.hpp"

using namespace gradcomp;
using wire::index_coding;
using wire::value_coding;

namespace {

// k distinct sorted positions out of n (Floyd's algorithm), from a fixed seed.
std::vector<std::uint32_t> random_positions(std::uint32_t n, std::size_t k, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<char> taken(n, 0);
  std::vector<std::uint32_t> out;
  for (std::uint64_t j = n - k; j < n; ++j) {
    const auto t = static_cast<std::uint32_t>(std::uniform_int_distribution<std::uint64_t>(0, j)(rng));
    const auto pick = taken[t] ? static_cast<std::uint32_t>(j) : t;
    taken[pick] = 1;
    out.push_back(pick);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The value a coding must give back: exact for fp32/fp64, the library's nearest-even rounding
// (tested exhaustively in test_value_codings.cpp) for fp16/bf16; NaN when not encodable.
float expected_value(float x, value_coding c) {
  std::uint16_t h = 0;
  switch (c) {
    case value_coding::fp16: return detail::float_to_half(x, &h) ? detail::half_to_float(h) : NAN;
    case value_coding::bf16: return detail::float_to_bf16(x, &h) ? detail::bf16_to_float(h) : NAN;
    default: return x;
  }
}

struct case_result {
  std::size_t bytes = 0;
  wire::section_header header;
};

case_result round_trip(std::uint32_t n, const std::vector<std::uint32_t>& idx,
                       const std::vector<float>& val, index_coding ic, value_coding vc,
                       bool checksum) {
  tensor_message<float> m{5, n, false, span<const std::uint32_t>(idx.data(), idx.size()),
                          span<const float>(val.data(), val.size())};
  const span<const tensor_message<float>> one(&m, 1);
  wire::encode_options opt;
  opt.indices = ic;
  opt.values = vc;
  opt.checksum = checksum;
  std::vector<std::byte> buf(wire::max_encoded_bytes(one, opt).value());
  const auto written = wire::encode(one, opt, span<std::byte>(buf.data(), buf.size()));
  REQUIRE(written);
  const auto exact = wire::encoded_bytes(one, opt);
  REQUIRE(exact);
  CHECK(*exact == *written);
  const span<const std::byte> msg(buf.data(), *written);
  const auto h = wire::validate(msg);
  REQUIRE(h);
  case_result res;
  res.bytes = *written;
  std::vector<std::uint32_t> out_idx(idx.size() + 1, 0xffffffffu);
  std::vector<float> out_val(idx.size() + 1, -7.0f);
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) {
    res.header = s;
    const auto r = wire::decode_section<float>(msg, s, span<std::uint32_t>(out_idx.data(), out_idx.size()),
                                               span<float>(out_val.data(), out_val.size()));
    REQUIRE(r);
    CHECK(*r == idx.size());
  });
  CHECK(std::equal(idx.begin(), idx.end(), out_idx.begin()));
  bool values_ok = true;
  for (std::size_t j = 0; j < val.size(); ++j) values_ok &= out_val[j] == expected_value(val[j], vc);
  CHECK(values_ok);
  CHECK(out_idx[idx.size()] == 0xffffffffu);  // nothing written past kept
  CHECK(out_val[idx.size()] == -7.0f);
  if (ic != index_coding::automatic) CHECK(res.header.indices == ic);
  return res;
}

}  // namespace

TEST_CASE("round trip of every index coding x value coding over densities and sizes") {
  const std::uint32_t sizes[] = {0, 1, 7, 64, 1000, 65537, 10000000};
  const double densities[] = {0.0, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0};
  const index_coding codings[] = {index_coding::automatic, index_coding::raw_u32,
                                  index_coding::delta_varint, index_coding::rice,
                                  index_coding::bitmap};
  const value_coding values[] = {value_coding::fp32, value_coding::fp64, value_coding::fp16,
                                 value_coding::bf16};
  std::uint64_t seed = 1;
  for (std::uint32_t n : sizes) {
    for (double d : densities) {
      // Under the sanitizers, which check the same reads and writes at 65537 elements, the
      // 1e7-element tensor keeps only its sparse cases (indices past 2^23, up to 1e5 kept); they
      // come last, so the other cases' seeds are the same.
      if (gradcomp_test::sanitized && n == 10000000 && d > 1e-2) continue;
      const auto k = static_cast<std::size_t>(std::ceil(d * n));
      const auto idx = random_positions(n, k, ++seed);
      auto val = gradcomp_test::random_vector<float>(k, gradcomp_test::dist::student_t, seed);
      for (auto& v : val) v = std::max(-60000.0f, std::min(60000.0f, v));
      // The largest cases (1e6 to 1e7 kept elements) run two combinations; the rest the full grid.
      const bool big = n == 10000000 && d >= 0.1;
      for (index_coding ic : codings) {
        for (value_coding vc : values) {
          if (big && !(ic == index_coding::automatic && vc == value_coding::fp32) &&
              !(ic == index_coding::bitmap && vc == value_coding::fp16))
            continue;
          CAPTURE(n);
          CAPTURE(d);
          CAPTURE(wire::to_string(ic));
          CAPTURE(wire::to_string(vc));
          CAPTURE(seed);
          round_trip(n, idx, val, ic, vc, seed % 2 == 0);
        }
      }
    }
  }
}

TEST_CASE("the automatic coding is never larger than raw u32 and meets the bits-per-index targets") {
  const std::uint32_t n = 1000000;
  std::uint64_t seed = 77;
  for (double d : {1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 0.03, 0.1, 0.3, 0.5, 0.9, 1.0}) {
    const auto k = static_cast<std::size_t>(std::ceil(d * n));
    const auto idx = random_positions(n, k, ++seed);
    const std::vector<float> val(k, 1.0f);
    const auto autom = round_trip(n, idx, val, index_coding::automatic, value_coding::fp32, false);
    const auto raw = round_trip(n, idx, val, index_coding::raw_u32, value_coding::fp32, false);
    CAPTURE(d);
    CHECK(autom.bytes <= raw.bytes);
    const double bits = 8.0 * static_cast<double>(autom.header.index_bytes) / static_cast<double>(k);
    if (d == 1e-3) CHECK(bits <= 12.5);  // entropy of random positions: ~11.4
    if (d == 1e-2) CHECK(bits <= 8.6);   // entropy: ~8.1
    if (d >= 0.03) CHECK(bits <= 8.0 / d + 1e-9);  // never worse than the bitmap
  }
}

TEST_CASE("for device receivers the automatic coding never chooses Rice, and takes the smallest of the others") {
  // At 0.1% of a million positions Rice is the smallest; device_readable takes the smallest of
  // raw, varint and bitmap instead, which a device decoder reads in parallel.
  const std::uint32_t n = 1000000;
  const auto idx = random_positions(n, 1000, 91);
  const std::vector<float> val(idx.size(), 1.0f);
  tensor_message<float> m{0, n, false, {idx.data(), idx.size()}, {val.data(), val.size()}};
  auto coding = [&](bool device) {
    wire::encode_options opt;
    opt.device_readable = device;
    const auto msg = wire::encode(span<const tensor_message<float>>(&m, 1), opt);
    index_coding ic = index_coding::automatic;
    std::uint64_t bytes = 0;
    REQUIRE(wire::for_each_section(span<const std::byte>(msg.data(), msg.size()), [&](const wire::section_header& s) {
      ic = s.indices;
      bytes = s.index_bytes;
    }));
    CHECK(wire::decode<float>(span<const std::byte>(msg.data(), msg.size()))[0].indices == idx);
    return std::make_pair(ic, bytes);
  };
  CHECK(coding(false).first == index_coding::rice);
  const auto device = coding(true);
  CHECK(device.first == index_coding::delta_varint);
  CHECK(device.second == round_trip(n, idx, val, index_coding::delta_varint, value_coding::fp32, false).header.index_bytes);
}

TEST_CASE("max_encoded_bytes bounds every forced coding, even adversarial index sets") {
  const std::uint32_t n = 1u << 20;
  // Clustered positions: one huge gap, the worst case for a Rice parameter fitted to the density.
  std::vector<std::uint32_t> clustered;
  for (std::uint32_t i = 0; i < 500; ++i) clustered.push_back(i);
  clustered.push_back(n - 1);
  const std::vector<float> val(clustered.size(), 0.5f);
  for (index_coding ic : {index_coding::raw_u32, index_coding::delta_varint, index_coding::rice,
                          index_coding::bitmap, index_coding::automatic}) {
    CAPTURE(wire::to_string(ic));
    round_trip(n, clustered, val, ic, value_coding::fp16, true);  // REQUIREs encode success
  }
}

TEST_CASE("dense sections and multi-section messages round trip; decode_accumulate sums") {
  const std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<std::uint32_t> i1 = {0, 3}, i2 = {3};
  const std::vector<float> v1 = {10.0f, 20.0f}, v2 = {0.5f};
  const std::vector<tensor_message<float>> msgs = {
      {0, 4, true, {}, {w.data(), 4}},
      {1, 4, false, {i1.data(), 2}, {v1.data(), 2}},
      {2, 4, false, {i2.data(), 1}, {v2.data(), 1}},
  };
  wire::encode_options opt;
  opt.dense_values = value_coding::bf16;
  const auto bytes = wire::encode(span<const tensor_message<float>>(msgs.data(), msgs.size()), opt);
  std::vector<double> acc0(4, 1.0), acc1(4, 0.0), acc2(4, 1.0);
  const std::vector<span<double>> dest = {span<double>(acc0.data(), 4), span<double>(acc1.data(), 4),
                                          span<double>(acc2.data(), 4)};
  const auto h = wire::decode_accumulate<double>(span<const std::byte>(bytes.data(), bytes.size()),
                                                 span<const span<double>>(dest.data(), dest.size()));
  REQUIRE(h);
  CHECK(h->section_count == 3);
  CHECK(acc0 == std::vector<double>{2.0, 3.0, 4.0, 5.0});
  CHECK(acc1 == std::vector<double>{10.0, 0.0, 0.0, 20.0});
  CHECK(acc2 == std::vector<double>{1.0, 1.0, 1.0, 1.5});
}

TEST_CASE("a gradient message carries each tensor at most once") {
  // Tensor 1 twice, written byte by byte (the encoder refuses to): refused by validate and by
  // decode_accumulate, which leaves the accumulators unchanged.
  const auto bytes = gradcomp_test::forge(
      wire::message_kind::gradients,
      {gradcomp_test::raw_section(wire::section_role::gradient, 1, 4, {0, 3}, {10.0, 20.0}),
       gradcomp_test::raw_section(wire::section_role::gradient, 1, 4, {3}, {0.5})});
  const span<const std::byte> msg(bytes.data(), bytes.size());
  CHECK(wire::validate(msg).error() == errc::duplicate_tensor);
  std::vector<double> acc0(4, 1.0), acc1(4, 1.0);
  const std::vector<span<double>> dest = {span<double>(acc0.data(), 4), span<double>(acc1.data(), 4)};
  CHECK(wire::decode_accumulate<double>(msg, span<const span<double>>(dest.data(), dest.size()))
            .error() == errc::duplicate_tensor);
  CHECK(acc1 == std::vector<double>(4, 1.0));
}

TEST_CASE("encoding rejects what the format cannot carry") {
  const std::vector<std::uint32_t> idx = {1, 2};
  std::vector<float> val = {1.0f, 2.0f};
  auto encode_one = [&](std::vector<std::uint32_t> i, std::vector<float> v, std::size_t n,
                        value_coding vc = value_coding::fp32) {
    tensor_message<float> m{0, n, false, {i.data(), i.size()}, {v.data(), v.size()}};
    wire::encode_options opt;
    opt.values = vc;
    std::vector<std::byte> out(4096);
    return wire::encode(span<const tensor_message<float>>(&m, 1), opt,
                        span<std::byte>(out.data(), out.size()))
        .error();
  };
  CHECK(encode_one({2, 1}, val, 10) == errc::indices_not_increasing);
  CHECK(encode_one({1, 1}, val, 10) == errc::indices_not_increasing);
  CHECK(encode_one({1, 10}, val, 10) == errc::index_out_of_range);
  CHECK(encode_one({0, 1, 2}, {1, 2, 3}, 2) == errc::kept_exceeds_numel);
  CHECK(encode_one({1}, val, 10) == errc::size_mismatch);
  CHECK(encode_one(idx, {1.0f, std::nanf("")}, 10) == errc::non_finite_input);
  CHECK(encode_one(idx, {1.0f, INFINITY}, 10) == errc::non_finite_input);
  CHECK(encode_one(idx, {1.0f, 65520.0f}, 10, value_coding::fp16) == errc::value_out_of_range);
  CHECK(encode_one(idx, {1.0f, 65519.0f}, 10, value_coding::fp16) == errc::ok);
  CHECK(encode_one(idx, {1.0f, 3.4e38f}, 10, value_coding::bf16) == errc::value_out_of_range);

  tensor_message<float> m{0, 10, false, {idx.data(), 2}, {val.data(), 2}};
  const span<const tensor_message<float>> one(&m, 1);
  const auto need = wire::encoded_bytes(one);
  REQUIRE(need);
  std::vector<std::byte> small(*need - 1);
  CHECK(wire::encode(one, {}, span<std::byte>(small.data(), small.size())).error() ==
        errc::output_too_small);
  wire::encode_options dense_idx;
  dense_idx.indices = index_coding::dense;
  std::vector<std::byte> out(4096);
  CHECK(wire::encode(one, dense_idx, span<std::byte>(out.data(), out.size())).error() ==
        errc::invalid_argument);
}

TEST_CASE("the same input gives the same bytes") {
  const auto idx = random_positions(100000, 100, 5);
  const auto val = gradcomp_test::random_vector<float>(100, gradcomp_test::dist::gaussian, 5);
  tensor_message<float> m{3, 100000, false, {idx.data(), idx.size()}, {val.data(), val.size()}};
  wire::encode_options opt;
  opt.checksum = true;
  const auto a = wire::encode(span<const tensor_message<float>>(&m, 1), opt);
  const auto b = wire::encode(span<const tensor_message<float>>(&m, 1), opt);
  CHECK(a == b);
}
