// isgq_compressor and the wire coding `isgq`: a receiver rebuilds X^^T Delta^ bitwise as the
// factors' own rebuild and a product in batch order give it; the dithered method's sum over
// workers is unbiased (Monte Carlo through the wire); exact zeros stay exact; the minimum-MSE
// method's error never increases and is what the receiver sees; layouts, determinism, shapes and
// bad input; the decoder's rejection rules for forged payloads.
#include <gradcomp/aggregator.hpp>
#include <gradcomp/isgq/factors.hpp>
#include <gradcomp/isgq/compressor.hpp>
#include <gradcomp/wire/accumulate.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "isgq/factors.hpp"
#include "wire/one_section.hpp"

using namespace gradcomp;
using gradcomp_test::encode_one;
using gradcomp_test::factor;
using gradcomp_test::widened;

namespace {

// The receiver's values of one message (decode_accumulate into zeros).
std::vector<float> received(const tensor_message<float>& m) {
  const auto bytes = encode_one(m, wire::encode_options{}).value();
  std::vector<float> acc(m.numel, 0.0f);
  std::vector<span<float>> dest(m.tensor + 1);  // the other tensors' accumulators empty
  dest[m.tensor] = span<float>(acc.data(), acc.size());
  REQUIRE(wire::decode_accumulate<float>(span<const std::byte>(bytes.data(), bytes.size()),
                                         span<const span<float>>(dest.data(), dest.size())));
  return acc;
}

// value (i, o) = sum_b x[b][i] d[b][o] in binary64, b ascending, in the layout's order.
std::vector<double> product(const std::vector<double>& x, const std::vector<double>& d, std::size_t batch,
                            std::size_t n_in, std::size_t n_out, isgq_layout layout) {
  std::vector<double> g(n_in * n_out, 0.0);
  for (std::size_t i = 0; i < n_in; ++i)
    for (std::size_t o = 0; o < n_out; ++o) {
      double s = 0.0;
      for (std::size_t b = 0; b < batch; ++b) s += x[b * n_in + i] * d[b * n_out + o];
      g[layout == isgq_layout::in_out ? i * n_out + o : o * n_in + i] = s;
    }
  return g;
}

span<const float> view(const std::vector<float>& v) { return span<const float>(v.data(), v.size()); }

}  // namespace

TEST_CASE("ISGQ dithered: the receiver's gradient is the product of the factors' rebuild, bitwise") {
  const std::size_t batch = 6, n_in = 37, n_out = 11;
  const auto x = factor(batch, n_in, 1, true, 5), d = factor(batch, n_out, 2, false);
  for (const isgq_layout layout : {isgq_layout::in_out, isgq_layout::out_in}) {
    for (const std::uint32_t s : {1u, 3u, 127u}) {
      CAPTURE(s);
      isgq_config cfg;
      cfg.levels = s;
      cfg.bucket = 16;
      isgq_compressor<float> c(cfg);
      const std::size_t id = c.add_layer("fc", n_in, n_out, layout, 7);
      const auto m = c.compress(id, view(x), view(d), batch).value();
      CHECK(m.tensor == 7);
      CHECK(m.numel == n_in * n_out);
      CHECK(m.dense);
      CHECK(m.coding == wire::value_coding::isgq);
      const auto b = detail::isgq_block::read(m.payload.data());
      CHECK(b.step == 0);
      CHECK(b.stream == 7);
      CHECK(c.layer(id).steps == 1);
      // The size: the block, a scale per bucket of each factor, bit_width(2s + 1) bits per element.
      const std::size_t w = detail::bit_width32(2 * s + 1);
      CHECK(m.payload.size() == 40 + 4 * ((batch * n_in + 15) / 16 + (batch * n_out + 15) / 16) +
                                    ((batch * (n_in + n_out)) * w + 7) / 8);
      // The same quantisation, rebuilt by the factor functions, and its product.
      detail::isgq_dithered_factor fx, fd;
      REQUIRE(detail::isgq_dither_quantise(x.data(), x.size(), 16, s, b.key, 0, 7, 0, fx));
      REQUIRE(detail::isgq_dither_quantise(d.data(), d.size(), 16, s, b.key, 0, 7, 1, fd));
      const auto expected = product(detail::isgq_dither_rebuild(fx, 16, s, b.key, 0, 7, 0),
                                    detail::isgq_dither_rebuild(fd, 16, s, b.key, 0, 7, 1), batch, n_in, n_out, layout);
      const auto got = received(m);
      for (std::size_t j = 0; j < got.size(); ++j) REQUIRE(gradcomp_test::same_bits(got[j], static_cast<float>(expected[j])));
      // Input 5 is 0 in every example: its gradient is exactly 0 (not a dithered estimate of 0).
      for (std::size_t o = 0; o < n_out; ++o)
        CHECK(gradcomp_test::same_bits(got[layout == isgq_layout::in_out ? 5 * n_out + o : o * n_in + 5], 0.0f));
    }
  }
}

