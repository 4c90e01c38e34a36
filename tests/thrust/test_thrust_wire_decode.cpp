// wire::device_accumulator: messages decoded and added in the Thrust backend's memory give the
// host decoder's (wire::decode_accumulate) sums bitwise, and for any damage to the bytes the host
// decoder's error with every accumulator left as it was; the work is issued without the host
// waiting.
#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/aggregator.hpp>
#include <gradcomp/backend_memory.hpp>
#include <gradcomp/comm/thrust_memory.hpp>
#include <gradcomp/isgq/compressor.hpp>
#include <gradcomp/thrust/wire_decode.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include "backend/conformance.hpp"
#include "support/sanitized.hpp"
#include "thrust/data.hpp"
#include "thrust/systems.hpp"

namespace {

namespace wire = gradcomp::wire;
using gradcomp::errc;

// The receiver's tensors (ids 0..4): sizes that are and are not multiples of 8.
constexpr std::uint32_t tensor_sizes[] = {37, 300, 1000, 8, 129};
constexpr std::size_t tensor_count = 5;

// How a message is written: the encoder's options, and a packed coding every section uses instead
// (scaled signs, ternary values: zero for about a third of them, or QSGD levels 0 to 5 in buckets
// of 16, 0 for about two thirds) or none.
struct message_form {
  std::string name;
  wire::encode_options opt;
  wire::value_coding packed = wire::value_coding::unspecified;
};

std::vector<message_form> forms() {
  using wire::index_coding;
  using wire::value_coding;
  std::vector<message_form> f;
  f.push_back({"raw_u32 fp32", {index_coding::raw_u32, value_coding::fp32, value_coding::fp32, false}});
  f.push_back({"delta_varint fp16, dense bf16", {index_coding::delta_varint, value_coding::fp16, value_coding::bf16, false}});
  f.push_back({"rice fp64", {index_coding::rice, value_coding::fp64, value_coding::fp64, false}});
  f.push_back({"bitmap bf16", {index_coding::bitmap, value_coding::bf16, value_coding::fp32, false}});
  f.push_back({"automatic fp32, checksum", {index_coding::automatic, value_coding::fp32, value_coding::fp32, true}});
  f.push_back({"scaled signs, delta_varint", {index_coding::delta_varint, value_coding::fp32, value_coding::fp32, false},
               value_coding::scaled_sign});
  f.push_back({"ternary, rice", {index_coding::rice, value_coding::fp32, value_coding::fp32, false},
               value_coding::ternary});
  wire::encode_options device_readable{index_coding::bitmap, value_coding::fp32, value_coding::fp32, false};
  device_readable.device_readable = true;
  f.push_back({"qsgd, bitmap", device_readable, value_coding::qsgd});
  f.push_back({"qsgd_gamma, raw_u32", {index_coding::raw_u32, value_coding::fp32, value_coding::fp32, false},
               value_coding::qsgd});
  return f;
}

// The form whose QSGD values the encoder writes as Elias-gamma streams (most levels are 0).
message_form gamma_form() {
  const message_form form = forms().back();
  REQUIRE(form.packed == wire::value_coding::qsgd);
  REQUIRE(!form.opt.device_readable);
  return form;
}

// One worker's message: a section for most tensors (tensor 3 only in some), sparse at varied
// densities (one with nothing kept) and tensor 4 dense.
template <class T>
std::vector<std::byte> make_message(std::uint64_t seed, const message_form& form) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<std::uint32_t>> indices(tensor_count);
  std::vector<std::vector<T>> values(tensor_count);
  std::vector<std::vector<float>> norms(tensor_count);
  std::vector<gradcomp::tensor_message<T>> msgs;
  const T scale = static_cast<T>(0.5 + static_cast<double>(seed % 7));
  for (std::uint32_t t = 0; t < tensor_count; ++t) {
    if (t == 3 && seed % 2 == 0) continue;
    gradcomp::tensor_message<T> m;
    m.tensor = t;
    m.numel = tensor_sizes[t];
    m.dense = t == 4;
    const std::uint32_t every = t == 1 ? 2 : t == 2 ? 1 + static_cast<std::uint32_t>(rng() % 60) : 5;
    for (std::uint32_t i = m.dense ? 0 : static_cast<std::uint32_t>(rng() % every); i < m.numel;
         i += m.dense ? 1 : every) {
      if (t == 0 && seed % 3 == 0) break;  // nothing kept
      if (!m.dense) indices[t].push_back(i);
      const double v = normal(rng);
      const T sign = v < 0 ? -scale : scale;
      switch (form.packed) {
        case wire::value_coding::scaled_sign: values[t].push_back(sign); break;
        case wire::value_coding::ternary: values[t].push_back(std::fabs(v) < 0.43 ? T(0) : sign); break;
        case wire::value_coding::qsgd: {
          const double level = std::fabs(v) < 1.0 ? 0.0 : std::min(5.0, 2.0 * std::fabs(v));
          values[t].push_back(gradcomp::detail::qsgd_value<T>(static_cast<float>(scale),
                                                              static_cast<std::uint32_t>(level), 5, v < 0));
          break;
        }
        default: values[t].push_back(static_cast<T>(v * 4.0));
      }
    }
    m.indices = gradcomp::span<const std::uint32_t>(indices[t].data(), indices[t].size());
    m.values = gradcomp::span<const T>(values[t].data(), values[t].size());
    m.coding = form.packed;
    norms[t].assign((values[t].size() + 15) / 16, static_cast<float>(scale));
    m.parameters.bucket = 16;
    m.parameters.levels = 5;
    m.parameters.scales = norms[t].data();
    msgs.push_back(m);
  }
  return wire::encode(gradcomp::span<const gradcomp::tensor_message<T>>(msgs.data(), msgs.size()), form.opt);
}

