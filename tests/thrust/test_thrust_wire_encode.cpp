// wire::device_encoder: messages encoded in the Thrust backend's memory are byte for byte those of
// the host encoder (wire::encode) for the same sections, checksum included, and a bad index or
// value gives the host encoder's error; the encode issues its work without the host waiting.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/backend_memory.hpp>
#include <gradcomp/thrust/wire_encode.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include "backend/conformance.hpp"
#include "support/sanitized.hpp"
#include "thrust/systems.hpp"

namespace {

using gradcomp_test::primary_backend;
using space = gradcomp::memory_space_t<primary_backend>;

// A section on the host: what the host encoder is given, and what is uploaded for the device.
template <class T>
struct host_section {
  std::uint32_t tensor = 0;
  std::uint32_t numel = 0;
  bool dense = false;
  std::vector<std::uint32_t> indices;  // room for `capacity` entries; the first `kept` are sent
  std::vector<T> values;
  std::uint64_t kept = 0;
};

// Sparse sections with kept below their capacity (the rest holds stale entries the encoder must
// not read as part of the message), an empty one, a numel that is not a multiple of 8, and a dense
// one.
template <class T>
std::vector<host_section<T>> model(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<host_section<T>> out;
  const std::uint32_t sizes[] = {10007, 64, 3, 250000, 777};
  for (std::uint32_t t = 0; t < 5; ++t) {
    host_section<T> s;
    s.tensor = 3 * t + 1;
    s.numel = sizes[t];
    s.dense = t == 4;
    if (s.dense) {
      for (std::uint32_t i = 0; i < s.numel; ++i) s.values.push_back(static_cast<T>(normal(rng)));
      s.kept = s.numel;
    } else {
      const std::uint32_t every = t == 2 ? 1 : 1 + static_cast<std::uint32_t>(rng() % 40);
      for (std::uint32_t i = static_cast<std::uint32_t>(rng() % every); i < s.numel;
           i += 1 + static_cast<std::uint32_t>(rng() % every)) {
        s.indices.push_back(i);
        s.values.push_back(static_cast<T>(normal(rng) * 100.0));
      }
      s.kept = t == 1 ? 0 : s.indices.size() - s.indices.size() / 5;
      s.indices.push_back(0);  // stale entries past kept
      s.values.push_back(std::numeric_limits<T>::quiet_NaN());
    }
    out.push_back(std::move(s));
  }
  return out;
}

template <class T>
struct device_model {
  std::vector<gradcomp::backend_buffer<std::uint32_t, primary_backend>> indices;
  std::vector<gradcomp::backend_buffer<T, primary_backend>> values;
  gradcomp::backend_buffer<std::uint64_t, primary_backend> kept;
  std::vector<gradcomp::wire::device_section<T, space>> sections;

  // `coding`: every section's own value coding (unspecified: the encoder's options).
  explicit device_model(const std::vector<host_section<T>>& host,
                        gradcomp::wire::value_coding coding = gradcomp::wire::value_coding::unspecified) {
    const primary_backend b{};
    kept = gradcomp::allocate_buffer<std::uint64_t>(b, host.size());
    std::vector<std::uint64_t> counts;
    for (const auto& s : host) {
      counts.push_back(s.kept);
      indices.push_back(gradcomp::allocate_buffer<std::uint32_t>(b, s.indices.size()));
      values.push_back(gradcomp::allocate_buffer<T>(b, s.values.size()));
      REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::uint32_t>(s.indices.data(), s.indices.size()),
                                        indices.back().view()));
      REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const T>(s.values.data(), s.values.size()),
                                        values.back().view()));
    }
    REQUIRE(
        gradcomp::copy_to_backend(b, gradcomp::span<const std::uint64_t>(counts.data(), counts.size()), kept.view()));
    for (std::size_t i = 0; i < host.size(); ++i) {
      gradcomp::wire::device_section<T, space> d;
      d.tensor = host[i].tensor;
      d.numel = host[i].numel;
      d.dense = host[i].dense;
      d.indices = gradcomp::readonly(indices[i].view());
      d.values = gradcomp::readonly(values[i].view());
      d.kept = host[i].dense ? nullptr : kept.view().data() + i;
      d.coding = coding;
      sections.push_back(d);
    }
  }
};

