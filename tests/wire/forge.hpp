// Writes wire messages byte by byte, without the library's encoder, so that tests can build
// messages the encoder never writes: any kind, role, tensor id, coding and section order,
// snapshots included.
#pragma once

#include <gradcomp/detail/bytes.hpp>
#include <gradcomp/detail/half.hpp>
#include <gradcomp/span.hpp>
#include <gradcomp/error.hpp>
#include <gradcomp/wire/crc32c.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/format.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradcomp_test {

// One section: dense (all `values`, `numel == kept`) or raw_u32 (`indices` and their values).
struct forged_section {
  gradcomp::wire::section_role role = gradcomp::wire::section_role::gradient;
  std::uint32_t tensor = 0;
  std::uint32_t numel = 0;
  bool dense = true;
  std::vector<std::uint32_t> indices;
  std::vector<double> values;
  gradcomp::wire::value_coding coding = gradcomp::wire::value_coding::fp32;
};

inline forged_section raw_section(gradcomp::wire::section_role role, std::uint32_t tensor,
                                  std::uint32_t numel, std::vector<std::uint32_t> indices,
                                  std::vector<double> values,
                                  gradcomp::wire::value_coding coding =
                                      gradcomp::wire::value_coding::fp32) {
  forged_section s;
  s.role = role;
  s.tensor = tensor;
  s.numel = numel;
  s.dense = false;
  s.indices = std::move(indices);
  s.values = std::move(values);
  s.coding = coding;
  return s;
}

inline forged_section dense_section(gradcomp::wire::section_role role, std::uint32_t tensor,
                                    std::vector<double> values,
                                    gradcomp::wire::value_coding coding =
                                        gradcomp::wire::value_coding::fp32) {
  const auto numel = static_cast<std::uint32_t>(values.size());
  forged_section s = raw_section(role, tensor, numel, {}, std::move(values), coding);
  s.dense = true;
  return s;
}

// A state section with the given words (fp64, tensor snapshot_state_tensor).
inline forged_section state_section(std::vector<double> words) {
  return dense_section(gradcomp::wire::section_role::state, gradcomp::wire::snapshot_state_tensor,
                       std::move(words), gradcomp::wire::value_coding::fp64);
}

// Valid words of the current layout: step 12, epoch 3, seed 2^32 + 7, momentum correction on,
// Nesterov off, sampled threshold.
inline std::vector<double> state_words() { return {12, 0, 3, 0, 7, 1, 1, 0, 0}; }
// Valid words of the legacy layout: step 12, epoch 3, seed 2^32 + 7.
inline std::vector<double> legacy_state_words() { return {12, 3, 7, 1}; }

inline void put_value(std::byte* p, gradcomp::wire::value_coding c, double v) {
  using namespace gradcomp::detail;
  switch (c) {
    case gradcomp::wire::value_coding::fp32: store_le<std::uint32_t>(p, float_bits(static_cast<float>(v))); break;
    case gradcomp::wire::value_coding::fp64: store_le<std::uint64_t>(p, double_bits(v)); break;
    case gradcomp::wire::value_coding::fp16: {
      std::uint16_t h = 0;
      (void)float_to_half(static_cast<float>(v), &h);
      store_le<std::uint16_t>(p, h);
      break;
    }
    case gradcomp::wire::value_coding::bf16: {
      std::uint16_t b = 0;
      (void)float_to_bf16(static_cast<float>(v), &b);
      store_le<std::uint16_t>(p, b);
      break;
    }
    default: break;  // the forger writes the float codings only
  }
}

// The message of kind `kind` holding `sections` in order, with a CRC-32C trailer if asked.
inline std::vector<std::byte> forge(gradcomp::wire::message_kind kind,
                                    const std::vector<forged_section>& sections,
                                    bool checksum = false) {
  namespace wire = gradcomp::wire;
  using gradcomp::detail::store_le;
  std::size_t total = wire::message_header_bytes + (checksum ? wire::checksum_bytes : 0);
  for (const auto& s : sections)
    total += wire::section_header_bytes + (s.dense ? 0 : 4 * s.indices.size()) +
             wire::value_bytes_per_element(s.coding) * s.values.size();
  std::vector<std::byte> b(total);
  for (int i = 0; i < 4; ++i) b[i] = static_cast<std::byte>(wire::magic[i]);
  store_le<std::uint16_t>(b.data() + 4, wire::format_version);
  store_le<std::uint16_t>(b.data() + 6, checksum ? wire::flag_checksum : 0);
  store_le<std::uint32_t>(b.data() + 8, static_cast<std::uint32_t>(kind));
  store_le<std::uint32_t>(b.data() + 12, static_cast<std::uint32_t>(sections.size()));
  store_le<std::uint64_t>(b.data() + 16, total);
  std::size_t at = wire::message_header_bytes;
  for (const auto& s : sections) {
    const std::size_t index_bytes = s.dense ? 0 : 4 * s.indices.size();
    const std::size_t vsize = wire::value_bytes_per_element(s.coding);
    const std::size_t bytes = wire::section_header_bytes + index_bytes + vsize * s.values.size();
    std::byte* p = b.data() + at;
    store_le<std::uint64_t>(p, bytes);
    store_le<std::uint32_t>(p + 8, s.tensor);
    store_le<std::uint32_t>(p + 12, s.numel);
    store_le<std::uint32_t>(p + 16, static_cast<std::uint32_t>(s.values.size()));
    p[20] = static_cast<std::byte>(s.dense ? wire::index_coding::dense : wire::index_coding::raw_u32);
    p[21] = static_cast<std::byte>(s.coding);
    p[22] = std::byte{0};
    p[23] = static_cast<std::byte>(s.role);
    store_le<std::uint64_t>(p + 24, index_bytes);
    for (std::size_t j = 0; j < s.indices.size() && !s.dense; ++j)
      store_le<std::uint32_t>(p + 32 + 4 * j, s.indices[j]);
    for (std::size_t j = 0; j < s.values.size(); ++j)
      put_value(p + 32 + index_bytes + vsize * j, s.coding, s.values[j]);
    at += bytes;
  }
  if (checksum) {
    const std::size_t body = total - wire::checksum_bytes;
    store_le<std::uint32_t>(b.data() + body,
                            gradcomp::crc32c(gradcomp::span<const std::byte>(b.data(), body)));
  }
  return b;
}

// Where a message's first section starts (right after the message header).
constexpr std::size_t kSection0 = gradcomp::wire::message_header_bytes;

// Writes `v` little-endian at byte `at`, as the format stores every field.
template <class U>
void put(std::vector<std::byte>& b, std::size_t at, U v) {
  gradcomp::detail::store_le<U>(b.data() + at, v);
}

// The validator's verdict on a whole message.
inline gradcomp::errc check(const std::vector<std::byte>& b) {
  return gradcomp::wire::validate(gradcomp::span<const std::byte>(b.data(), b.size())).error();
}

// Recomputes the CRC-32C trailer of a message that has one, after a deliberate change.
inline void reseal(std::vector<std::byte>& b) {
  const std::size_t body = b.size() - gradcomp::wire::checksum_bytes;
  gradcomp::detail::store_le<std::uint32_t>(
      b.data() + body, gradcomp::crc32c(gradcomp::span<const std::byte>(b.data(), body)));
}

}  // namespace gradcomp_test