// The host decoder with the rules the device decoder's options stand for.
struct host_rules {
  gradcomp::wire::device_accumulate_options opt;
  std::vector<bool> seen = std::vector<bool>(tensor_count, false);
  errc section(const wire::section_header& s, double, bool& check_sums) {
    seen[s.tensor] = true;
    check_sums = opt.check_sums;
    return errc::ok;
  }
  errc complete() const {
    for (const bool s : seen)
      if (opt.every_tensor && !s) return errc::missing_tensor;
    return errc::ok;
  }
};

template <class T>
errc host_accumulate(const std::vector<std::byte>& msg, std::size_t length, std::vector<std::vector<T>>& acc,
                     const wire::device_accumulate_options& opt) {
  std::vector<gradcomp::span<T>> dest;
  for (auto& a : acc) dest.emplace_back(a.data(), a.size());
  host_rules rules{opt};
  std::vector<std::uint32_t> scratch(1 << 12);
  const auto r = wire::decode_accumulate<T>(gradcomp::span<const std::byte>(msg.data(), length),
                                            gradcomp::span<const gradcomp::span<T>>(dest.data(), dest.size()),
                                            gradcomp::span<std::uint32_t>(scratch.data(), scratch.size()), rules);
  return r ? errc::ok : r.error();
}

// Accumulators in backend memory with a device_accumulator over them.
template <class T, class Backend>
struct receiver {
  using space = gradcomp::memory_space_t<Backend>;
  Backend b{};
  std::vector<gradcomp::backend_buffer<T, Backend>> acc;
  std::unique_ptr<wire::device_accumulator<T, Backend>> decoder;
  gradcomp::backend_buffer<std::byte, Backend> msg;
  gradcomp::backend_buffer<std::uint64_t, Backend> outcome;
  gradcomp::backend_buffer<std::uint64_t, Backend> length;

  receiver(const std::vector<std::vector<T>>& initial, std::uint64_t capacity,
           const wire::device_accumulate_options& opt, const std::vector<std::uint8_t>& dense_form = {},
           std::uint64_t max_messages = 1) {
    std::vector<gradcomp::span<T, space>> views;
    for (const auto& a : initial) {
      acc.push_back(gradcomp::allocate_buffer<T>(b, a.size()));
      REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const T>(a.data(), a.size()), acc.back().view()));
      views.push_back(acc.back().view());
    }
    decoder = std::make_unique<wire::device_accumulator<T, Backend>>(
        b, gradcomp::span<const gradcomp::span<T, space>>(views.data(), views.size()), capacity, opt,
        gradcomp::span<const std::uint8_t>(dense_form.data(), dense_form.size()), max_messages);
    msg = gradcomp::allocate_buffer<std::byte>(b, capacity * max_messages);
    outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
    length = gradcomp::allocate_buffer<std::uint64_t>(b, 1);
  }

  // Decodes the first `n` bytes of m: as a view of exactly those bytes, or (through_length) as
  // the whole buffer with its length in backend memory. Returns the outcome.
  std::vector<std::uint64_t> accumulate(const std::vector<std::byte>& m, std::size_t n, bool through_length) {
    using gradcomp::detail::thrust_impl::host_transfer_count;
    REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::byte>(m.data(), m.size()),
                                      msg.view().first(m.size())));
    const std::uint64_t len = n;
    REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::uint64_t>(&len, 1), length.view()));
    const auto before = host_transfer_count.load();
    if (through_length) {
      REQUIRE(decoder->accumulate(b, gradcomp::readonly(msg.view()), outcome.view(), length.view().data()));
    } else {
      REQUIRE(decoder->accumulate(b, gradcomp::readonly(msg.view().first(n)), outcome.view()));
    }
    CHECK(host_transfer_count.load() == before);  // issued without waiting
    std::vector<std::uint64_t> r(2);
    REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(r.data(), 2)));
    gradcomp::synchronize(b);
    return r;
  }

  // Decodes and adds every slot of `slots` (messages of `stride` bytes each, laid out as an
  // allgather leaves them) in one call: message r is the first lengths[r] bytes of its slot, or
  // (lengths empty) the whole slot. Returns every outcome.
  std::vector<std::uint64_t> accumulate_all(const std::vector<std::byte>& slots, std::size_t stride,
                                            const std::vector<std::uint64_t>& lengths) {
    using gradcomp::detail::thrust_impl::host_transfer_count;
    const std::size_t n = slots.size() / stride;
    REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::byte>(slots.data(), slots.size()),
                                      msg.view().first(slots.size())));
    auto len = gradcomp::allocate_buffer<std::uint64_t>(b, lengths.size());
    REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::uint64_t>(lengths.data(), lengths.size()),
                                      len.view()));
    auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(b, 2 * n);
    const auto before = host_transfer_count.load();
    REQUIRE(decoder->accumulate_all(b, gradcomp::readonly(msg.view().first(slots.size())), stride,
                                    gradcomp::readonly(len.view()), outcomes.view()));
    CHECK(host_transfer_count.load() == before);  // issued without waiting
    std::vector<std::uint64_t> r(2 * n);
    REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(outcomes.view()), gradcomp::span<std::uint64_t>(r.data(), r.size())));
    gradcomp::synchronize(b);
    return r;
  }

  std::vector<std::vector<T>> read() {
    std::vector<std::vector<T>> out;
    for (auto& a : acc) {
      out.emplace_back(a.size());
      REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(a.view()), gradcomp::span<T>(out.back().data(), a.size())));
    }
    gradcomp::synchronize(b);
    return out;
  }
};

template <class T>
std::vector<std::vector<T>> initial_accumulators(std::uint64_t seed) {
  std::vector<std::vector<T>> acc;
  for (std::size_t t = 0; t < tensor_count; ++t) acc.push_back(gradcomp_test::gaussian<T>(tensor_sizes[t], seed + t));
  return acc;
}