// The host encoder's message (or error) for the first `kept` entries of each section.
template <class T>
gradcomp::result<std::vector<std::byte>> host_encode(
    const std::vector<host_section<T>>& host, const gradcomp::wire::encode_options& opt,
    gradcomp::wire::value_coding coding = gradcomp::wire::value_coding::unspecified) {
  std::vector<gradcomp::tensor_message<T>> msgs;
  for (const auto& s : host) {
    gradcomp::tensor_message<T> m;
    m.tensor = s.tensor;
    m.numel = s.numel;
    m.dense = s.dense;
    if (!s.dense) m.indices = gradcomp::span<const std::uint32_t>(s.indices.data(), s.kept);
    m.values = gradcomp::span<const T>(s.values.data(), s.dense ? s.values.size() : s.kept);
    m.coding = coding;
    msgs.push_back(m);
  }
  std::vector<std::byte> out(1 << 24);
  const auto n = gradcomp::wire::encode(gradcomp::span<const gradcomp::tensor_message<T>>(msgs.data(), msgs.size()),
                                        opt, gradcomp::span<std::byte>(out.data(), out.size()));
  if (!n) return gradcomp::fail(n.error());
  out.resize(*n);
  return out;
}

// The device encoder's message (or error), checking that its encode waited for nothing.
template <class T>
gradcomp::result<std::vector<std::byte>> device_encode(
    const std::vector<host_section<T>>& host, const gradcomp::wire::encode_options& opt,
    gradcomp::wire::value_coding coding = gradcomp::wire::value_coding::unspecified) {
  using gradcomp::detail::thrust_impl::host_transfer_count;
  const primary_backend b{};
  device_model<T> d(host, coding);
  gradcomp::wire::device_encoder<T, primary_backend> enc(
      b, gradcomp::span<const gradcomp::wire::device_section<T, space>>(d.sections.data(), d.sections.size()), opt);
  auto out = gradcomp::allocate_buffer<std::byte>(b, enc.max_message_bytes());
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
  const auto before = host_transfer_count.load();
  REQUIRE(enc.encode(b, out.view(), outcome.view()));
  CHECK(host_transfer_count.load() == before);
  std::uint64_t result[2] = {};
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(result, 2)));
  gradcomp::synchronize(b);
  if (result[1] != 0) return gradcomp::fail(static_cast<gradcomp::errc>(result[1]));
  REQUIRE(result[0] <= enc.max_message_bytes());
  std::vector<std::byte> all(out.size());
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(out.view()), gradcomp::span<std::byte>(all.data(), all.size())));
  gradcomp::synchronize(b);
  all.resize(result[0]);
  return all;
}

template <class T>
void check_same(const std::vector<host_section<T>>& host, const gradcomp::wire::encode_options& opt) {
  const auto expected = host_encode(host, opt);
  const auto got = device_encode(host, opt);
  REQUIRE(expected.has_value() == got.has_value());
  if (!expected) {
    CHECK(got.error() == expected.error());
    return;
  }
  CHECK(*got == *expected);
  CHECK(gradcomp::wire::validate(gradcomp::span<const std::byte>(got->data(), got->size())));
}