TEST_CASE("ISGQ dithered: the sum over workers received is an unbiased estimate of the sum of X^T Delta") {
  const std::size_t batch = 3, n_in = 5, n_out = 4, workers = 2, runs = 6000;
  std::vector<std::vector<float>> xs, ds;
  std::vector<double> exact(n_in * n_out, 0.0);
  std::vector<isgq_compressor<float>> c;
  for (std::size_t r = 0; r < workers; ++r) {
    xs.push_back(factor(batch, n_in, 10 + r, true));
    ds.push_back(factor(batch, n_out, 20 + r, false));
    const auto p = product(widened(xs[r]), widened(ds[r]), batch, n_in, n_out, isgq_layout::out_in);
    for (std::size_t j = 0; j < p.size(); ++j) exact[j] += p[j];
    isgq_config cfg;
    cfg.rank = r;
    cfg.bucket = 4;
    c.emplace_back(cfg);
    c.back().add_layer("fc", n_in, n_out);
  }
  std::vector<double> sum(exact.size(), 0.0), squares(exact.size(), 0.0);
  for (std::size_t k = 0; k < runs; ++k) {
    std::vector<double> step(exact.size(), 0.0);
    for (std::size_t r = 0; r < workers; ++r) {
      const auto g = received(c[r].compress(0, view(xs[r]), view(ds[r]), batch).value());
      for (std::size_t j = 0; j < g.size(); ++j) step[j] += g[j];
    }
    for (std::size_t j = 0; j < step.size(); ++j) {
      sum[j] += step[j];
      squares[j] += step[j] * step[j];
    }
  }
  std::size_t spread = 0;
  for (std::size_t j = 0; j < exact.size(); ++j) {
    CAPTURE(j);
    const double mean = sum[j] / runs, var = squares[j] / runs - mean * mean;
    const double se = std::sqrt(std::max(var, 0.0) / runs);
    // float sums of a few terms: their rounding is far below the standard error
    CHECK(std::fabs(mean - exact[j]) <= 5.0 * se + 1e-6);
    if (var > 0.0) ++spread;
  }
  CHECK(spread > exact.size() / 2);  // an estimate, not the exact product sent by mistake
}

TEST_CASE("ISGQ minimum MSE: the error never increases over refits, and the receiver gets the fitted product") {
  const std::size_t batch = 8, n_in = 30, n_out = 9;
  const auto x = factor(batch, n_in, 3, true), d = factor(batch, n_out, 4, false);
  const auto exact = product(widened(x), widened(d), batch, n_in, n_out, isgq_layout::in_out);
  for (const std::uint32_t levels : {2u, 4u, 8u}) {
    CAPTURE(levels);
    isgq_config cfg;
    cfg.method = isgq_method::min_mse;
    cfg.levels = levels;
    cfg.iterations = 3;
    isgq_compressor<float> c(cfg);
    c.add_layer("fc", n_in, n_out, isgq_layout::in_out);
    CHECK(c.errors(0).empty());
    const auto m = c.compress(0, view(x), view(d), batch).value();
    const auto e = c.errors(0);
    REQUIRE(e.size() == 1 + 2 * 3);
    for (std::size_t k = 1; k < e.size(); ++k) CHECK(e[k] <= e[k - 1] * (1 + 1e-12) + 1e-12);
    CHECK(e[e.size() - 1] < e[0]);
    const auto b = detail::isgq_block::read(m.payload.data());
    CHECK(b.variant == detail::isgq_variant::levels);
    CHECK(b.key == 0);
    CHECK(m.payload.size() == 40 + 8 * levels + (batch * (n_in + n_out) * detail::bit_width32(levels) + 7) / 8);
    // The receiver's squared error is the last refit's, up to the levels' rounding to binary32.
    const auto got = received(m);
    double err = 0.0;
    for (std::size_t j = 0; j < got.size(); ++j) err += (got[j] - exact[j]) * (got[j] - exact[j]);
    CHECK(err == doctest::Approx(e[e.size() - 1]).epsilon(1e-4));
    // Exact zeros of X (ReLU) rebuild as zeros: an input 0 in every example gives a zero row.
  }
}