template <class T>
bool same(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t t = 0; t < a.size(); ++t)
    if (!gradcomp_test::bitwise_same(a[t], b[t])) return false;
  return true;
}

template <class T, class Backend>
void check_sound_messages() {
  for (const message_form& form : forms()) {
    CAPTURE(form.name);
    auto host = initial_accumulators<T>(11);
    receiver<T, Backend> r(host, 1 << 14, {});
    for (std::uint64_t w = 0; w < 4; ++w) {  // four workers, added in order
      const auto m = make_message<T>(100 + w, form);
      REQUIRE(m.size() <= (1u << 14));
      const auto header = wire::peek(gradcomp::span<const std::byte>(m.data(), m.size()));
      REQUIRE(header);
      REQUIRE(host_accumulate<T>(m, m.size(), host, {}) == errc::ok);
      const auto out = r.accumulate(m, m.size(), w % 2 == 1);
      CHECK(out[0] == 0);
      CHECK(out[1] == header->section_count);
      CHECK(same(r.read(), host));
    }
  }
}

TEST_CASE_TEMPLATE("device_accumulator: sound messages of every coding add up bitwise as on the host",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  check_sound_messages<float, Backend>();
  check_sound_messages<double, Backend>();
}

// Damage to a message: bytes flipped one at a time at every position, random bytes written at
// random places, and every shorter length. The damaged messages are given 16 to a call
// (accumulate_all, as an allgather's slots): each gets the host decoder's error (or, for damage
// that leaves a sound message, it is added), and the sums are those of the host decoder given the
// same messages one after the other, so a refused message changes nothing.
template <class T, class Backend>
void check_damage(const message_form& form, std::uint64_t seed) {
  const wire::device_accumulate_options opt{true, false};  // sums checked: accumulators stay finite
  constexpr std::size_t per_call = 16;
  auto host = initial_accumulators<T>(seed);
  receiver<T, Backend> r(host, 1 << 14, opt, {}, per_call);
  const auto base = make_message<T>(seed, form);
  REQUIRE(base.size() <= (1u << 14));
  std::mt19937_64 rng(seed);
  std::size_t refused = 0, trials = 0, calls = 0;
  std::set<errc> seen;
  std::vector<std::byte> slots;
  std::vector<std::uint64_t> lengths;
  auto flush = [&]() {
    if (lengths.empty()) return;
    // Every other call without lengths, where every message fills its slot.
    const bool whole = ++calls % 2 == 0 &&
                       std::all_of(lengths.begin(), lengths.end(), [&](std::uint64_t n) { return n == base.size(); });
    std::vector<errc> expected;
    for (std::size_t m = 0; m < lengths.size(); ++m) {
      const std::vector<std::byte> bytes(slots.begin() + static_cast<std::ptrdiff_t>(m * base.size()),
                                         slots.begin() + static_cast<std::ptrdiff_t>((m + 1) * base.size()));
      expected.push_back(host_accumulate<T>(bytes, lengths[m], host, opt));
    }
    const auto out = r.accumulate_all(slots, base.size(), whole ? std::vector<std::uint64_t>{} : lengths);
    for (std::size_t m = 0; m < expected.size(); ++m) {
      CAPTURE(m);
      CHECK(static_cast<errc>(out[2 * m]) == expected[m]);
      if (expected[m] != errc::ok) {
        ++refused;
        seen.insert(expected[m]);
        CHECK(out[2 * m + 1] == 0);
      }
    }
    CHECK(same(r.read(), host));
    slots.clear();
    lengths.clear();
  };
  auto trial = [&](const std::vector<std::byte>& m, std::size_t n) {
    slots.insert(slots.end(), m.begin(), m.end());
    lengths.push_back(n);
    ++trials;
    if (lengths.size() == per_call) flush();
  };
  // Every byte on the sequential C++ system, which runs the same functors as the others; every
  // fifth on the OpenMP system (which byte is damaged changes the decoder's branch, not how its
  // work is split among threads); every seventh under AddressSanitizer (fuzz_device_decode covers
  // the reads there) and on a GPU (where the suite also runs under compute-sanitizer).
#if defined(GRADCOMP_TEST_CUDA_SYSTEM) || defined(GRADCOMP_TEST_SANITIZED)
  constexpr std::size_t stride = 7;
#else
  constexpr std::size_t stride = std::is_same_v<Backend, gradcomp_test::second_backend> ? 1 : 5;
#endif
  for (std::size_t p = 0; p < base.size(); p += stride) {
    for (const unsigned flip : {0x01u, 0x80u, 0x7fu}) {
      auto m = base;
      m[p] ^= static_cast<std::byte>(flip);
      trial(m, m.size());
    }
  }
  for (int k = 0; k < 100; ++k) {
    auto m = base;
    const int writes = 1 + static_cast<int>(rng() % 4);
    for (int w = 0; w < writes; ++w) m[rng() % m.size()] = static_cast<std::byte>(rng() & 0xffu);
    trial(m, m.size());
  }
  for (std::size_t n = 0; n < base.size(); n += 1 + n / 8) trial(base, n);
  trial(base, base.size());  // and the message itself
  flush();
  MESSAGE(form.name << ": " << trials << " messages, " << refused << " refused, " << seen.size() << " distinct errors");
  CHECK(seen.size() >= (form.opt.checksum ? 2u : 6u));  // the damage reaches many checks
}

TEST_CASE_TEMPLATE("device_accumulator: damaged messages get the host decoder's error and change nothing",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  std::uint64_t seed = 7;
  for (const message_form& form : forms()) {
    CAPTURE(form.name);
    check_damage<float, Backend>(form, seed++);
  }
  check_damage<double, Backend>(forms()[2], seed++);
}

