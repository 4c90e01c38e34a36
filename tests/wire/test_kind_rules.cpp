// The rules of each message kind (docs/wire_format.md, "Rules of each kind"): which roles,
// codings, tensor ids and section orders gradient messages and snapshots may have, and the exact
// error code for each broken rule, from validate, validate<T>, decode and detail::kind_rules.
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "wire/forge.hpp"

using namespace gradcomp;
using namespace gradcomp_test;
using wire::message_kind;
using wire::section_role;
using wire::value_coding;

namespace {

constexpr auto gradients = message_kind::gradients;
constexpr auto snapshot = message_kind::snapshot;
constexpr auto gradient = section_role::gradient;
constexpr auto residual = section_role::residual;
constexpr auto momentum = section_role::momentum;
constexpr auto receiver = section_role::receiver_momentum;
constexpr auto state = section_role::state;
constexpr auto factor = section_role::factor;
constexpr auto fp16 = value_coding::fp16;
constexpr auto bf16 = value_coding::bf16;
constexpr auto fp32 = value_coding::fp32;
constexpr auto fp64 = value_coding::fp64;

using gradcomp_test::check;

errc check(message_kind kind, const std::vector<forged_section>& sections) {
  const errc plain = check(forge(kind, sections));
  // The same verdict with a checksum, and for a float destination (no value here is beyond it).
  const auto crc = forge(kind, sections, true);
  CHECK(check(crc) == plain);
  CHECK(wire::validate<float>(span<const std::byte>(crc.data(), crc.size())).error() == plain);
  return plain;
}

forged_section grad(std::uint32_t tensor) { return dense_section(gradient, tensor, {1.0, -2.0}); }

forged_section res(std::uint32_t tensor, value_coding c = fp32) {
  return dense_section(residual, tensor, {0.5, 0.25, -1.0}, c);
}
forged_section mom(std::uint32_t tensor, value_coding c = fp32) {
  return dense_section(momentum, tensor, {0.125, 0.0, 2.0}, c);
}
forged_section fac(std::uint32_t tensor, value_coding c = fp32) {
  return dense_section(factor, tensor, {-0.5, 4.0}, c);
}
forged_section recv(std::uint32_t tensor, value_coding c = fp32) {
  return dense_section(receiver, tensor, {1.5, -0.5}, c);
}

}  // namespace

// ---- gradient messages ----

TEST_CASE("gradient message: only the gradient role is allowed") {
  CHECK(check(gradients, {grad(0), grad(1)}) == errc::ok);
  for (const auto role : {residual, momentum, receiver, state, factor}) {
    CAPTURE(wire::to_string(role));
    auto s = grad(1);
    s.role = role;
    CHECK(check(gradients, {grad(0), s}) == errc::section_not_allowed);
    CHECK(check(gradients, {s}) == errc::section_not_allowed);
  }
}

TEST_CASE("gradient message: a tensor carried twice is duplicate_tensor") {
  CHECK(check(gradients, {grad(3), grad(3)}) == errc::duplicate_tensor);
  CHECK(check(gradients, {grad(1), grad(5), grad(9), grad(5)}) == errc::duplicate_tensor);
  CHECK(check(gradients, {grad(9), grad(1), grad(5), grad(1)}) == errc::duplicate_tensor);
  CHECK(check(gradients, {grad(9), grad(1), grad(9)}) == errc::duplicate_tensor);
  // Sparse and dense sections of one tensor are still the same tensor.
  CHECK(check(gradients, {raw_section(gradient, 4, 10, {1, 2}, {1.0, 2.0}),
                          dense_section(gradient, 4, std::vector<double>(10, 0.5))}) ==
        errc::duplicate_tensor);
}

TEST_CASE("gradient message: tensor ids need not be ordered or contiguous") {
  CHECK(check(gradients, {grad(7), grad(2), grad(0xfffffffeu), grad(3), grad(0)}) == errc::ok);
  CHECK(check(gradients, {grad(0), grad(1000), grad(0xffffffffu)}) == errc::ok);
  CHECK(check(gradients, {}) == errc::ok);
}