TEST_CASE("ISGQ: an input that is 0 in every example gets an exactly zero gradient with either method") {
  const std::size_t batch = 4, n_in = 9, n_out = 3;
  const auto x = factor(batch, n_in, 5, false, 2), d = factor(batch, n_out, 6, false);
  for (const isgq_method method : {isgq_method::dithered, isgq_method::min_mse}) {
    isgq_config cfg;
    cfg.method = method;
    cfg.levels = 2;
    isgq_compressor<float> c(cfg);
    c.add_layer("fc", n_in, n_out, isgq_layout::in_out);
    const auto got = received(c.compress(0, view(x), view(d), batch).value());
    for (std::size_t o = 0; o < n_out; ++o) CHECK(gradcomp_test::same_bits(got[2 * n_out + o], 0.0f));
    std::size_t nonzero = 0;
    for (const float v : got) nonzero += v != 0.0f;
    CHECK(nonzero >= (n_in - 1) * n_out - 2);
  }
}

TEST_CASE("ISGQ: the same seed gives the same bytes; another step or rank other dithers; layouts are transposes") {
  const std::size_t batch = 5, n_in = 12, n_out = 7;
  const auto x = factor(batch, n_in, 7, true), d = factor(batch, n_out, 8, false);
  auto bytes_of = [&](std::uint64_t rank, std::size_t steps, isgq_layout layout) {
    isgq_config cfg;
    cfg.rank = rank;
    isgq_compressor<float> c(cfg);
    c.add_layer("fc", n_in, n_out, layout);
    tensor_message<float> m;
    for (std::size_t k = 0; k < steps; ++k) m = c.compress(0, view(x), view(d), batch).value();
    return std::vector<std::byte>(m.payload.begin(), m.payload.end());
  };
  CHECK(bytes_of(0, 1, isgq_layout::out_in) == bytes_of(0, 1, isgq_layout::out_in));
  CHECK(bytes_of(0, 1, isgq_layout::out_in) != bytes_of(1, 1, isgq_layout::out_in));
  CHECK(bytes_of(0, 1, isgq_layout::out_in) != bytes_of(0, 2, isgq_layout::out_in));
  isgq_config cfg;
  isgq_compressor<float> a(cfg), b(cfg);
  a.add_layer("fc", n_in, n_out, isgq_layout::in_out);
  b.add_layer("fc", n_in, n_out, isgq_layout::out_in);
  const auto ga = received(a.compress(0, view(x), view(d), batch).value());
  const auto gb = received(b.compress(0, view(x), view(d), batch).value());
  for (std::size_t i = 0; i < n_in; ++i)
    for (std::size_t o = 0; o < n_out; ++o) REQUIRE(gradcomp_test::same_bits(ga[i * n_out + o], gb[o * n_in + i]));
  // wire::decode gives the same values as decode_accumulate.
  const auto m = a.compress(0, view(x), view(d), batch).value();
  const auto msg = encode_one(m, wire::encode_options{}).value();
  const auto sections = wire::decode<float>(span<const std::byte>(msg.data(), msg.size()));
  REQUIRE(sections.size() == 1);
  CHECK(sections[0].values == received(m));
}