// Lays the messages out as an allgather leaves them: each in a slot of the longest one's length
// (zeros after it), with its length.
std::pair<std::vector<std::byte>, std::size_t> slots_of(const std::vector<std::vector<std::byte>>& msgs) {
  std::size_t stride = 1;
  for (const auto& m : msgs) stride = std::max(stride, m.size());
  std::vector<std::byte> slots(msgs.size() * stride);
  for (std::size_t r = 0; r < msgs.size(); ++r) std::copy(msgs[r].begin(), msgs[r].end(), slots.begin() + static_cast<std::ptrdiff_t>(r * stride));
  return {slots, stride};
}

// Lays the messages out as an allgatherv leaves them: one right after the other, with each one's
// offset and length.
struct packed_messages {
  std::vector<std::byte> bytes;
  std::vector<std::uint64_t> offsets, lengths;
};
packed_messages packed_of(const std::vector<std::vector<std::byte>>& msgs) {
  packed_messages p;
  for (const auto& m : msgs) {
    p.offsets.push_back(p.bytes.size());
    p.lengths.push_back(m.size());
    p.bytes.insert(p.bytes.end(), m.begin(), m.end());
  }
  return p;
}

// The host decoder on each message in turn; returns the errors.
template <class T>
std::vector<errc> host_in_order(const std::vector<std::vector<std::byte>>& msgs, std::vector<std::vector<T>>& acc,
                                const wire::device_accumulate_options& opt) {
  std::vector<errc> out;
  for (const auto& m : msgs) out.push_back(host_accumulate<T>(m, m.size(), acc, opt));
  return out;
}

// N workers' messages given to accumulate_all at once: each outcome and the sums are the host
// decoder's on the same messages one after the other.
template <class T, class Backend>
void check_batches(const wire::device_accumulate_options& opt) {
  const auto all = forms();
  // A batch of the forms whose every section threads read in parallel (not Rice, which
  // `automatic` may choose, nor qsgd_gamma), then batches of every form, the serial ones at a
  // different place in each; one message damaged, one sent twice.
  std::vector<std::vector<std::size_t>> batches = {{0, 1, 3, 5, 7, 0, 3, 1}};
  for (std::size_t k = 0; k < all.size(); ++k) {
    std::vector<std::size_t> b;
    for (std::size_t w = 0; w < 7; ++w) b.push_back((k + w) % all.size());
    batches.push_back(b);
  }
  for (std::size_t k = 0; k < batches.size(); ++k) {
    CAPTURE(k);
    auto host = initial_accumulators<T>(40 + k);
    receiver<T, Backend> r(host, 1 << 14, opt, {}, 9);
    std::vector<std::vector<std::byte>> msgs;
    for (std::size_t w = 0; w < batches[k].size(); ++w) msgs.push_back(make_message<T>(300 + 10 * k + w, all[batches[k][w]]));
    msgs[2][msgs[2].size() / 2] ^= std::byte{0x40};
    msgs.push_back(msgs[1]);
    const auto expected = host_in_order<T>(msgs, host, opt);
    const auto [slots, stride] = slots_of(msgs);
    std::vector<std::uint64_t> lengths;
    for (const auto& m : msgs) lengths.push_back(m.size());
    const auto out = r.accumulate_all(slots, stride, lengths);
    for (std::size_t m = 0; m < msgs.size(); ++m) {
      CAPTURE(m);
      CHECK(static_cast<errc>(out[2 * m]) == expected[m]);
      if (expected[m] == errc::ok) CHECK(out[2 * m + 1] == wire::peek(gradcomp::span<const std::byte>(msgs[m].data(), msgs[m].size()))->section_count);
    }
    CHECK(std::count(expected.begin(), expected.end(), errc::ok) >= (opt.every_tensor ? 3 : 6));
    CHECK(same(r.read(), host));
  }
}

TEST_CASE_TEMPLATE("device_accumulator: N workers' messages in one call add up as one after the other on the host",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  wire::device_accumulate_options sums;
  sums.check_sums = true;
  wire::device_accumulate_options every = sums;
  every.every_tensor = true;
  for (const auto& opt : {wire::device_accumulate_options{}, sums, every}) {
    CAPTURE(opt.check_sums);
    CAPTURE(opt.every_tensor);
    check_batches<float, Backend>(opt);
  }
  check_batches<double, Backend>(sums);
}

// One section of tensor 2 (1,000 elements) keeping elements 10 and 20, raw indices and fp32 or
// Rice indices and fp64 values.
std::vector<std::byte> two_values(float at_10, float at_20, bool rice = false) {
  const std::uint32_t idx[] = {10, 20};
  const float vals[] = {at_10, at_20};
  gradcomp::tensor_message<float> t;
  t.tensor = 2;
  t.numel = tensor_sizes[2];
  t.indices = gradcomp::span<const std::uint32_t>(idx, 2);
  t.values = gradcomp::span<const float>(vals, 2);
  wire::encode_options opt;
  opt.indices = rice ? wire::index_coding::rice : wire::index_coding::raw_u32;
  opt.values = rice ? wire::value_coding::fp64 : wire::value_coding::fp32;
  return wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&t, 1), opt);
}