std::vector<gradcomp::wire::encode_options> every_option() {
  std::vector<gradcomp::wire::encode_options> out;
  for (const auto indices : {gradcomp::wire::index_coding::raw_u32, gradcomp::wire::index_coding::bitmap,
                             gradcomp::wire::index_coding::delta_varint})
    for (const auto values : {gradcomp::wire::value_coding::fp32, gradcomp::wire::value_coding::fp64})
      for (const bool checksum : {false, true}) {
        gradcomp::wire::encode_options o;
        o.indices = indices;
        o.values = o.dense_values = values;
        o.checksum = checksum;
        out.push_back(o);
      }
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("device_encoder: the host encoder's bytes, checksum included", T, float, double) {
  for (const auto& opt : every_option()) {
    CAPTURE(static_cast<int>(opt.indices));
    CAPTURE(static_cast<int>(opt.values));
    CAPTURE(opt.checksum);
    check_same(model<T>(7), opt);
  }
  // A message of no sections, and one whose body is exactly a whole number of checksum chunks
  // away from a chunk boundary is covered by the sizes above; a message of one empty section:
  gradcomp::wire::encode_options opt;
  opt.indices = gradcomp::wire::index_coding::bitmap;
  opt.checksum = true;
  check_same(std::vector<host_section<T>>{}, opt);
  auto one = model<T>(3);
  one.resize(2);
  one[0].kept = 0;
  check_same(one, opt);
}

TEST_CASE("device_encoder: a bad index or value gives the host encoder's error, the first section first") {
  gradcomp::wire::encode_options opt;
  opt.indices = gradcomp::wire::index_coding::raw_u32;
  opt.checksum = true;
  const auto base = model<double>(11);
  auto with = [&](auto change) {
    auto m = base;
    change(m);
    return m;
  };
  const std::vector<std::vector<host_section<double>>> cases = {
      with([](auto& m) { m[3].indices[5] = m[3].numel; }),                       // index_out_of_range
      with([](auto& m) { m[3].indices[9] = m[3].indices[8]; }),                  // indices_not_increasing
      with([](auto& m) { m[0].values[2] = std::numeric_limits<double>::infinity(); }),  // non_finite_input
      with([](auto& m) { m[4].values[100] = std::numeric_limits<double>::quiet_NaN(); }),  // in a dense section
      with([](auto& m) { m[0].values[1] = 1e300; }),                            // value_out_of_range in fp32
      with([](auto& m) {  // a value error before an index error of the same section: the index error
        m[3].values[2] = std::numeric_limits<double>::quiet_NaN();
        m[3].indices[40] = 0;
      }),
      with([](auto& m) {  // an index error in a later section after a value error: the value error
        m[0].values[3] = std::numeric_limits<double>::quiet_NaN();
        m[3].indices[4] = m[3].numel + 10;
      }),
      with([](auto& m) { m[0].kept = m[0].numel + 1; }),  // kept above numel (and the views)
  };
  for (const auto coding : {gradcomp::wire::index_coding::raw_u32, gradcomp::wire::index_coding::delta_varint}) {
    opt.indices = coding;
    for (std::size_t c = 0; c < cases.size(); ++c) {
      CAPTURE(c);
      CAPTURE(static_cast<int>(coding));
      const auto got = device_encode(cases[c], opt);
      REQUIRE(!got);
      if (c + 1 == cases.size()) {  // the host encoder is given at most its views' entries
        CHECK(got.error() == gradcomp::errc::kept_exceeds_numel);
        continue;
      }
      const auto expected = host_encode(cases[c], opt);
      REQUIRE(!expected);
      CHECK(got.error() == expected.error());
    }
  }
}

TEST_CASE("device_encoder: options and sections it cannot encode are refused when it is set up") {
  const primary_backend b{};
  device_model<float> d(model<float>(5));
  const gradcomp::span<const gradcomp::wire::device_section<float, space>> sections(d.sections.data(),
                                                                                    d.sections.size());
  auto refused = [&](const gradcomp::wire::encode_options& opt) {
    try {
      gradcomp::wire::device_encoder<float, primary_backend> enc(b, sections, opt);
    } catch (const gradcomp::error& e) {
      return e.code();
    }
    return gradcomp::errc::ok;
  };
  gradcomp::wire::encode_options opt;  // automatic index coding: the host encoder's choice
  CHECK(refused(opt) == gradcomp::errc::invalid_argument);
  opt.indices = gradcomp::wire::index_coding::raw_u32;
  CHECK(refused(opt) == gradcomp::errc::ok);
  opt.values = gradcomp::wire::value_coding::fp16;
  CHECK(refused(opt) == gradcomp::errc::invalid_argument);
  opt.values = gradcomp::wire::value_coding::fp32;
  auto twice = d.sections;
  twice[2].tensor = twice[0].tensor;
  try {
    gradcomp::wire::device_encoder<float, primary_backend> enc(
        b, gradcomp::span<const gradcomp::wire::device_section<float, space>>(twice.data(), twice.size()), opt);
    FAIL("a tensor twice was accepted");
  } catch (const gradcomp::error& e) {
    CHECK(e.code() == gradcomp::errc::duplicate_tensor);
  }
  gradcomp::wire::device_encoder<float, primary_backend> enc(b, sections, opt);
  auto small = gradcomp::allocate_buffer<std::byte>(b, enc.max_message_bytes() - 1);
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
  CHECK(enc.encode(b, small.view(), outcome.view()).error() == gradcomp::errc::output_too_small);
}

TEST_CASE("device_encoder: a DGC step's message encoded where the step ran, the compressor's own bytes") {
  using gradcomp::detail::thrust_impl::host_transfer_count;
  const primary_backend b{};
  const auto configs = gradcomp_test::conformance_configs();
  for (std::size_t c = 0; c < configs.size(); ++c) {
    const auto& cfg = configs[c];
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.clip_norm);
    gradcomp_test::conformance_worker<float, primary_backend> worker(cfg, b);
    std::size_t coding = 0;
    for (const auto indices : {gradcomp::wire::index_coding::raw_u32, gradcomp::wire::index_coding::bitmap,
                             gradcomp::wire::index_coding::delta_varint}) {
      // Under AddressSanitizer, one coding per configuration, each coding in a third of them.
      if (gradcomp_test::sanitized && coding++ % 3 != c % 3) continue;
      gradcomp::wire::encode_options opt;
      opt.indices = indices;
      opt.checksum = true;
      // Set up once; each step then encodes what the last compress left.
      gradcomp::wire::device_encoder<float, primary_backend> enc(b, worker.compressor.device_message(), opt);
      auto out = gradcomp::allocate_buffer<std::byte>(b, enc.max_message_bytes());
      auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
      for (std::size_t s = 0; s < 4; ++s) {
        CAPTURE(s);
        auto g = gradcomp_test::conformance_gradients<float>(s);
        if (s == 2) g[0][17] = std::numeric_limits<float>::quiet_NaN();  // a refused step
        worker.load(g);
        const auto before = host_transfer_count.load();
        REQUIRE(worker.compressor.compress(worker.views()));
        REQUIRE(enc.encode(b, out.view(), outcome.view()));
        CHECK(host_transfer_count.load() == before);
        std::uint64_t result[2] = {};
        REQUIRE(
            gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(result, 2)));
        gradcomp::synchronize(b);
        std::vector<std::byte> expected(worker.compressor.max_message_bytes(opt));
        const auto n =
            worker.compressor.encode_message(opt, gradcomp::span<std::byte>(expected.data(), expected.size()));
        if (!n) {
          CHECK(s == 2);
          CHECK(result[1] == static_cast<std::uint64_t>(n.error()));
          CHECK(result[0] == 0);
          continue;
        }
        REQUIRE(result[1] == 0);
        REQUIRE(result[0] == *n);
        std::vector<std::byte> got(out.size());
        REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(out.view()),
                                       gradcomp::span<std::byte>(got.data(), got.size())));
        gradcomp::synchronize(b);
        got.resize(*n);
        expected.resize(*n);
        CHECK(got == expected);
      }
    }
  }
}