TEST_CASE("ISGQ: bad configurations, registrations and inputs are refused and change nothing") {
  auto refused = [](isgq_config cfg) {
    try {
      isgq_compressor<float> c(cfg);
    } catch (const error& e) {
      return e.code() == errc::invalid_argument;
    }
    return false;
  };
  isgq_config cfg;
  cfg.levels = 0;
  CHECK(refused(cfg));
  cfg.levels = 128;
  CHECK(refused(cfg));
  cfg.levels = 1;
  cfg.bucket = 0;
  CHECK(refused(cfg));
  cfg = isgq_config{};
  cfg.method = isgq_method::min_mse;
  cfg.levels = 3;
  CHECK(refused(cfg));
  cfg.levels = 16;
  CHECK(refused(cfg));

  isgq_compressor<double> c(isgq_config{});
  CHECK_THROWS_AS(c.add_layer("a", 0, 3), error);
  CHECK_THROWS_AS(c.add_layer("a", 65536, 65536), error);
  c.add_layer("a", 3, 2);
  CHECK_THROWS_AS(c.add_layer("a", 3, 2), error);
  CHECK_THROWS_AS(c.add_layer("b", 3, 2, isgq_layout::out_in, 0), error);
  CHECK(c.layers() == 1);

  std::vector<double> x(2 * 3, 0.5), d(2 * 2, -0.25);
  const span<const double> xs(x.data(), x.size()), ds(d.data(), d.size());
  CHECK(c.compress(1, xs, ds, 2).error() == errc::unknown_tensor);
  CHECK(c.compress(0, xs, ds, 0).error() == errc::invalid_argument);
  CHECK(c.compress(0, xs, ds, 3).error() == errc::size_mismatch);
  CHECK(c.compress(0, xs.subspan(0, 5), ds, 2).error() == errc::size_mismatch);
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto xb = x;
    xb[4] = bad;
    CHECK(c.compress(0, span<const double>(xb.data(), xb.size()), ds, 2).error() == errc::non_finite_input);
    auto db = d;
    db[1] = -bad;
    CHECK(c.compress(0, xs, span<const double>(db.data(), db.size()), 2).error() == errc::non_finite_input);
  }
  // A scale beyond binary32 (double factors): refused as an overflow.
  auto big = x;
  big[0] = 1e300;
  CHECK(c.compress(0, span<const double>(big.data(), big.size()), ds, 2).error() == errc::state_overflow);
  CHECK(c.layer(0).steps == 0);
  CHECK(c.compress(0, xs, ds, 2));
  CHECK(c.layer(0).steps == 1);
}

