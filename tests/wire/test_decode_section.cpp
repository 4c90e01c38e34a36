// decode_section does not trust the section header it is given: a header that differs from the
// one in the message, in any field, is refused with invalid_argument before anything is read
// past the message or written. The messages live in exact-size heap buffers, so that
// AddressSanitizer builds catch any read outside them.
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "wire/forge.hpp"

using namespace gradcomp;
using namespace gradcomp_test;
using wire::index_coding;
using wire::section_header;

namespace {

// A message of two sections (raw_u32 then dense), with a checksum trailer, in a heap block of
// exactly its size.
struct heap_message {
  std::unique_ptr<std::byte[]> bytes;
  std::size_t size = 0;
  std::vector<section_header> sections;

  explicit heap_message(index_coding first = index_coding::raw_u32) {
    const std::vector<std::uint32_t> idx = {1, 4, 6};
    const std::vector<float> val = {1.0f, -2.0f, 3.0f};
    const std::vector<float> dense = {0.5f, 0.25f, 4.0f, 8.0f};
    const std::vector<tensor_message<float>> m = {{0, 8, false, {idx.data(), 3}, {val.data(), 3}},
                                                  {1, 4, true, {}, {dense.data(), 4}}};
    wire::encode_options opt;
    opt.indices = first;
    opt.checksum = true;
    const auto v = wire::encode(span<const tensor_message<float>>(m.data(), m.size()), opt);
    size = v.size();
    bytes.reset(new std::byte[size]);
    std::copy(v.begin(), v.end(), bytes.get());
    REQUIRE(wire::for_each_section(msg(), [&](const section_header& s) { sections.push_back(s); }));
    REQUIRE(sections.size() == 2);
  }
  span<const std::byte> msg() const { return span<const std::byte>(bytes.get(), size); }
};

errc decode_with(const heap_message& m, const section_header& s) {
  // Outputs large enough for any kept a forged header may claim, filled with a pattern.
  std::vector<std::uint32_t> idx(4096, 77u);
  std::vector<float> val(4096, 7.0f);
  const auto r = wire::decode_section<float>(m.msg(), s, span<std::uint32_t>(idx.data(), idx.size()),
                                             span<float>(val.data(), val.size()));
  if (!r) {
    CHECK(idx == std::vector<std::uint32_t>(4096, 77u));
    CHECK(val == std::vector<float>(4096, 7.0f));
  }
  return r.error();
}

}  // namespace

TEST_CASE("decode_section accepts the headers for_each_section gives") {
  for (const auto ic : {index_coding::raw_u32, index_coding::delta_varint, index_coding::rice,
                        index_coding::bitmap}) {
    CAPTURE(wire::to_string(ic));
    heap_message m(ic);
    for (const auto& s : m.sections) CHECK(decode_with(m, s) == errc::ok);
  }
}

TEST_CASE("decode_section refuses a header that lies about any field") {
  heap_message m;
  const section_header good = m.sections[0];
  const section_header dense = m.sections[1];
  const std::uint64_t big = std::numeric_limits<std::uint64_t>::max();
  const std::vector<std::pair<const char*, std::function<void(section_header&)>>> lies = {
      {"offset past the message", [&](section_header& s) { s.offset = m.size + 100; }},
      {"offset far past the message", [&](section_header& s) { s.offset = big - 8; }},
      {"offset inside the message header", [&](section_header& s) { s.offset = 0; }},
      {"offset inside a section", [&](section_header& s) { s.offset += 4; }},
      {"offset of the other section", [&](section_header& s) { s.offset = dense.offset; }},
      {"offset on the checksum", [&](section_header& s) { s.offset = m.size - 4; }},
      {"bytes larger", [&](section_header& s) { s.bytes += 64; }},
      {"bytes huge", [&](section_header& s) { s.bytes = big; }},
      {"bytes smaller", [&](section_header& s) { s.bytes -= 4; }},
      {"index_bytes larger", [&](section_header& s) { s.index_bytes += 4096; }},
      {"index_bytes huge", [&](section_header& s) { s.index_bytes = big - 16; }},
      {"value_bytes larger", [&](section_header& s) { s.value_bytes += 4096; }},
      {"kept larger", [&](section_header& s) { s.kept = 4000; }},
      {"kept smaller", [&](section_header& s) { s.kept -= 1; }},
      {"numel larger", [&](section_header& s) { s.numel = 0xffffffffu; }},
      {"numel smaller", [&](section_header& s) { s.numel = 2; }},
      {"tensor", [&](section_header& s) { s.tensor = 9; }},
      {"index coding", [&](section_header& s) { s.indices = index_coding::bitmap; }},
      {"value coding", [&](section_header& s) { s.values = wire::value_coding::fp64; }},
      {"index parameter", [&](section_header& s) { s.index_parameter = 3; }},
      {"role", [&](section_header& s) { s.role = wire::section_role::residual; }},
  };
  for (const auto& lie : lies) {
    CAPTURE(lie.first);
    section_header s = good;
    lie.second(s);
    CHECK(decode_with(m, s) == errc::invalid_argument);
  }
  // The dense section's header claiming indices, and the sparse one claiming to be dense.
  section_header s = dense;
  s.indices = index_coding::raw_u32;
  CHECK(decode_with(m, s) == errc::invalid_argument);
  s = good;
  s.indices = index_coding::dense;
  s.index_bytes = 0;
  CHECK(decode_with(m, s) == errc::invalid_argument);
  // A default-constructed header describes nothing in any message.
  CHECK(decode_with(m, section_header{}) == errc::invalid_argument);
}

TEST_CASE("decode_section checks the buffer is a message before reading a section in it") {
  heap_message m;
  const section_header s = m.sections[0];
  std::vector<std::uint32_t> idx(8);
  std::vector<float> val(8);
  // A buffer cut short: the frame no longer matches its declared length.
  const span<const std::byte> cut(m.bytes.get(), m.size - 1);
  CHECK(wire::decode_section<float>(cut, s, span<std::uint32_t>(idx.data(), 8),
                                    span<float>(val.data(), 8))
            .error() == errc::truncated);
  CHECK(wire::decode_section<float>(span<const std::byte>(), s, span<std::uint32_t>(idx.data(), 8),
                                    span<float>(val.data(), 8))
            .error() == errc::truncated);
  // A header from another message whose section lies elsewhere.
  heap_message other(index_coding::bitmap);
  CHECK(decode_with(m, other.sections[0]) == errc::invalid_argument);
}

TEST_CASE("decode_section: outputs too small, once the header is known to be true") {
  heap_message m;
  std::vector<std::uint32_t> idx(2);
  std::vector<float> val(3);
  CHECK(wire::decode_section<float>(m.msg(), m.sections[0], span<std::uint32_t>(idx.data(), 2),
                                    span<float>(val.data(), 3))
            .error() == errc::output_too_small);
  section_header lie = m.sections[0];
  lie.kept = 1;  // would fit the outputs, but is not the message's header
  CHECK(wire::decode_section<float>(m.msg(), lie, span<std::uint32_t>(idx.data(), 2),
                                    span<float>(val.data(), 3))
            .error() == errc::invalid_argument);
}