TEST_CASE("gradient message: many sections in any order, without quadratic time") {
  // 20000 sections in descending order are accepted; repeating any id is refused.
  std::vector<forged_section> many;
  for (std::uint32_t i = 0; i < 20000; ++i)
    many.push_back(raw_section(gradient, 40000 - 2 * i, 8, {}, {}));
  CHECK(check(forge(gradients, many)) == errc::ok);
  many.push_back(raw_section(gradient, 40000 - 2 * 777, 8, {}, {}));
  CHECK(check(forge(gradients, many)) == errc::duplicate_tensor);
  // The same through kind_rules directly, with 200000 headers.
  wire::message_header h;
  h.kind = gradients;
  h.section_count = 200000;
  wire::detail::kind_rules rules(h);
  wire::section_header s;
  errc e = errc::ok;
  for (std::uint32_t i = 0; i < 200000 && e == errc::ok; ++i) {
    s.tensor = (i * 7919u) % 200003u;  // a permutation of distinct ids
    e = rules.section(s);
  }
  CHECK(e == errc::ok);
  CHECK(rules.finish() == errc::ok);
  s.tensor = (12345u * 7919u) % 200003u;
  CHECK(rules.section(s) == errc::duplicate_tensor);
}

TEST_CASE("gradient message from the encoder: increasing ids, valid") {
  const std::vector<float> v = {1.0f, 2.0f};
  const std::vector<tensor_message<float>> m = {{0, 2, true, {}, {v.data(), 2}},
                                                {5, 2, true, {}, {v.data(), 2}}};
  const auto b = wire::encode(span<const tensor_message<float>>(m.data(), m.size()));
  CHECK(check(b) == errc::ok);
}

// ---- rounds of a multi-round method ----

TEST_CASE("round messages: dense gradient sections, each tensor at most once") {
  for (const auto round : {message_kind::first_round, message_kind::second_round}) {
    CAPTURE(wire::to_string(round));
    CHECK(check(round, {grad(0), grad(1), grad(7)}) == errc::ok);
    CHECK(check(round, {}) == errc::ok);
    CHECK(check(round, {grad(2), grad(2)}) == errc::duplicate_tensor);
    // A sparse section is not a round's, though a gradient message takes it.
    const auto sparse = raw_section(gradient, 4, 10, {1, 2}, {1.0, 2.0});
    CHECK(check(gradients, {grad(0), sparse}) == errc::ok);
    CHECK(check(round, {grad(0), sparse}) == errc::section_not_allowed);
    for (const auto role : {residual, momentum, receiver, state}) {
      auto r = grad(1);
      r.role = role;
      CHECK(check(round, {grad(0), r}) == errc::section_not_allowed);
    }
  }
  // Kinds past the last one are unknown.
  auto unknown = forge(gradients, {grad(0)});
  unknown[8] = static_cast<std::byte>(wire::last_message_kind + 1);
  CHECK(check(unknown) == errc::unknown_coding);
}

TEST_CASE("round messages from the encoder: the kind asked for, dense sections only") {
  const std::vector<float> v = {1.0f, 2.0f};
  const std::vector<std::uint32_t> idx = {0};
  std::vector<tensor_message<float>> m = {{0, 2, true, {}, {v.data(), 2}}, {1, 2, true, {}, {v.data(), 2}}};
  std::vector<std::byte> out(256);
  const span<const tensor_message<float>> sections(m.data(), m.size());
  const auto n = wire::encode_round(message_kind::second_round, sections, {}, span<std::byte>(out.data(), out.size()));
  REQUIRE(n);
  const auto h = wire::validate(span<const std::byte>(out.data(), *n));
  REQUIRE(h);
  CHECK(h->kind == message_kind::second_round);
  // Only a round's kind, and no sparse section.
  CHECK(wire::encode_round(gradients, sections, {}, span<std::byte>(out.data(), out.size())).error() ==
        errc::invalid_argument);
  CHECK(wire::encode_round(snapshot, sections, {}, span<std::byte>(out.data(), out.size())).error() ==
        errc::invalid_argument);
  m[1] = {1, 2, false, {idx.data(), 1}, {v.data(), 1}};
  CHECK(wire::encode_round(message_kind::first_round, span<const tensor_message<float>>(m.data(), m.size()), {},
                           span<std::byte>(out.data(), out.size()))
            .error() == errc::invalid_argument);
}

// ---- compressor snapshots ----