TEST_CASE_TEMPLATE("device_accumulator: with sums checked, a message refused for its sums is not in the sums the "
                   "next ones are checked against",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  // Element 10 starts at 0.75 of the largest float. A message adding 0.5 of it overflows and is
  // refused; one adding 0.2 after it is then sound (0.95), but would overflow if the refused one
  // counted. Where the refused message is first, second or after a Rice-coded one, the verdicts
  // and sums are the host decoder's in order.
  const float big = std::numeric_limits<float>::max();
  wire::device_accumulate_options sums;
  sums.check_sums = true;
  const std::vector<std::vector<std::vector<std::byte>>> cases = {
      {two_values(0.5f * big, 1), two_values(0.2f * big, 2), two_values(-0.9f * big, 3), two_values(0.5f * big, 4)},
      {two_values(-1e30f, 1), two_values(0.5f * big, 2), two_values(0.2f * big, 3), two_values(-0.1f * big, 4)},
      {two_values(1, 1, true), two_values(0.5f * big, 2), two_values(0.2f * big, 3, true), two_values(-0.1f * big, 4)},
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    CAPTURE(k);
    auto host = initial_accumulators<float>(60);
    host[2][10] = 0.75f * big;
    receiver<float, Backend> r(host, 1 << 12, sums, {}, 4);
    const auto expected = host_in_order<float>(cases[k], host, sums);
    CHECK(std::count(expected.begin(), expected.end(), errc::state_overflow) == 1);
    CHECK(expected[k == 0 ? 1 : 2] == errc::ok);
    const auto [slots, stride] = slots_of(cases[k]);
    std::vector<std::uint64_t> lengths;
    for (const auto& m : cases[k]) lengths.push_back(m.size());
    const auto out = r.accumulate_all(slots, stride, lengths);
    for (std::size_t m = 0; m < expected.size(); ++m) {
      CAPTURE(m);
      CHECK(static_cast<errc>(out[2 * m]) == expected[m]);
    }
    CHECK(same(r.read(), host));
  }
}

TEST_CASE_TEMPLATE("device_accumulator: messages at offsets of an allgatherv's buffer add up as one after the other",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  // Three messages one after the other (no slots), then two that do not lie within the buffer or
  // are longer than the decoder takes: size_mismatch for those, as accumulate gives for a length
  // beyond its buffer, and the others added in order.
  const auto all = forms();
  std::vector<std::vector<std::byte>> msgs = {make_message<float>(500, all[0]), make_message<float>(501, all[3]),
                                              make_message<float>(502, all[1])};
  auto [packed, offsets, lengths] = packed_of(msgs);
  offsets.push_back(packed.size() - 10);  // runs past the buffer's end
  lengths.push_back(msgs[0].size());
  offsets.push_back(0);  // longer than the decoder's capacity
  lengths.push_back(packed.size());
  auto host = initial_accumulators<float>(62);
  const std::uint64_t capacity = std::max({msgs[0].size(), msgs[1].size(), msgs[2].size()});
  receiver<float, Backend> r(host, capacity, {}, {}, 5);
  auto expected = host_in_order<float>(msgs, host, {});
  expected.push_back(errc::size_mismatch);
  expected.push_back(errc::size_mismatch);
  auto bytes = gradcomp::allocate_buffer<std::byte>(r.b, packed.size());
  REQUIRE(gradcomp::copy_to_backend(r.b, gradcomp::span<const std::byte>(packed.data(), packed.size()), bytes.view()));
  std::vector<std::uint64_t> layout = offsets;
  layout.insert(layout.end(), lengths.begin(), lengths.end());
  auto where = gradcomp::allocate_buffer<std::uint64_t>(r.b, layout.size());
  REQUIRE(gradcomp::copy_to_backend(r.b, gradcomp::span<const std::uint64_t>(layout.data(), layout.size()), where.view()));
  auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(r.b, 10);
  const auto w = gradcomp::readonly(where.view());
  REQUIRE(r.decoder->accumulate_all(r.b, gradcomp::readonly(bytes.view()), w.first(5), w.subspan(5, 5), outcomes.view()));
  std::vector<std::uint64_t> out(10);
  REQUIRE(gradcomp::copy_to_host(r.b, gradcomp::readonly(outcomes.view()), gradcomp::span<std::uint64_t>(out.data(), 10)));
  gradcomp::synchronize(r.b);
  for (std::size_t m = 0; m < 5; ++m) {
    CAPTURE(m);
    CHECK(static_cast<errc>(out[2 * m]) == expected[m]);
  }
  CHECK(expected[0] == errc::ok);
  CHECK(same(r.read(), host));
}

TEST_CASE("device exchange: every rank's message added in one call, or in groups, as the host aggregator adds them") {
  // What an exchange in a Thrust backend's memory does with an allgatherv's buffer
  // (comm/thrust_memory.hpp): the aggregator's updates and the first refusal (rank and error) are
  // the host aggregator's adding the same messages in rank order, whether the ranks' messages go
  // in one accumulate_all call or, under a small workspace budget, one or two ranks per call.
  using backend = gradcomp_test::primary_backend;
  using reduction = gradcomp::comm::detail::device_aggregator_reduction<gradcomp::aggregator<float, backend>,
                                                                         gradcomp_test::primary_system>;
  namespace cd = gradcomp::comm::detail;
  const auto cfg = gradcomp_test::conformance_configs()[13];
  std::vector<std::vector<std::byte>> msgs;
  for (std::size_t rank = 0; rank < 5; ++rank) {
    gradcomp_test::conformance_worker<float, gradcomp::cpu_backend> w(cfg, gradcomp::cpu_backend{});
    w.load(gradcomp_test::conformance_gradients<float>(0, rank));
    REQUIRE(w.compressor.compress(w.views()));
    msgs.push_back(w.encode().value());
  }
  gradcomp_test::conformance_worker<float, gradcomp::cpu_backend> layout(cfg, gradcomp::cpu_backend{});
  for (const bool damaged : {false, true}) {
    auto ranks = msgs;
    if (damaged) ranks[3][ranks[3].size() / 2] ^= std::byte{0x08};
    const auto [gathered, displs, counts] = packed_of(ranks);
    gradcomp::aggregator<float> host(layout.compressor);
    host.begin();
    std::uint64_t expected = cd::no_failure;
    for (std::size_t r = 0; r < ranks.size() && expected == cd::no_failure; ++r) {
      const auto added = host.add(gradcomp::span<const std::byte>(ranks[r].data(), ranks[r].size()));
      if (!added) expected = cd::failure_key(static_cast<int>(r), added.error());
    }
    if (expected == cd::no_failure) REQUIRE(host.finish(ranks.size()));
    for (const std::uint64_t budget : {reduction::default_workspace_budget, std::uint64_t(1), std::uint64_t(90000)}) {
      CAPTURE(damaged);
      CAPTURE(budget);
      const backend b{};
      gradcomp::aggregator<float, backend> agg(layout.compressor);
      reduction red(agg, b, budget);
      auto bytes = gradcomp::allocate_buffer<std::byte>(b, gathered.size());
      REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const std::byte>(gathered.data(), gathered.size()), bytes.view()));
      // A sixth rank whose message no decoder takes (its bytes never read): refused after the
      // five are added, or after the damaged one fails the step first.
      std::vector<std::uint64_t> more_counts = counts, more_displs = displs;
      more_counts.push_back(gradcomp::wire::device_accumulator<float, backend>::capacity_limit + 1);
      more_displs.push_back(0);
      red.begin();
      CHECK(red.add_all(bytes.view().data(), more_counts, more_displs) ==
            (damaged ? expected : cd::failure_key(5, errc::workspace_too_small)));
      red.begin();
      const std::uint64_t key = red.add_all(bytes.view().data(), counts, displs);
      CHECK(key == expected);
      if (expected != cd::no_failure) continue;
      REQUIRE(red.finish(ranks.size(), false) == errc::ok);
      for (std::size_t t = 0; t < agg.num_tensors(); ++t) {
        std::vector<float> got(agg.update(t).size());
        REQUIRE(gradcomp::copy_to_host(b, agg.update(t), gradcomp::span<float>(got.data(), got.size())));
        gradcomp::synchronize(b);
        const auto want = host.update(t);
        CHECK(gradcomp_test::bitwise_same(got, std::vector<float>(want.data(), want.data() + want.size())));
      }
    }
    CHECK((expected == cd::no_failure) == !damaged);
  }
}

