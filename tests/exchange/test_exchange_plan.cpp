// The decisions every exchange makes the same way (gradcomp/comm/exchange_plan.hpp), without a
// communication library: the path, the shares of a dense reduction, their sum in rank order, the
// agreement on the lowest failure; and the aggregator's side of the dense path (sum, set_added).
#include <gradcomp/comm/exchange_plan.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/conformance.hpp"

namespace {

using gradcomp::errc;
using gradcomp::comm::exchange_path;
using gradcomp::comm::choose_path;
namespace plan = gradcomp::comm::detail;

}  // namespace

TEST_CASE("exchange plan: the automatic path is the allreduce exactly when the messages exceed twice the dense bytes") {
  CHECK(choose_path(exchange_path::automatic, 2000, 1000, 4) == exchange_path::allgather);
  CHECK(choose_path(exchange_path::automatic, 2001, 1000, 4) == exchange_path::allreduce);
  CHECK(choose_path(exchange_path::automatic, 1u << 30, 1000, 1) == exchange_path::allgather);  // nothing moves
  CHECK(choose_path(exchange_path::automatic, ~std::uint64_t(0), ~std::uint64_t(0) / 2 + 1, 8) ==
        exchange_path::allgather);  // twice the dense bytes is beyond any total
  CHECK(choose_path(exchange_path::allgather, 1u << 30, 1, 8) == exchange_path::allgather);
  CHECK(choose_path(exchange_path::allreduce, 0, 1u << 30, 8) == exchange_path::allreduce);
}

TEST_CASE("exchange plan: the shares of a dense reduction cover every element once, as even as can be") {
  for (const std::uint64_t n : {0ull, 1ull, 3ull, 7ull, 4096ull, 4099ull, 1000003ull})
    for (const int ranks : {1, 2, 3, 4, 7, 8}) {
      CAPTURE(n);
      CAPTURE(ranks);
      CHECK(plan::share_begin(n, ranks, 0) == 0);
      CHECK(plan::share_begin(n, ranks, ranks) == n);
      for (int r = 0; r < ranks; ++r) {
        const std::uint64_t len = plan::share_begin(n, ranks, r + 1) - plan::share_begin(n, ranks, r);
        CHECK(len >= n / static_cast<std::uint64_t>(ranks));
        CHECK(len <= n / static_cast<std::uint64_t>(ranks) + 1);
      }
    }
}

TEST_CASE("exchange plan: announcements agree, or name the lowest rank without a message or with other sizes") {
  std::vector<plan::announcement> a(4);
  for (auto& x : a) x.elements = 100;
  int failed = 0;
  CHECK(plan::check_announcements(a, failed) == errc::ok);
  CHECK(failed == -1);
  a[3].elements = 101;
  a[2].status = static_cast<std::uint32_t>(errc::non_finite_input);
  CHECK(plan::check_announcements(a, failed) == errc::peer_failed);
  CHECK(failed == 2);
  a[2].status = 0;
  CHECK(plan::check_announcements(a, failed) == errc::layout_mismatch);
  CHECK(failed == 3);

  // MPI counts in int: its limit is 2^31 - 1 bytes in one collective; NCCL's is far above.
  const std::uint64_t int_limit = 0x7fffffffu, wide_limit = ~std::uint64_t(0);
  std::vector<std::uint64_t> counts, displs;
  a[0].bytes = 10;
  a[1].bytes = 0;
  a[2].bytes = 20;
  a[3].bytes = 5;
  CHECK(plan::gather_layout(a, int_limit, counts, displs) == errc::ok);
  CHECK(counts == std::vector<std::uint64_t>{10, 0, 20, 5});
  CHECK(displs == std::vector<std::uint64_t>{0, 10, 10, 30});
  a[1].bytes = 0x7fffffffu - 35;
  CHECK(plan::gather_layout(a, int_limit, counts, displs) == errc::ok);
  a[1].bytes += 1;
  CHECK(plan::gather_layout(a, int_limit, counts, displs) == errc::size_overflow);
  std::vector<std::uint64_t> wide_counts, wide_displs;
  CHECK(plan::gather_layout(a, wide_limit, wide_counts, wide_displs) == errc::ok);
  CHECK(wide_displs[3] == 10 + a[1].bytes + 20);
}

TEST_CASE("exchange plan: failure keys order by rank, then by error code") {
  const auto k = plan::failure_key(3, errc::checksum_mismatch);
  CHECK(plan::failure_rank(k) == 3);
  CHECK(plan::failure_code(k) == errc::checksum_mismatch);
  CHECK(plan::failure_key(2, errc::state_overflow) < plan::failure_key(3, errc::ok));
  CHECK(plan::failure_key(3, errc::non_finite_input) < plan::failure_key(3, errc::state_overflow));
  CHECK(plan::failure_key(1 << 30, errc::comm_error) < plan::no_failure);
}