// Four steps of compressor `c` (on the primary backend) encoded on the device by an encoder set
// up once from `c.device_message()`, each without a host transfer, against `encode_message`; a
// non-finite gradient in step `refused` makes the outcome that step's refusal.
template <class C>
void check_device_messages(C& c, std::size_t refused) {
  using gradcomp::detail::thrust_impl::host_transfer_count;
  const primary_backend b{};
  gradcomp::wire::encode_options opt;
  opt.indices = gradcomp::wire::index_coding::raw_u32;
  opt.checksum = true;
  gradcomp::wire::device_encoder<float, primary_backend> enc(b, c.device_message(), opt);
  auto out = gradcomp::allocate_buffer<std::byte>(b, enc.max_message_bytes());
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
  CHECK(enc.max_message_bytes() == c.max_message_bytes(opt));
  for (std::size_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    auto g = gradcomp_test::conformance_gradients<float>(s);
    if (s == refused) g[1][3] = std::numeric_limits<float>::infinity();
    std::vector<gradcomp::backend_buffer<float, primary_backend>> device;
    std::vector<gradcomp::backend_span<const float, primary_backend>> views;
    for (const auto& x : g) {
      device.push_back(gradcomp::allocate_buffer<float>(b, x.size()));
      REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const float>(x.data(), x.size()), device.back().view()));
      views.push_back(gradcomp::readonly(device.back().view()));
    }
    const auto before = host_transfer_count.load();
    REQUIRE(c.compress(views));
    REQUIRE(enc.encode(b, out.view(), outcome.view()));
    CHECK(host_transfer_count.load() == before);
    std::uint64_t result[2] = {};
    REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(result, 2)));
    gradcomp::synchronize(b);
    std::vector<std::byte> expected(c.max_message_bytes(opt));
    const auto n = c.encode_message(opt, gradcomp::span<std::byte>(expected.data(), expected.size()));
    if (!n) {
      CHECK(s == refused);
      CHECK(result[1] == static_cast<std::uint64_t>(n.error()));
      continue;
    }
    REQUIRE(result[1] == 0);
    REQUIRE(result[0] == *n);
    std::vector<std::byte> got(out.size());
    REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(out.view()), gradcomp::span<std::byte>(got.data(), got.size())));
    gradcomp::synchronize(b);
    got.resize(*n);
    expected.resize(*n);
    CHECK(got == expected);
  }
}