TEST_CASE("device_accumulator: accumulate_all refuses what does not fit before issuing anything") {
  using backend = gradcomp_test::primary_backend;
  auto host = initial_accumulators<float>(61);
  receiver<float, backend> r(host, 256, {}, {}, 2);
  auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(r.b, 6);
  auto slots = gradcomp::allocate_buffer<std::byte>(r.b, 3 * 256);
  const auto bytes = gradcomp::readonly(slots.view());
  auto code = [](const gradcomp::result<void>& x) { return x ? errc::ok : x.error(); };
  CHECK(code(r.decoder->accumulate_all(r.b, bytes.first(512), 0, {}, outcomes.view())) == errc::size_mismatch);
  CHECK(code(r.decoder->accumulate_all(r.b, bytes.first(500), 256, {}, outcomes.view())) == errc::size_mismatch);
  CHECK(code(r.decoder->accumulate_all(r.b, bytes, 256, {}, outcomes.view())) == errc::workspace_too_small);
  CHECK(code(r.decoder->accumulate_all(r.b, bytes.first(514), 257, {}, outcomes.view())) == errc::workspace_too_small);
  CHECK(code(r.decoder->accumulate_all(r.b, bytes.first(512), 256, {}, outcomes.view().first(3))) == errc::size_mismatch);
  CHECK(code(r.decoder->accumulate_all(r.b, bytes.first(512), 256, gradcomp::readonly(outcomes.view()).first(1),
                                       outcomes.view())) == errc::size_mismatch);
  CHECK(code(r.decoder->accumulate_all(r.b, bytes.first(0), 256, {}, outcomes.view())) == errc::ok);
  CHECK(same(r.read(), host));
}

// The codings of a message's sections, as (index coding, value coding) pairs.
std::set<std::pair<wire::index_coding, wire::value_coding>> section_codings(const std::vector<std::byte>& m) {
  std::set<std::pair<wire::index_coding, wire::value_coding>> out;
  REQUIRE(wire::for_each_section(gradcomp::span<const std::byte>(m.data(), m.size()),
                                 [&](const wire::section_header& s) { out.insert({s.indices, s.values}); }));
  return out;
}

TEST_CASE_TEMPLATE("device_accumulator: qsgd_gamma streams, one thread each, add up bitwise as on the host", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  // Sparse (raw_u32) and dense sections in the Elias-gamma form, into accumulators holding -0 at
  // every other element: the host adds +0 for each value the stream leaves out, which turns a -0
  // into +0, and the device decoder must too.
  const message_form form = gamma_form();
  auto host = initial_accumulators<float>(21);
  for (auto& a : host)
    for (std::size_t i = 0; i < a.size(); i += 2) a[i] = -0.0f;
  receiver<float, Backend> r(host, 1 << 14, {});
  for (std::uint64_t w = 0; w < 3; ++w) {
    const auto m = make_message<float>(200 + w, form);
    const auto codings = section_codings(m);
    CHECK(codings.count({wire::index_coding::raw_u32, wire::value_coding::qsgd_gamma}) == 1);
    CHECK(codings.count({wire::index_coding::dense, wire::value_coding::qsgd_gamma}) == 1);
    REQUIRE(host_accumulate<float>(m, m.size(), host, {}) == errc::ok);
    CHECK(r.accumulate(m, m.size(), w == 1)[0] == 0);
    CHECK(same(r.read(), host));
  }
  std::size_t positive_zeros = 0;
  for (const auto& a : host)
    for (std::size_t i = 0; i < a.size(); i += 2) positive_zeros += a[i] == 0.0f && !std::signbit(a[i]) ? 1 : 0;
  CHECK(positive_zeros > 20);  // the zeros were added
}