TEST_CASE("compressor snapshot: the valid forms") {
  for (const auto c : {fp32, fp64}) {
    CAPTURE(wire::to_string(c));
    // With momentum correction: residual, momentum per tensor.
    CHECK(check(snapshot, {state_section(state_words()), res(0, c), mom(0, c), res(2, c), mom(2, c)}) ==
          errc::ok);
    // Without: residuals only.
    CHECK(check(snapshot, {state_section(state_words()), res(0, c), res(1, c), res(7, c)}) ==
          errc::ok);
    // A single compressed tensor, either way.
    CHECK(check(snapshot, {state_section(state_words()), res(4, c), mom(4, c)}) == errc::ok);
    CHECK(check(snapshot, {state_section(state_words()), res(4, c)}) == errc::ok);
  }
  // No compressed tensor at all: the state section alone.
  CHECK(check(snapshot, {state_section(state_words())}) == errc::ok);
}

TEST_CASE("compressor snapshot: the legacy 4-word state section is still readable") {
  CHECK(check(snapshot, {state_section(legacy_state_words()), res(0), mom(0), res(1), mom(1)}) ==
        errc::ok);
  CHECK(check(snapshot, {state_section(legacy_state_words())}) == errc::ok);
}

TEST_CASE("snapshot: the gradient role is not allowed") {
  auto g = res(1);
  g.role = gradient;
  CHECK(check(snapshot, {state_section(state_words()), res(0), g}) == errc::section_not_allowed);
  CHECK(check(snapshot, {g}) == errc::section_not_allowed);
  CHECK(check(snapshot, {recv(0), g}) == errc::section_not_allowed);
}

TEST_CASE("snapshot: every section uses the dense index coding") {
  const auto sparse_res = raw_section(residual, 0, 3, {0, 1, 2}, {1.0, 2.0, 3.0});
  CHECK(check(snapshot, {state_section(state_words()), sparse_res}) == errc::section_not_allowed);
  const auto sparse_recv = raw_section(receiver, 0, 3, {1}, {1.0});
  CHECK(check(snapshot, {sparse_recv}) == errc::section_not_allowed);
  // A state section with raw_u32 indices (all 9 positions) is not a state section.
  auto st = state_section(state_words());
  st.dense = false;
  st.indices = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(check(snapshot, {st}) == errc::section_not_allowed);
}

TEST_CASE("snapshot: the state section's own fields") {
  auto st = state_section(state_words());
  st.tensor = 0;
  CHECK(check(snapshot, {st, res(1)}) == errc::section_not_allowed);
  st = state_section(state_words());
  st.coding = fp32;
  CHECK(check(snapshot, {st}) == errc::section_not_allowed);
  st = state_section({1, 2, 3, 4, 5});  // neither 9 nor 4 words
  CHECK(check(snapshot, {st}) == errc::section_not_allowed);
  st = state_section({});
  CHECK(check(snapshot, {st}) == errc::section_not_allowed);
}

TEST_CASE("snapshot: the state section must come first, and only once") {
  CHECK(check(snapshot, {res(0), state_section(state_words())}) == errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), res(0), state_section(state_words())}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), state_section(state_words())}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {recv(0), state_section(state_words())}) == errc::section_not_allowed);
}

TEST_CASE("snapshot: residual and momentum sections need a leading state section") {
  CHECK(check(snapshot, {res(0), mom(0)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {res(0)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {mom(0)}) == errc::section_not_allowed);
}

TEST_CASE("snapshot: residual and momentum values are fp32 or fp64, all in one coding") {
  for (const auto c : {fp16, bf16}) {
    CAPTURE(wire::to_string(c));
    CHECK(check(snapshot, {state_section(state_words()), res(0, c)}) == errc::section_not_allowed);
    CHECK(check(snapshot, {state_section(state_words()), res(0), mom(0, c)}) ==
          errc::section_not_allowed);
  }
  CHECK(check(snapshot, {state_section(state_words()), res(0, fp32), res(1, fp64)}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), res(0, fp64), mom(0, fp32)}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), res(0), mom(0), res(1, fp64), mom(1, fp64)}) ==
        errc::section_not_allowed);
}

TEST_CASE("snapshot: residual tensor ids strictly increase") {
  CHECK(check(snapshot, {state_section(state_words()), res(3), res(1)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), res(3), mom(3), res(1), mom(1)}) ==
        errc::section_not_allowed);
}