TEST_CASE("ISGQ on the wire: the encoder checks a producer's payload, the decoder refuses forged ones") {
  const std::size_t batch = 2, n_in = 3, n_out = 2;
  const auto x = factor(batch, n_in, 9, false), d = factor(batch, n_out, 10, false);
  isgq_config cfg;
  cfg.levels = 2;  // codes of 3 bits: 18 bits of codes, 6 padding bits
  cfg.bucket = 4;
  isgq_compressor<float> c(cfg);
  c.add_layer("fc", n_in, n_out);
  const auto m = c.compress(0, view(x), view(d), batch).value();
  const std::vector<std::byte> good(m.payload.begin(), m.payload.end());
  const auto encoded = encode_one(m, wire::encode_options{}).value();
  const std::size_t at = wire::message_header_bytes + wire::section_header_bytes;  // the payload in the message
  REQUIRE(encoded.size() == at + good.size());

  // A payload changed in one place: the encoder and the decoder refuse it alike.
  auto refused = [&](std::vector<std::byte> p, errc expected) {
    tensor_message<float> bad = m;
    bad.payload = span<const std::byte>(p.data(), p.size());
    CHECK(encode_one(bad, wire::encode_options{}).error() == expected);
    auto msg = encoded;
    msg.resize(at);
    msg.insert(msg.end(), p.begin(), p.end());
    detail::store_le<std::uint64_t>(msg.data() + 16, msg.size());
    detail::store_le<std::uint64_t>(msg.data() + wire::message_header_bytes, msg.size() - wire::message_header_bytes);
    CHECK(wire::validate<float>(span<const std::byte>(msg.data(), msg.size())).error() == expected);
  };
  auto with = [&](std::size_t offset, std::uint8_t byte) {
    auto p = good;
    p[offset] = static_cast<std::byte>(byte);
    return p;
  };
  const std::size_t codes = 40 + 4 * (2 + 1);  // scales: ceil(6 / 4) for X, ceil(4 / 4) for Delta
  refused(with(0, 0), errc::malformed_payload);            // batch 0
  refused(with(4, 4), errc::malformed_payload);            // n_in * n_out != numel
  refused(with(12, 2), errc::malformed_payload);           // layout
  refused(with(13, 2), errc::malformed_payload);           // variant
  refused(with(14, 0), errc::malformed_payload);           // s = 0
  refused(with(14, 128), errc::malformed_payload);         // s = 128
  refused(with(16, 0), errc::malformed_payload);           // bucket 0 (and the length then wrong)
  refused(with(43, 0x80), errc::malformed_payload);        // a negative scale
  refused(with(43, 0x7f), errc::non_finite_input);         // an infinite or NaN scale (exponent all ones)
  {
    auto p = good;
    p[codes] = static_cast<std::byte>(0x07);  // first code 7 > 2s + 1 = 5
    refused(p, errc::malformed_payload);
    p = good;
    p[codes + 2] |= static_cast<std::byte>(0x80);  // a padding bit
    refused(p, errc::malformed_payload);
    p = good;
    p.push_back(std::byte{0});  // a byte too many
    refused(p, errc::malformed_payload);
    p = good;
    for (std::size_t k = 40; k < 44; ++k) p[k] = std::byte{0};  // a zero scale under non-zero codes
    bool any = false;
    for (std::size_t i = 0; i < 4; ++i) any = any || detail::load_bits(p.data() + codes, 3 * i, 3) != 0;
    REQUIRE(any);
    refused(p, errc::malformed_payload);
  }
  // Values and a payload together, a payload in a coding that takes none, isgq without a payload.
  tensor_message<float> bad = m;
  const std::vector<float> values(n_in * n_out, 1.0f);
  bad.values = span<const float>(values.data(), values.size());
  CHECK(encode_one(bad, wire::encode_options{}).error() == errc::invalid_argument);
  bad = m;
  bad.coding = wire::value_coding::fp32;
  CHECK(encode_one(bad, wire::encode_options{}).error() == errc::invalid_argument);
  bad = gradcomp_test::dense(values);
  bad.coding = wire::value_coding::isgq;
  const span<const tensor_message<float>> one(&bad, 1);
  CHECK(wire::max_encoded_bytes(one, wire::encode_options{}).error() == errc::invalid_argument);
  CHECK(wire::encoded_bytes(one, wire::encode_options{}).error() == errc::invalid_argument);
  std::vector<std::byte> room(4096);
  CHECK(wire::encode(one, wire::encode_options{}, span<std::byte>(room.data(), room.size())).error() ==
        errc::invalid_argument);
  // A sparse section in isgq: the decoder refuses it.
  auto sparse = encoded;
  sparse[wire::message_header_bytes + 20] = static_cast<std::byte>(wire::index_coding::raw_u32);
  CHECK(wire::validate(span<const std::byte>(sparse.data(), sparse.size())).error() == errc::malformed_payload);
}

