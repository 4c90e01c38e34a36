// Helpers of the quantised value codings' tests: a message of one section, encoded and checked.
#pragma once

#include <gradcomp/wire/tensor_message.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <cstddef>
#include <cstring>
#include <vector>

namespace gradcomp_test {

// The message of the one section `m` with options `o`, or the encoder's error.
template <class T>
gradcomp::result<std::vector<std::byte>> encode_one(const gradcomp::tensor_message<T>& m,
                                                    const gradcomp::wire::encode_options& o) {
  using gradcomp::span;
  std::vector<std::byte> out(
      gradcomp::wire::max_encoded_bytes(span<const gradcomp::tensor_message<T>>(&m, 1), o).value());
  const auto n = gradcomp::wire::encode(span<const gradcomp::tensor_message<T>>(&m, 1), o,
                                        span<std::byte>(out.data(), out.size()));
  if (!n) return gradcomp::fail(n.error());
  out.resize(*n);
  return out;
}

// A dense section of tensor 0 holding v.
template <class T>
gradcomp::tensor_message<T> dense(const std::vector<T>& v) {
  gradcomp::tensor_message<T> m;
  m.numel = v.size();
  m.dense = true;
  m.values = gradcomp::span<const T>(v.data(), v.size());
  return m;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Offset of the value payload of the only section of a dense message.
constexpr std::size_t dense_payload = gradcomp::wire::message_header_bytes + gradcomp::wire::section_header_bytes;

// validate<float> of a message held in a vector.
inline gradcomp::result<gradcomp::wire::message_header> validate_bytes(const std::vector<std::byte>& b) {
  return gradcomp::wire::validate<float>(gradcomp::span<const std::byte>(b.data(), b.size()));
}

// `good` with the 32-bit little-endian word at `at` replaced by `bits`.
inline std::vector<std::byte> with_word(std::vector<std::byte> good, std::size_t at, std::uint32_t bits) {
  for (int i = 0; i < 4; ++i) good[at + i] = static_cast<std::byte>(bits >> (8 * i));
  return good;
}

}  // namespace gradcomp_test