TEST_CASE("snapshot: the same role and tensor twice is duplicate_tensor") {
  CHECK(check(snapshot, {state_section(state_words()), res(3), res(3)}) == errc::duplicate_tensor);
  CHECK(check(snapshot, {state_section(state_words()), res(3), res(5), res(3)}) ==
        errc::duplicate_tensor);
  CHECK(check(snapshot, {state_section(state_words()), res(3), mom(3), mom(3)}) ==
        errc::duplicate_tensor);
  CHECK(check(snapshot, {state_section(state_words()), res(3), mom(3), res(3), mom(3)}) ==
        errc::duplicate_tensor);
  // A momentum section naming an earlier tensor repeats that tensor's momentum.
  CHECK(check(snapshot, {state_section(state_words()), res(3), mom(3), res(5), mom(3)}) ==
        errc::duplicate_tensor);
  CHECK(check(snapshot, {recv(2), recv(2)}) == errc::duplicate_tensor);
  CHECK(check(snapshot, {recv(2), recv(4), recv(2)}) == errc::duplicate_tensor);
}

TEST_CASE("snapshot: a momentum section directly follows the residual of its tensor") {
  // After the state section, with no residual before it.
  CHECK(check(snapshot, {state_section(state_words()), mom(0), res(0)}) == errc::section_not_allowed);
  // Another tensor's id.
  CHECK(check(snapshot, {state_section(state_words()), res(0), mom(1)}) == errc::section_not_allowed);
  // Not directly after: another residual in between.
  CHECK(check(snapshot, {state_section(state_words()), res(0), res(1), mom(0)}) ==
        errc::section_not_allowed);
}

TEST_CASE("snapshot: either every residual has its momentum section or none has") {
  // The last residual lacks its momentum: seen at the end of the message.
  CHECK(check(snapshot, {state_section(state_words()), res(0), mom(0), res(1)}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), res(0), mom(0), res(1), res(2), mom(2)}) ==
        errc::section_not_allowed);
  // The first residual lacks it, a later one has it.
  CHECK(check(snapshot, {state_section(state_words()), res(0), res(1), mom(1)}) ==
        errc::section_not_allowed);
  // The check at the end, through kind_rules directly.
  const auto b = forge(snapshot, {state_section(state_words()), res(0), mom(0), res(1)});
  const span<const std::byte> msg(b.data(), b.size());
  wire::detail::kind_rules rules(*wire::peek(msg));
  (void)wire::for_each_section(msg, [&](const wire::section_header& s) {
    CHECK(rules.section(s) == errc::ok);
  });
  CHECK(rules.finish() == errc::section_not_allowed);
}