TEST_CASE("ISGQ: an aggregator adds a message directly or encoded alike, and refuses a damaged payload") {
  const std::size_t batch = 4, n_in = 6, n_out = 5;
  const auto x = factor(batch, n_in, 11, true), d = factor(batch, n_out, 12, false);
  isgq_compressor<float> c(isgq_config{});
  c.add_layer("fc", n_in, n_out);
  const auto m = c.compress(0, view(x), view(d), batch).value();
  receiver_layout layout;
  receiver_tensor t;
  t.info.name = "fc";
  t.info.shape = {n_out, n_in};
  t.info.numel = n_in * n_out;
  t.dense = true;
  layout.tensors.push_back(t);
  aggregator<float> direct(layout), wired(layout);
  direct.begin();
  wired.begin();
  REQUIRE(direct.add(m));
  const auto bytes = encode_one(m, wire::encode_options{}).value();
  REQUIRE(wired.add(span<const std::byte>(bytes.data(), bytes.size())));
  REQUIRE(direct.finish(1));
  REQUIRE(wired.finish(1));
  const auto a = direct.update(0), b = wired.update(0);
  const auto expected = received(m);
  for (std::size_t j = 0; j < expected.size(); ++j) {
    REQUIRE(gradcomp_test::same_bits(a[j], expected[j]));
    REQUIRE(gradcomp_test::same_bits(b[j], expected[j]));
  }
  direct.begin();
  std::vector<std::byte> damaged(m.payload.begin(), m.payload.end());
  damaged[13] = std::byte{7};  // no such variant
  tensor_message<float> bad = m;
  bad.payload = span<const std::byte>(damaged.data(), damaged.size());
  CHECK(direct.add(bad).error() == errc::malformed_payload);
  bad = m;
  bad.numel += 1;
  CHECK(direct.add(bad).error() == errc::layout_mismatch);
  bad = m;
  bad.coding = wire::value_coding::fp32;
  CHECK(direct.add(bad).error() == errc::invalid_argument);
  CHECK(direct.finish(1).error() == errc::invalid_argument);  // nothing was added
}

TEST_CASE("ISGQ on the wire: a product below float's range decodes to a zero of its sign, and adds as one") {
  // One weight, X^ = [1e-30] and Delta^ = [-1e-30] (level form): the value -1e-60 in binary64.
  const detail::isgq_block b{1, 1, 1, 0, detail::isgq_variant::levels, 2, 0, 0, 0, 0};
  const float px[2] = {1e-30f, 1.0f}, pd[2] = {-1e-30f, 1.0f};
  const std::uint8_t cx[1] = {0}, cd[1] = {0};
  std::vector<std::byte> payload(b.payload_bytes());
  detail::isgq_write_payload(b, px, pd, cx, cd, payload.data());
  tensor_message<float> m;
  m.numel = 1;
  m.dense = true;
  m.coding = wire::value_coding::isgq;
  m.payload = span<const std::byte>(payload.data(), payload.size());
  const auto msg = encode_one(m, wire::encode_options{}).value();
  const span<const std::byte> view(msg.data(), msg.size());
  const auto as_float = wire::decode<float>(view);
  REQUIRE(as_float[0].values.size() == 1);
  CHECK(as_float[0].values[0] == 0.0f);
  CHECK(std::signbit(as_float[0].values[0]));
  CHECK(wire::decode<double>(view)[0].values[0] == static_cast<double>(1e-30f) * static_cast<double>(-1e-30f));
  // Added into an accumulator of +0: +0 + -0 is +0.
  CHECK(gradcomp_test::same_bits(received(m)[0], 0.0f));
}

TEST_CASE("ISGQ on the wire: a dithered product is the spec's bits, whatever the compiler may contract") {
  // A one-weight dithered block whose product, each term rounded and then summed in binary64 as
  // docs/wire_format.md says, is 0xbff5c16ad34cb110; a build that fuses the batch sum into a
  // multiply-add (GCC with -mfma, -march=native, or on aarch64, without the library's guard)
  // decoded it as 0xbff5c16ad34cb111. The contraction build of CI runs this test.
  const char* hex =
      "4743574601000000000000000100000069000000000000005100000000000000000000000100000001000000"
      "001500000000000000000000020000000100000001000000000001000400000000000000080000000000000000"
      "000000000000000000803f0000803f7d";
  std::vector<std::byte> msg;
  for (const char* p = hex; p[0] != '\0' && p[1] != '\0'; p += 2)
    msg.push_back(static_cast<std::byte>(std::stoi(std::string(p, 2), nullptr, 16)));
  REQUIRE(msg.size() == 105);
  const span<const std::byte> view(msg.data(), msg.size());
  const auto as_double = wire::decode<double>(view);
  REQUIRE(as_double.size() == 1);
  REQUIRE(as_double[0].values.size() == 1);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &as_double[0].values[0], sizeof bits);
  CHECK(bits == 0xbff5c16ad34cb110ull);
}