TEST_CASE_TEMPLATE("device_accumulator: a qsgd_gamma sum that overflows, or one with indices its thread cannot "
                   "find, is refused as on the host",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  const message_form form = gamma_form();
  const auto m = make_message<float>(201, form);
  // Tensor 4 (dense, Elias-gamma) with an infinite accumulator at element 7: the sum there is not
  // finite whether the stream holds value 7 or leaves it 0, and the host decoder refuses it.
  auto host = initial_accumulators<float>(22);
  host[4][7] = std::numeric_limits<float>::infinity();
  wire::device_accumulate_options sums;
  sums.check_sums = true;
  receiver<float, Backend> r(host, 1 << 14, sums);
  const auto before = host;
  REQUIRE(host_accumulate<float>(m, m.size(), host, sums) == errc::state_overflow);
  CHECK(static_cast<errc>(r.accumulate(m, m.size(), false)[0]) == errc::state_overflow);
  CHECK(same(r.read(), before));
  // The same values with bitmap positions: the host decoder reads them; the device decoder
  // refuses the coding and changes nothing.
  message_form bitmap = form;
  bitmap.opt.indices = wire::index_coding::bitmap;
  const auto b = make_message<float>(201, bitmap);
  REQUIRE(section_codings(b).count({wire::index_coding::bitmap, wire::value_coding::qsgd_gamma}) == 1);
  auto fresh = initial_accumulators<float>(23);
  receiver<float, Backend> plain(fresh, 1 << 14, {});
  REQUIRE(host_accumulate<float>(b, b.size(), fresh, {}) == errc::ok);
  CHECK(static_cast<errc>(plain.accumulate(b, b.size(), true)[0]) == errc::unknown_coding);
  CHECK(same(plain.read(), initial_accumulators<float>(23)));
}

TEST_CASE_TEMPLATE("device_accumulator: isgq, whose product only the host decoder forms, is refused", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  // Tensor 0 (37 elements) as a 37-input, 1-output layer's ISGQ factors over a batch of 2: the host
  // decoder adds the product; the device decoder refuses the coding and changes nothing.
  gradcomp::isgq_compressor<float> c(gradcomp::isgq_config{});
  c.add_layer("t0", 37, 1, gradcomp::isgq_layout::out_in, 0);
  const auto x = gradcomp_test::gaussian<float>(2 * 37, 3), d = gradcomp_test::gaussian<float>(2, 4);
  const auto m = c.compress(0, gradcomp::span<const float>(x.data(), x.size()),
                            gradcomp::span<const float>(d.data(), d.size()), 2)
                     .value();
  const auto msg = wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&m, 1), wire::encode_options{});
  auto host = initial_accumulators<float>(5);
  receiver<float, Backend> r(host, 1 << 14, {});
  auto added = host;
  REQUIRE(host_accumulate<float>(msg, msg.size(), added, {}) == errc::ok);
  CHECK(!same(added, host));
  CHECK(static_cast<errc>(r.accumulate(msg, msg.size(), true)[0]) == errc::unknown_coding);
  CHECK(same(r.read(), host));
}

TEST_CASE_TEMPLATE("device_accumulator: hand-made varint payloads get the host decoder's verdict", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  // One section of 100,000 elements keeping {1, 300, 70000}: gaps 1, 298, 69699 as varints of 1, 2
  // and 3 bytes. The six index bytes are replaced by each payload below (the lengths stay sound).
  const std::uint32_t idx[] = {1, 300, 70000};
  const float vals[] = {1.0f, -2.0f, 3.0f};
  gradcomp::tensor_message<float> t;
  t.tensor = 0;
  t.numel = 100000;
  t.indices = gradcomp::span<const std::uint32_t>(idx, 3);
  t.values = gradcomp::span<const float>(vals, 3);
  wire::encode_options opt;
  opt.indices = wire::index_coding::delta_varint;
  const auto base = wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&t, 1), opt);
  const std::size_t at = wire::message_header_bytes + wire::section_header_bytes;
  REQUIRE(base[at + 5] == std::byte{0x04});  // 69699 = 0x43 + 0x20 << 7 + 0x04 << 14
  const std::vector<std::vector<unsigned>> payloads = {
      {0x01, 0xaa, 0x02, 0xc3, 0xa0, 0x04},  // the message itself
      {0x80, 0x80, 0x80, 0x80, 0x80, 0x00},  // a six-byte varint
      {0x80, 0x80, 0x80, 0x80, 0x10, 0x00},  // a five-byte varint above 32 bits, then one too many
      {0x80, 0x80, 0x80, 0x80, 0x00, 0x01},  // a five-byte zero: not the shortest form
      {0x81, 0x00, 0x01, 0x02, 0x03, 0x04},  // a two-byte one, then more varints than kept
      {0x01, 0x02, 0x03, 0x04, 0x05, 0x06},  // six one-byte varints: more than kept
      {0x01, 0x02, 0x83, 0x80, 0x80, 0x80},  // the last one never ends
      {0x01, 0x80, 0x80, 0x80, 0x80, 0x01},  // five bytes, in range, then the payload ends early
      {0xff, 0xff, 0x05, 0x00, 0x00, 0x00},  // the first gap beyond numel
      {0xa0, 0x8d, 0x06, 0x80, 0x01, 0x00},  // 100,000: the first position is numel
      {0xd0, 0x86, 0x03, 0xd0, 0x86, 0x03},  // gaps summing past numel
      {0x00, 0x00, 0x00, 0x00, 0x00, 0x00}};  // more zero gaps than kept
  std::set<errc> seen;
  for (const auto& p : payloads) {
    auto m = base;
    for (std::size_t k = 0; k < 6; ++k) m[at + k] = static_cast<std::byte>(p[k]);
    std::vector<std::vector<float>> host(tensor_count);
    host[0].assign(100000, 0.5f);
    for (std::size_t k = 1; k < tensor_count; ++k) host[k].assign(tensor_sizes[k], 0.0f);
    receiver<float, Backend> r(host, m.size(), {});
    const errc expected = host_accumulate<float>(m, m.size(), host, {});
    CAPTURE(static_cast<int>(expected));
    CHECK(static_cast<errc>(r.accumulate(m, m.size(), false)[0]) == expected);
    CHECK(same(r.read(), host));
    seen.insert(expected);
  }
  CHECK(seen.count(errc::ok) == 1);
  CHECK(seen.count(errc::malformed_payload) == 1);
  CHECK(seen.count(errc::index_out_of_range) == 1);
}