TEST_CASE("exchange plan: a share is summed in rank order, and the first rank that leaves the finite range is named") {
  const int ranks = 5;
  const std::uint64_t len = 37;
  std::vector<float> in(static_cast<std::size_t>(ranks) * len), out(len);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<float>((i * 2654435761u) % 1000003) * (i % 3 == 0 ? 1e-7f : 1e3f) * (i % 2 ? -1.0f : 1.0f);
  CHECK(plan::sum_share_in_rank_order(in.data(), out.data(), len, ranks) == plan::no_failure);
  for (std::uint64_t j = 0; j < len; ++j) {
    float s = in[j];
    for (int r = 1; r < ranks; ++r) s += in[static_cast<std::uint64_t>(r) * len + j];
    CHECK(std::memcmp(&s, &out[j], sizeof s) == 0);
  }
  // Another order gives other bits for these values: the test can tell.
  bool differs = false;
  for (std::uint64_t j = 0; j < len; ++j) {
    float s = in[static_cast<std::uint64_t>(ranks - 1) * len + j];
    for (int r = ranks - 2; r >= 0; --r) s += in[static_cast<std::uint64_t>(r) * len + j];
    differs = differs || std::memcmp(&s, &out[j], sizeof s) != 0;
  }
  CHECK(differs);

  const float big = std::numeric_limits<float>::max() / 1.5f;
  auto key = [&](std::vector<float> v) { return plan::sum_share_in_rank_order(v.data(), out.data(), len, ranks); };
  std::vector<float> v = in;
  v[3 * len + 5] = big;
  v[4 * len + 5] = big;  // overflows when rank 4's value is added
  v[2 * len + 9] = std::numeric_limits<float>::quiet_NaN();
  CHECK(key(v) == plan::failure_key(2, errc::non_finite_input));
  v[2 * len + 9] = 1.0f;
  CHECK(key(v) == plan::failure_key(4, errc::state_overflow));
  v[1 * len + 20] = -std::numeric_limits<float>::infinity();
  CHECK(key(v) == plan::failure_key(1, errc::non_finite_input));
  v[0 * len + 36] = std::numeric_limits<float>::infinity();
  CHECK(key(v) == plan::failure_key(0, errc::non_finite_input));
}

TEST_CASE("aggregator: sums formed outside add, declared with set_added, give the update add would") {
  gradcomp::dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.05);
  using worker = gradcomp_test::conformance_worker<float, gradcomp::cpu_backend>;
  worker a(cfg, gradcomp::cpu_backend{}), b(cfg, gradcomp::cpu_backend{});
  gradcomp::aggregator<float> added(a.compressor), formed(a.compressor), other(a.compressor);
  for (std::size_t step = 0; step < 3; ++step) {
    a.load(gradcomp_test::conformance_gradients<float>(step, 0));
    b.load(gradcomp_test::conformance_gradients<float>(step, 1));
    REQUIRE(a.compressor.compress(a.views()));
    REQUIRE(b.compressor.compress(b.views()));
    const auto ma = a.encode(), mb = b.encode();
    REQUIRE(ma);
    REQUIRE(mb);
    const gradcomp::span<const std::byte> va(ma->data(), ma->size()), vb(mb->data(), mb->size());
    added.begin();
    REQUIRE(added.add(va));
    REQUIRE(added.add(vb));
    REQUIRE(added.finish(2));
    // Each message into its own aggregator, the second's sums added into the first's by hand.
    formed.begin();
    other.begin();
    REQUIRE(formed.add(va));
    REQUIRE(other.add(vb));
    for (std::size_t t = 0; t < formed.num_tensors(); ++t) {
      const auto s = formed.sum(t);
      const auto o = other.update(t);
      for (std::size_t i = 0; i < s.size(); ++i) s[i] += o[i];
    }
    CHECK(formed.finish(2).error() == errc::invalid_argument);  // not yet declared
    REQUIRE(formed.set_added(2));
    REQUIRE(formed.finish(2));
    for (std::size_t t = 0; t < formed.num_tensors(); ++t)
      CHECK(std::memcmp(formed.update(t).data(), added.update(t).data(), added.update(t).size() * sizeof(float)) == 0);
  }
  formed.begin();
  formed.sum(1)[7] = std::numeric_limits<float>::infinity();
  CHECK(formed.set_added(1).error() == errc::state_overflow);
  CHECK(formed.finish(1).error() == errc::invalid_argument);
  CHECK(formed.set_added(0).error() == errc::invalid_argument);
}
