// Fuzz target: wire::device_accumulator, the Thrust backend's decode-and-accumulate, on arbitrary
// bytes, on Thrust's C++ system (its memory is the host heap, so AddressSanitizer sees every read
// the decoder's kernels make).
//
// The input is taken as a message (the corpus of fuzz_decode serves). The receiver's accumulators
// are made from the message itself, so that many inputs fit them: tensor t gets the element count
// of the first section of the message that names it (ids below 16, counts up to 2^16), other ids
// up to the largest get 5 elements, and the input's length picks a variation (one accumulator too
// few, one a element longer than its section, every tensor required, sums checked, double
// accumulators). Properties, beyond running without memory errors:
//   - the device decoder's outcome is the host decoder's (wire::decode_accumulate with the same
//     rules) for the same bytes, error for error, except that it refuses a message with an isgq
//     section, or a qsgd_gamma section whose indices are neither dense nor raw_u32 (read on the
//     host only), with unknown_coding;
//   - an accepted message gives the host decoder's sums bitwise, and reports the section count;
//   - a refused message leaves every accumulator bitwise unchanged;
//   - the message three times in one accumulate_all call (the second cut to half its length; in
//     slots, or one right after the other at offsets for inputs of odd length) gives, message for
//     message, the host decoder's outcomes on the three in turn, and its sums.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include <gradcomp/backend_memory.hpp>
#include <gradcomp/thrust/wire_decode.hpp>
#include <gradcomp/wire/decode.hpp>

#include "fuzz_common.hpp"

namespace {

using gradcomp::errc;
using gradcomp::span;
namespace wire = gradcomp::wire;
using backend = gradcomp::thrust_backend<thrust::system::cpp::tag>;
using space = gradcomp::memory_space_t<backend>;

struct rules {
  wire::device_accumulate_options opt;
  std::vector<bool> seen;
  errc section(const wire::section_header& s, double, bool& check_sums) {
    seen[s.tensor] = true;
    check_sums = opt.check_sums;
    return errc::ok;
  }
  errc complete() const {
    if (opt.every_tensor && std::find(seen.begin(), seen.end(), false) != seen.end()) return errc::missing_tensor;
    return errc::ok;
  }
};

template <class T>
bool bitwise_equal(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  for (std::size_t t = 0; t < a.size(); ++t)
    if (a[t].size() != b[t].size() ||
        (!a[t].empty() && std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(T)) != 0))
      return false;
  return true;
}

// An isgq section, or a qsgd_gamma one with positions a thread of its stream cannot find for
// itself, among those a walk of the headers reaches: the device decoder may stop there with
// unknown_coding (unless an earlier fault comes first, which it reports as the host).
bool host_only(span<const std::byte> msg) {
  bool in_order_only = false;
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) {
    const bool gamma = s.values == wire::value_coding::qsgd_gamma && s.indices != wire::index_coding::dense &&
                       s.indices != wire::index_coding::raw_u32;
    in_order_only = in_order_only || gamma || s.values == wire::value_coding::isgq;
  });
  return in_order_only;
}

// The message three times in one accumulate_all call (the second cut to half its length), in a
// buffer of exactly their bytes, on the accumulators `initial`: each outcome and the sums are the
// host decoder's on the three one after the other.
template <class T>
void run_batch(span<const std::byte> msg, const std::vector<std::vector<T>>& initial,
               const wire::device_accumulate_options& opt) {
  const backend b{};
  const std::size_t stride = std::max<std::size_t>(msg.size(), 1);
  // Inputs of odd length: an allgatherv's buffer, each message right after the one before (at
  // offsets); of even length: an allgather's slots of `stride` bytes.
  const bool packed = msg.size() % 2 == 1;
  const std::uint64_t lengths[3] = {msg.size(), msg.size() / 2, msg.size()};
  std::uint64_t layout[6] = {0, 0, 0, lengths[0], lengths[1], lengths[2]};  // offsets, then lengths
  std::vector<std::byte> host_slots;
  for (std::size_t r = 0; r < 3; ++r) {
    layout[r] = host_slots.size();
    host_slots.insert(host_slots.end(), msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(lengths[r]));
    if (!packed) host_slots.resize((r + 1) * stride);
  }
  std::vector<gradcomp::backend_buffer<T, backend>> acc;
  std::vector<span<T, space>> views;
  for (const auto& h : initial) {
    acc.push_back(gradcomp::allocate_buffer<T>(b, h.size()));
    FUZZ_CHECK(gradcomp::copy_to_backend(b, span<const T>(h.data(), h.size()), acc.back().view()).has_value());
    views.push_back(acc.back().view());
  }
  auto slots = gradcomp::allocate_buffer<std::byte>(b, host_slots.size());
  FUZZ_CHECK(gradcomp::copy_to_backend(b, span<const std::byte>(host_slots.data(), host_slots.size()), slots.view())
                 .has_value());
  auto where = gradcomp::allocate_buffer<std::uint64_t>(b, 6);
  FUZZ_CHECK(gradcomp::copy_to_backend(b, span<const std::uint64_t>(layout, 6), where.view()).has_value());
  const auto offsets = gradcomp::readonly(where.view()).first(3), length = gradcomp::readonly(where.view()).subspan(3, 3);
  auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(b, 6);
  wire::device_accumulator<T, backend> decoder(b, span<const span<T, space>>(views.data(), views.size()), stride, opt,
                                               {}, 3);
  const auto issued = packed ? decoder.accumulate_all(b, gradcomp::readonly(slots.view()), offsets, length, outcomes.view())
                             : decoder.accumulate_all(b, gradcomp::readonly(slots.view()), stride, length, outcomes.view());
  FUZZ_CHECK(issued.has_value());
  std::uint64_t out[6] = {};
  FUZZ_CHECK(gradcomp::copy_to_host(b, gradcomp::readonly(outcomes.view()), span<std::uint64_t>(out, 6)).has_value());
  std::vector<std::vector<T>> device(initial.size());
  for (std::size_t t = 0; t < initial.size(); ++t) {
    device[t].resize(initial[t].size());
    FUZZ_CHECK(gradcomp::copy_to_host(b, gradcomp::readonly(acc[t].view()), span<T>(device[t].data(), device[t].size()))
                   .has_value());
  }
  gradcomp::synchronize(b);

  auto host = initial;
  std::vector<span<T>> dest;
  for (auto& h : host) dest.emplace_back(h.data(), h.size());
  std::vector<std::uint32_t> scratch(64);
  for (std::size_t r = 0; r < 3; ++r) {
    rules rr{opt, std::vector<bool>(initial.size(), false)};
    const auto expected =
        wire::decode_accumulate<T>(msg.first(static_cast<std::size_t>(lengths[r])), span<const span<T>>(dest.data(), dest.size()),
                                   span<std::uint32_t>(scratch.data(), scratch.size()), rr);
    FUZZ_CHECK_ERRC(static_cast<errc>(out[2 * r]), expected ? errc::ok : expected.error());
    FUZZ_CHECK(out[2 * r + 1] == (expected ? expected->section_count : 0));
  }
  FUZZ_CHECK_MSG(bitwise_equal(device, host), "a batch's sums differ from decode_accumulate's in order");
}

