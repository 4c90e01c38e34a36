// The aggregator is built from a receiver_layout: the one a compressor gives, or one built by
// hand, with the same result; bad layouts are refused.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "support/step.hpp"

using namespace gradcomp;

namespace {
std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 101) - 50.0f * scale;
  return v;
}
}  // namespace

TEST_CASE("an aggregator from a hand-built layout equals the one built from the compressor, bitwise") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(0.05);
  dgc_compressor<float> c(cfg);
  c.add_tensor("w", {20, 30});
  c.add_tensor("b", {30});
  const receiver_layout from_compressor = c.receiver();
  REQUIRE(from_compressor.tensors.size() == 2);
  CHECK(!from_compressor.tensors[0].dense);
  CHECK(from_compressor.tensors[0].max_kept == kept_count(600, 0.05));
  CHECK(from_compressor.tensors[1].dense);
  CHECK(from_compressor.tensors[1].momentum);   // dense: the receiver applies momentum
  CHECK(!from_compressor.tensors[0].momentum);  // momentum-corrected by the sender

  receiver_layout by_hand;
  by_hand.momentum = 0.9;
  by_hand.tensors.push_back({c.info(0), false, false, kept_count(600, 0.05)});
  by_hand.tensors.push_back({c.info(1), true, true, 0});
  aggregator<float> a(c), b(by_hand);
  for (int step = 0; step < 4; ++step) {
    const auto w = ramp(600, 0.01f * static_cast<float>(step + 1)), bias = ramp(30, 0.1f);
    REQUIRE(gradcomp_test::compress_step(c, {span<const float>(w.data(), w.size()), span<const float>(bias.data(), bias.size())}));
    const auto msg = wire::encode(span<const tensor_message<float>>(std::vector<tensor_message<float>>{c.message(0), c.message(1)}.data(), 2));
    a.begin();
    b.begin();
    REQUIRE(a.add(span<const std::byte>(msg.data(), msg.size())));
    REQUIRE(b.add(span<const std::byte>(msg.data(), msg.size())));
    REQUIRE(a.finish(1));
    REQUIRE(b.finish(1));
    for (std::size_t t = 0; t < 2; ++t)
      CHECK(std::memcmp(a.update(t).data(), b.update(t).data(), a.update(t).size_bytes()) == 0);
  }
}

TEST_CASE("an aggregator refuses a layout it cannot honour") {
  tensor_info info;
  info.name = "w";
  info.shape = {4, 4};
  info.numel = 16;
  receiver_layout ok;
  ok.tensors.push_back({info, false, false, 4});
  CHECK_NOTHROW(aggregator<float>{ok});
  auto bad = ok;
  bad.momentum = 1.0;
  CHECK_THROWS_AS(aggregator<float>{bad}, error);
  bad = ok;
  bad.kind = momentum_kind::none;
  CHECK_THROWS_AS(aggregator<float>{bad}, error);
  bad = ok;
  bad.tensors[0].info.numel = 15;  // not the product of the shape
  CHECK_THROWS_AS(aggregator<float>{bad}, error);
  bad = ok;
  bad.tensors[0].max_kept = 17;
  CHECK_THROWS_AS(aggregator<float>{bad}, error);
}