TEST_CASE("device_encoder: an EF-SignSGD step's message encoded where the step ran, the compressor's own bytes") {
  auto c = gradcomp_test::conformance_ef_signsgd(primary_backend{});
  check_device_messages(c, 1);
}

TEST_CASE("device_encoder: ternary sections are the host encoder's bytes and errors") {
  // Sections given their own coding: 0 and one magnitude (zeros of either sign), then values the
  // coding cannot carry, at several places and in several orders (a non-finite value after a
  // second magnitude wins, as on the host).
  auto sections = model<float>(17);
  for (auto& s : sections)
    for (std::size_t j = 0; j < s.values.size(); ++j) s.values[j] = j % 3 == 0 ? -0.75f : j % 3 == 1 ? 0.0f : 0.75f;
  auto with = [&](auto change) {
    auto m = sections;
    change(m);
    return m;
  };
  const std::vector<std::vector<host_section<float>>> cases = {
      sections,
      with([](auto& m) { m[0].values[5] = 0.5f; }),                                      // a second magnitude
      with([](auto& m) { m[0].values[5] = 1.5f; }),                                      // a larger one
      with([](auto& m) { m[3].values[0] = std::numeric_limits<float>::infinity(); }),   // not finite
      with([](auto& m) {                                                                 // both, in that order
        m[3].values[1] = 0.25f;
        m[3].values[6] = std::numeric_limits<float>::quiet_NaN();
      }),
      with([](auto& m) {                                                                 // only zeros
        for (auto& v : m[4].values) v = -0.0f;
      }),
  };
  gradcomp::wire::encode_options opt;
  opt.indices = gradcomp::wire::index_coding::bitmap;
  opt.checksum = true;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    CAPTURE(c);
    const auto expected = host_encode(cases[c], opt, gradcomp::wire::value_coding::ternary);
    const auto got = device_encode(cases[c], opt, gradcomp::wire::value_coding::ternary);
    REQUIRE(static_cast<bool>(got) == static_cast<bool>(expected));
    if (expected) CHECK(*got == *expected);
    else CHECK(got.error() == expected.error());
  }
  // Double values: a largest magnitude binary32 does not hold is refused, as on the host.
  auto doubles = model<double>(19);
  for (auto& s : doubles)
    for (std::size_t j = 0; j < s.values.size(); ++j) s.values[j] = j % 2 == 0 ? 0.1 : 0.0;
  const auto expected = host_encode(doubles, opt, gradcomp::wire::value_coding::ternary);
  const auto got = device_encode(doubles, opt, gradcomp::wire::value_coding::ternary);
  REQUIRE(!expected);
  CHECK(got.error() == expected.error());
}

TEST_CASE("device_encoder: a TernGrad step's message encoded where the step ran, the compressor's own bytes") {
  gradcomp::terngrad_compressor<float, primary_backend> c(gradcomp::terngrad_config{}, primary_backend{});
  for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
  check_device_messages(c, 2);
}

TEST_CASE("device_encoder: scaled_sign sections refuse values of another magnitude as the host encoder does") {
  // Sections given their own coding: values of one magnitude (signs, zeros of either sign), then
  // values the coding cannot carry, at several places.
  auto sections = model<float>(13);
  for (auto& s : sections) {
    for (std::size_t j = 0; j < s.values.size(); ++j) s.values[j] = (j % 3 == 0 ? -0.75f : 0.75f);
  }
  auto with = [&](auto change) {
    auto m = sections;
    change(m);
    return m;
  };
  const std::vector<std::vector<host_section<float>>> cases = {
      sections,
      with([](auto& m) { m[0].values[5] = 0.5f; }),                                      // another magnitude
      with([](auto& m) { m[3].values[0] = std::numeric_limits<float>::infinity(); }),   // a first value not finite
      with([](auto& m) { m[3].values[7] = std::numeric_limits<float>::quiet_NaN(); }),  // a later one
      with([](auto& m) { m[4].values[2] = -0.0f; }),                                     // zero in a dense section
  };
  gradcomp::wire::encode_options opt;
  opt.indices = gradcomp::wire::index_coding::delta_varint;
  opt.checksum = true;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    CAPTURE(c);
    const auto expected = host_encode(cases[c], opt, gradcomp::wire::value_coding::scaled_sign);
    const auto got = device_encode(cases[c], opt, gradcomp::wire::value_coding::scaled_sign);
    REQUIRE(static_cast<bool>(got) == static_cast<bool>(expected));
    if (expected) CHECK(*got == *expected);
    else CHECK(got.error() == expected.error());
  }
}