template <class T>
void run(span<const std::byte> msg, std::vector<std::size_t> sizes, const wire::device_accumulate_options& opt) {
  const backend b{};
  std::vector<std::vector<T>> host(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (std::size_t i = 0; i < sizes[t]; ++i) host[t].push_back(static_cast<T>(0.25 * static_cast<double>(i % 13) - 1.0));
  const auto initial = host;

  std::vector<gradcomp::backend_buffer<T, backend>> acc;
  std::vector<span<T, space>> views;
  for (const auto& h : host) {
    acc.push_back(gradcomp::allocate_buffer<T>(b, h.size()));
    FUZZ_CHECK(gradcomp::copy_to_backend(b, span<const T>(h.data(), h.size()), acc.back().view()).has_value());
    views.push_back(acc.back().view());
  }
  // The message in a buffer of exactly its length: a read past it is a heap overflow.
  auto bytes = gradcomp::allocate_buffer<std::byte>(b, msg.size());
  FUZZ_CHECK(gradcomp::copy_to_backend(b, msg, bytes.view()).has_value());
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
  wire::device_accumulator<T, backend> decoder(b, span<const span<T, space>>(views.data(), views.size()),
                                               std::max<std::size_t>(msg.size(), 1), opt);
  FUZZ_CHECK(decoder.accumulate(b, gradcomp::readonly(bytes.view()), outcome.view()).has_value());
  std::uint64_t out[2] = {};
  FUZZ_CHECK(gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), span<std::uint64_t>(out, 2)).has_value());
  std::vector<std::vector<T>> device(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    device[t].resize(sizes[t]);
    FUZZ_CHECK(gradcomp::copy_to_host(b, gradcomp::readonly(acc[t].view()), span<T>(device[t].data(), sizes[t]))
                   .has_value());
  }
  gradcomp::synchronize(b);

  std::vector<span<T>> dest;
  for (auto& h : host) dest.emplace_back(h.data(), h.size());
  rules r{opt, std::vector<bool>(sizes.size(), false)};
  std::vector<std::uint32_t> scratch(64);
  const auto expected = wire::decode_accumulate<T>(msg, span<const span<T>>(dest.data(), dest.size()),
                                                   span<std::uint32_t>(scratch.data(), scratch.size()), r);
  const bool in_order_only = host_only(msg);
  if (!(in_order_only && static_cast<errc>(out[0]) == errc::unknown_coding))
    FUZZ_CHECK_ERRC(static_cast<errc>(out[0]), expected ? errc::ok : expected.error());
  if (static_cast<errc>(out[0]) == errc::ok) {
    FUZZ_CHECK(out[1] == expected->section_count);
    FUZZ_CHECK_MSG(bitwise_equal(device, host), "sums differ from decode_accumulate's");
  } else {
    FUZZ_CHECK(out[1] == 0);
    FUZZ_CHECK_MSG(bitwise_equal(device, initial), "a refused message changed an accumulator");
  }
  if (!host_only(msg) && !host_only(msg.first(msg.size() / 2))) run_batch<T>(msg, initial, opt);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const span<const std::byte> msg(reinterpret_cast<const std::byte*>(data), size);
  constexpr std::uint32_t max_tensors = 16, max_numel = 1u << 16;
  std::vector<std::size_t> sizes;
  std::vector<bool> named(max_tensors, false);
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) {
    if (s.tensor >= max_tensors || s.numel > max_numel || named[s.tensor]) return;
    if (sizes.size() <= s.tensor) sizes.resize(s.tensor + 1, 5);
    sizes[s.tensor] = s.numel;
    named[s.tensor] = true;
  });
  const unsigned variation = static_cast<unsigned>(size % 7);
  if (variation == 1 && !sizes.empty()) sizes.pop_back();
  if (variation == 2 && !sizes.empty()) ++sizes.front();
  wire::device_accumulate_options opt;
  opt.every_tensor = variation == 3;
  opt.check_sums = variation == 4 || variation == 5;
  if (variation >= 5) {
    run<double>(msg, sizes, opt);
  } else {
    run<float>(msg, sizes, opt);
  }
  return 0;
}
