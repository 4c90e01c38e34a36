// tensor_message::coding: a section names its own value coding, whatever the encoder's options.
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace wire = gradcomp::wire;
using gradcomp::span;
using gradcomp::tensor_message;

TEST_CASE("a section's own value coding replaces the options', in the message and in the size bound") {
  const std::vector<float> signs = {0.5f, -0.5f, 0.5f};
  const std::vector<float> plain = {1.0f, 2.0f};
  std::vector<tensor_message<float>> ms(2);
  ms[0].tensor = 0;
  ms[0].numel = 3;
  ms[0].dense = true;
  ms[0].values = span<const float>(signs.data(), signs.size());
  ms[0].coding = wire::value_coding::scaled_sign;
  ms[1].tensor = 1;
  ms[1].numel = 2;
  ms[1].dense = true;
  ms[1].values = span<const float>(plain.data(), plain.size());
  wire::encode_options opt;
  opt.dense_values = wire::value_coding::fp16;
  const span<const tensor_message<float>> sections(ms.data(), ms.size());
  const auto bytes = wire::encode(sections, opt);
  CHECK(bytes.size() == *wire::encoded_bytes(sections, opt));
  CHECK(bytes.size() <= *wire::max_encoded_bytes(sections, opt));
  const auto d = wire::decode<float>(span<const std::byte>(bytes.data(), bytes.size()));
  REQUIRE(d.size() == 2);
  CHECK(d[0].header.values == wire::value_coding::scaled_sign);
  CHECK(d[0].values == signs);
  CHECK(d[1].header.values == wire::value_coding::fp16);
  CHECK(d[1].values == plain);
  // A coding the section cannot hold is refused, as the options' would be.
  ms[1].coding = wire::value_coding::scaled_sign;
  std::vector<std::byte> out(*wire::max_encoded_bytes(sections, opt));
  CHECK(wire::encode(sections, opt, span<std::byte>(out.data(), out.size())).error() ==
        gradcomp::errc::value_out_of_range);
}