TEST_CASE_TEMPLATE("device_accumulator: the receiver's rules, lengths and limits", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  const message_form form = forms()[0];
  const auto m = make_message<float>(2, form);  // without tensor 3
  SUBCASE("every tensor required: a message without one is refused with missing_tensor") {
    auto host = initial_accumulators<float>(3);
    receiver<float, Backend> r(host, 1 << 14, {false, true});
    const auto before = r.read();
    CHECK(host_accumulate<float>(m, m.size(), host, {false, true}) == errc::missing_tensor);
    CHECK(static_cast<errc>(r.accumulate(m, m.size(), false)[0]) == errc::missing_tensor);
    CHECK(same(r.read(), before));
  }
  SUBCASE("each tensor's form required: a section of the other form is refused with layout_mismatch") {
    std::vector<std::uint8_t> dense_form(tensor_count, 0);
    std::vector<std::size_t> carried;
    (void)wire::for_each_section(gradcomp::span<const std::byte>(m.data(), m.size()), [&](const wire::section_header& h) {
      dense_form[h.tensor] = h.indices == wire::index_coding::dense ? 1 : 0;
      carried.push_back(h.tensor);
    });
    REQUIRE(carried.size() >= 2);
    auto host = initial_accumulators<float>(3);
    receiver<float, Backend> as_sent(host, 1 << 14, {}, dense_form);
    CHECK(as_sent.accumulate(m, m.size(), false)[0] == 0);
    CHECK(host_accumulate<float>(m, m.size(), host, {}) == errc::ok);
    CHECK(same(as_sent.read(), host));
    for (const std::size_t t : carried) {
      CAPTURE(t);
      auto other = dense_form;
      other[t] ^= 1;
      receiver<float, Backend> r(host, 1 << 14, {}, other);
      const auto before = r.read();
      CHECK(static_cast<errc>(r.accumulate(m, m.size(), false)[0]) == errc::layout_mismatch);
      CHECK(same(r.read(), before));
    }
    using float_receiver = receiver<float, Backend>;
    CHECK_THROWS_AS(float_receiver(host, 1 << 14, {}, std::vector<std::uint8_t>(2, 0)), gradcomp::error);
  }
  SUBCASE("sums checked: a message that would overflow an accumulator is refused with state_overflow") {
    const std::uint32_t idx[] = {1, 5};
    const float big[] = {3e38f, 3e38f};
    gradcomp::tensor_message<float> t;
    t.tensor = 1;
    t.numel = tensor_sizes[1];
    t.indices = gradcomp::span<const std::uint32_t>(idx, 2);
    t.values = gradcomp::span<const float>(big, 2);
    const auto large = wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&t, 1), form.opt);
    auto high = initial_accumulators<float>(3);
    high[1][5] = 3e38f;
    receiver<float, Backend> r(high, 1 << 14, {true, false});
    auto expected = high;
    CHECK(host_accumulate<float>(large, large.size(), expected, {true, false}) == errc::state_overflow);
    CHECK(static_cast<errc>(r.accumulate(large, large.size(), true)[0]) == errc::state_overflow);
    CHECK(same(r.read(), high));
    receiver<float, Backend> unchecked(high, 1 << 14, {});  // without the check: an infinity
    CHECK(unchecked.accumulate(large, large.size(), true)[0] == 0);
    CHECK(host_accumulate<float>(large, large.size(), high, {}) == errc::ok);
    CHECK(same(unchecked.read(), high));
    CHECK(high[1][5] == std::numeric_limits<float>::infinity());
  }
  SUBCASE("a length beyond the buffer, a buffer beyond the capacity, a short outcome") {
    auto host = initial_accumulators<float>(3);
    receiver<float, Backend> r(host, m.size(), {});
    const auto before = r.read();
    const std::uint64_t too_long = m.size() + 1;
    REQUIRE(gradcomp::copy_to_backend(r.b, gradcomp::span<const std::uint64_t>(&too_long, 1), r.length.view()));
    REQUIRE(r.decoder->accumulate(r.b, gradcomp::readonly(r.msg.view()), r.outcome.view(), r.length.view().data()));
    std::uint64_t out[2] = {};
    REQUIRE(gradcomp::copy_to_host(r.b, gradcomp::readonly(r.outcome.view()), gradcomp::span<std::uint64_t>(out, 2)));
    gradcomp::synchronize(r.b);
    CHECK(static_cast<errc>(out[0]) == errc::size_mismatch);
    CHECK(same(r.read(), before));
    auto bigger = gradcomp::allocate_buffer<std::byte>(r.b, m.size() + 1);
    CHECK(r.decoder->accumulate(r.b, gradcomp::readonly(bigger.view()), r.outcome.view()).error() ==
          errc::workspace_too_small);
    CHECK(r.decoder->accumulate(r.b, gradcomp::readonly(r.msg.view()), r.outcome.view().first(1)).error() ==
          errc::size_mismatch);
    using space = gradcomp::memory_space_t<Backend>;
    std::vector<gradcomp::span<float, space>> none;
    auto make = [&](std::uint64_t capacity) {
      wire::device_accumulator<float, Backend> d(
          r.b, gradcomp::span<const gradcomp::span<float, space>>(none.data(), none.size()), capacity);
    };
    CHECK_THROWS_AS(make(0), gradcomp::error);
    CHECK_THROWS_AS(make(wire::device_accumulator<float, Backend>::capacity_limit + 1), gradcomp::error);
  }
}

}  // namespace