TEST_CASE("snapshot: factor sections close each tensor's group, every group with the same roles") {
  const auto st = state_section(state_words());
  for (const auto c : {fp32, fp64}) {
    CAPTURE(wire::to_string(c));
    // PowerSGD with error feedback: residual, factor per tensor; without: factors only.
    CHECK(check(snapshot, {st, res(0, c), fac(0, c), res(3, c), fac(3, c)}) == errc::ok);
    CHECK(check(snapshot, {st, fac(1, c), fac(2, c), fac(9, c)}) == errc::ok);
    // All three roles, in their order.
    CHECK(check(snapshot, {st, res(0, c), mom(0, c), fac(0, c), res(1, c), mom(1, c), fac(1, c)}) == errc::ok);
  }
  // Out of order within a group: a factor before its residual or momentum.
  CHECK(check(snapshot, {st, fac(0), res(0)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {st, res(0), fac(0), mom(0)}) == errc::section_not_allowed);
  // A group without a role the first one has, or with one it lacks.
  CHECK(check(snapshot, {st, res(0), fac(0), res(1), res(2)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {st, res(0), fac(0), fac(1)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {st, res(0), res(1), fac(1)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {st, fac(0), res(1), fac(1)}) == errc::section_not_allowed);
  // The last group lacks its factor: seen at the end of the message.
  CHECK(check(snapshot, {st, res(0), fac(0), res(1)}) == errc::section_not_allowed);
  // Tensor ids strictly increase from group to group; a repeat is duplicate_tensor.
  CHECK(check(snapshot, {st, fac(4), fac(2)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {st, res(1), fac(1), res(5), fac(1)}) == errc::duplicate_tensor);
  CHECK(check(snapshot, {st, fac(4), fac(4)}) == errc::duplicate_tensor);
  // One coding for every group section; never in an aggregator snapshot or a gradient message.
  CHECK(check(snapshot, {st, res(0, fp64), fac(0, fp32)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {st, fac(0, fp16)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {recv(0), fac(1)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {fac(1)}) == errc::section_not_allowed);
}

TEST_CASE("a role beyond factor is unknown_coding") {
  auto s = fac(0);
  s.role = static_cast<section_role>(6);
  CHECK(check(snapshot, {state_section(state_words()), s}) == errc::unknown_coding);
  CHECK(std::string(wire::to_string(factor)) == "factor");
}

TEST_CASE("snapshot: the state tensor id on any other section") {
  CHECK(check(snapshot, {state_section(state_words()), res(wire::snapshot_state_tensor)}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {recv(wire::snapshot_state_tensor)}) == errc::section_not_allowed);
}

// ---- aggregator snapshots ----

TEST_CASE("aggregator snapshot: receiver momentum sections in increasing tensor order") {
  CHECK(check(snapshot, {}) == errc::ok);  // no tensor with receiver-side momentum
  CHECK(check(snapshot, {recv(0), recv(2), recv(3)}) == errc::ok);
  CHECK(check(snapshot, {recv(0, fp64), recv(9, fp64)}) == errc::ok);
  CHECK(check(snapshot, {recv(2), recv(1)}) == errc::section_not_allowed);
}

TEST_CASE("aggregator snapshot: fp32 or fp64, one coding") {
  CHECK(check(snapshot, {recv(0, fp16)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {recv(0), recv(1, bf16)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {recv(0, fp32), recv(1, fp64)}) == errc::section_not_allowed);
}

TEST_CASE("snapshot: receiver momentum does not mix with residual or momentum") {
  CHECK(check(snapshot, {recv(0), res(1)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {recv(0), mom(1)}) == errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), res(0), recv(1)}) ==
        errc::section_not_allowed);
  CHECK(check(snapshot, {state_section(state_words()), recv(0)}) == errc::section_not_allowed);
}

// ---- the state words ----

TEST_CASE("state words of the current layout: integers in their ranges") {
  CHECK(check(snapshot, {state_section({4294967295.0, 4294967295.0, 4294967295.0, 4294967295.0,
                                        4294967295.0, 4294967295.0, 1, 1, 1})}) == errc::ok);
  CHECK(check(snapshot, {state_section({0, 0, 0, 0, 0, 0, 0, 0, 0})}) == errc::ok);
  const double bad[] = {-1.0, 0.5, 4294967296.0, -0.0, 1e20};
  for (std::size_t w = 0; w < wire::snapshot_state_words; ++w) {
    for (const double x : bad) {
      CAPTURE(w);
      CAPTURE(x);
      auto words = state_words();
      words[w] = x;
      CHECK(check(snapshot, {state_section(words), res(0), mom(0)}) == errc::malformed_payload);
    }
  }
  for (const std::size_t w : {wire::state_word::momentum_correction, wire::state_word::nesterov}) {
    CAPTURE(w);
    auto words = state_words();
    words[w] = 2.0;
    CHECK(check(snapshot, {state_section(words)}) == errc::malformed_payload);
  }
  // The method word: gradcomp's codes, then the codes of methods outside it from 65536.
  for (const double x : {6.0, 7.0, 65536.0, 4294967295.0}) {
    CAPTURE(x);
    auto words = state_words();
    words[wire::state_word::selection] = x;
    CHECK(check(snapshot, {state_section(words)}) == errc::ok);
  }
  for (const double x : {8.0, 65535.0, 65536.5}) {
    CAPTURE(x);
    auto words = state_words();
    words[wire::state_word::selection] = x;
    CHECK(check(snapshot, {state_section(words)}) == errc::malformed_payload);
  }
  // The method: DGC's two selections, EF-SignSGD, TernGrad, 1-bit SGD, QSGD, AdaComp and PowerSGD,
  // nothing beyond.
  for (std::uint32_t m = 0; m <= wire::snapshot_selection_count; ++m) {
    CAPTURE(m);
    auto words = state_words();
    words[wire::state_word::selection] = m;
    CHECK(check(snapshot, {state_section(words)}) ==
          (m < wire::snapshot_selection_count ? errc::ok : errc::malformed_payload));
  }
  CHECK(wire::snapshot_selection_count == 8);
}

TEST_CASE("state words of the legacy layout: step and epoch below 2^53, seed halves below 2^32") {
  const double two53 = 9007199254740992.0;
  CHECK(check(snapshot, {state_section({two53 - 1, two53 - 1, 4294967295.0, 4294967295.0})}) ==
        errc::ok);
  const std::vector<std::vector<double>> bad = {
      {two53, 0, 0, 0}, {0, two53, 0, 0}, {0, 0, 4294967296.0, 0}, {0, 0, 0, 4294967296.0},
      {1.5, 0, 0, 0},   {0, -1, 0, 0},    {0, 0, -0.0, 0},         {0, 0, 0, 0.25}};
  for (const auto& words : bad) {
    CAPTURE(words[0]);
    CHECK(check(snapshot, {state_section(words)}) == errc::malformed_payload);
  }
}

TEST_CASE("a non-finite state word is a non-finite value") {
  auto words = state_words();
  words[0] = std::numeric_limits<double>::infinity();
  CHECK(check(snapshot, {state_section(words)}) == errc::non_finite_input);
}

// ---- order of the checks (advisory for other decoders; gradcomp's own) ----

TEST_CASE("per section: header, then the kind's rules, then the payload") {
  // A repeated tensor whose values are also not finite: the rule is checked first.
  auto second = grad(0);
  second.values[0] = std::numeric_limits<double>::quiet_NaN();
  CHECK(check(gradients, {grad(0), second}) == errc::duplicate_tensor);
  // A damaged payload in an earlier section comes before a rule broken by a later one.
  auto first = grad(0);
  first.values[1] = std::numeric_limits<double>::infinity();
  CHECK(check(gradients, {first, grad(0)}) == errc::non_finite_input);
  // A section header error comes before the rules of the same section.
  auto b = forge(gradients, {grad(0), grad(0)});
  b[wire::message_header_bytes + 40 + 21] = std::byte{9};  // second section: unknown value coding
  CHECK(check(b) == errc::unknown_coding);
}

// ---- where the rules apply ----

TEST_CASE("decode<T> applies the kind's rules; for_each_section does not") {
  const auto b = forge(gradients, {grad(2), grad(2)});
  const span<const std::byte> msg(b.data(), b.size());
  CHECK_THROWS_AS(wire::decode<float>(msg), gradcomp::error);
  try {
    (void)wire::decode<double>(msg);
    FAIL("decode accepted a tensor carried twice");
  } catch (const gradcomp::error& e) {
    CHECK(e.code() == errc::duplicate_tensor);
  }
  int count = 0;
  CHECK(wire::for_each_section(msg, [&](const wire::section_header&) { ++count; }));
  CHECK(count == 2);
  CHECK(wire::peek(msg));
}

TEST_CASE("validate<T>: an fp64 value beyond float's range") {
  const auto b = forge(gradients, {dense_section(gradient, 0, {1.0, 1e300}, fp64)});
  const span<const std::byte> msg(b.data(), b.size());
  CHECK(wire::validate(msg));  // binary64
  CHECK(wire::validate<double>(msg));
  CHECK(wire::validate<float>(msg).error() == errc::value_out_of_range);
  CHECK_THROWS_AS(wire::decode<float>(msg), gradcomp::error);
  CHECK(wire::decode<double>(msg).size() == 1);
  // In a snapshot too: a residual beyond float refuses the float destination only.
  const auto s = forge(snapshot, {state_section(state_words()), dense_section(residual, 0, {-1e300}, fp64)});
  CHECK(wire::validate(span<const std::byte>(s.data(), s.size())));
  CHECK(wire::validate<float>(span<const std::byte>(s.data(), s.size())).error() ==
        errc::value_out_of_range);
}

TEST_CASE("kind_rules reports the codes of validate, section by section") {
  wire::message_header h;
  h.kind = snapshot;
  h.section_count = 3;
  wire::detail::kind_rules rules(h);
  wire::section_header s;
  s.role = state;
  s.tensor = wire::snapshot_state_tensor;
  s.numel = s.kept = wire::snapshot_state_words;
  s.values = fp64;
  CHECK(rules.section(s) == errc::ok);
  s.role = residual;
  s.tensor = 0;
  s.numel = s.kept = 5;
  s.values = fp32;
  CHECK(rules.section(s) == errc::ok);
  s.role = momentum;
  CHECK(rules.section(s) == errc::ok);
  CHECK(rules.finish() == errc::ok);
  s.role = gradient;
  CHECK(rules.section(s) == errc::section_not_allowed);
}
