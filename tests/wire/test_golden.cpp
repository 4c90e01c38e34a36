// Frozen golden messages: every file under tests/wire/golden/ must keep decoding to its recorded
// content, re-encoding that content must give the same bytes, and the worked examples in
// docs/wire_format.md must list exactly these bytes.
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "wire/golden_messages.hpp"

using namespace gradcomp;
using namespace gradcomp_test;

namespace {

// The repository root, from this file's path (.../tests/wire/test_golden.cpp).
std::string source_dir() {
  const std::string f = __FILE__;
  const auto at = f.rfind("tests");
  return at == 0 || at == std::string::npos ? std::string(".") : f.substr(0, at - 1);
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

std::vector<std::byte> encode_golden(const golden_message& g) {
  const auto msgs = as_messages(g);
  const span<const tensor_message<float>> sections(msgs.data(), msgs.size());
  if (!wire::is_round(g.kind)) return wire::encode(sections, g.options);
  std::vector<std::byte> out(wire::max_encoded_bytes(sections, g.options).value());
  out.resize(wire::encode_round(g.kind, sections, g.options, span<std::byte>(out.data(), out.size())).value());
  return out;
}

// Bytes listed in a ```text block that follows a line naming `file` in the spec: every line of the
// form "OFFSET: XX XX ...  # comment" contributes its hex pairs.
std::vector<std::byte> spec_bytes(const std::string& spec, const std::string& file) {
  const std::string marker = "golden: " + file;
  const auto at = spec.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, "docs/wire_format.md has no example for " << file);
  const auto open = spec.find("```text", at);
  const auto close = spec.find("```", open + 7);
  std::istringstream block(spec.substr(open + 7, close - open - 7));
  std::vector<std::byte> out;
  for (std::string line; std::getline(block, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string hex = line.substr(colon + 1, line.find('#') - colon - 1);
    std::istringstream words(hex);
    for (std::string w; words >> w;) out.push_back(static_cast<std::byte>(std::stoul(w, nullptr, 16)));
  }
  return out;
}

}  // namespace

TEST_CASE("golden messages decode to their recorded content and re-encode byte for byte") {
  const std::string dir = source_dir() + "/tests/wire/golden/";
  const bool update = std::getenv("GRADCOMP_WRITE_GOLDENS") != nullptr;
  for (const auto& g : golden_messages()) {
    CAPTURE(g.file);
    const auto fresh = encode_golden(g);
    if (update) {
      std::ofstream(dir + g.file, std::ios::binary)
          .write(reinterpret_cast<const char*>(fresh.data()), static_cast<std::streamsize>(fresh.size()));
    }
    const auto bytes = read_file(dir + g.file);
    CHECK(bytes == fresh);
    const span<const std::byte> msg(bytes.data(), bytes.size());
    const auto h = wire::validate(msg);
    REQUIRE(h);
    CHECK(h->version == 1);
    CHECK(h->kind == g.kind);
    CHECK(h->section_count == g.sections.size());
    CHECK(h->has_checksum() == g.options.checksum);
    const auto decoded = wire::decode<float>(msg);
    REQUIRE(decoded.size() == g.sections.size());
    for (std::size_t s = 0; s < decoded.size(); ++s) {
      const auto& want = g.sections[s];
      CHECK(decoded[s].header.tensor == want.tensor);
      CHECK(decoded[s].header.numel == want.numel);
      CHECK(decoded[s].header.parameters.columns == want.columns);
      CHECK(decoded[s].header.parameters.bucket == want.bucket);
      CHECK(decoded[s].header.parameters.levels == want.levels);
      CHECK(decoded[s].indices == want.indices);
      // The recorded values are exactly representable in the golden's value coding, except the
      // fp64 golden, whose values are floats widened exactly.
      CHECK(decoded[s].values == want.values);
    }
  }
}

TEST_CASE("the worked examples in docs/wire_format.md are the golden bytes") {
  std::ifstream in(source_dir() + "/docs/wire_format.md");
  REQUIRE(in.good());
  const std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& g : golden_messages()) {
    CAPTURE(g.file);
    CHECK(spec_bytes(spec, g.file) == read_file(source_dir() + "/tests/wire/golden/" + g.file));
  }
}
