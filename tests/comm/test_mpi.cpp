// comm::mpi_exchange on the ranks of MPI_COMM_WORLD (2 and 4 under ctest): every rank receives
// every message in rank order, the aggregated update is bitwise the one a single process computes
// from the same messages, and a missing, damaged or foreign message is the same error on every
// rank, with the next step unaffected.
#include <gradcomp/comm/mpi.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/conformance.hpp"
#include "support/inputs.hpp"

namespace {

using gradcomp::errc;
using gradcomp::comm::mpi_exchange;
using worker = gradcomp_test::conformance_worker<float, gradcomp::cpu_backend>;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

gradcomp::span<const std::byte> view(const std::vector<std::byte>& v) {
  return gradcomp::span<const std::byte>(v.data(), v.size());
}

// A value every rank gives, gathered: true when it is the same on every rank.
bool same_on_every_rank(int value) {
  std::vector<int> all(static_cast<std::size_t>(world_size()));
  MPI_Allgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (const int v : all)
    if (v != value) return false;
  return true;
}

// Rank r's test bytes: (7 r + 3) mod 23 bytes (rank 3's are empty), each a function of r and i.
std::vector<std::byte> test_bytes(int r) {
  std::vector<std::byte> b(static_cast<std::size_t>((7 * r + 3) % 23));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 13 + static_cast<std::size_t>(r) * 101);
  return b;
}

gradcomp::dgc_config test_config() {
  gradcomp::dgc_config cfg;
  cfg.clip_norm = 3.0;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.01);
  return cfg;
}

template <class Aggregator>
std::vector<std::vector<float>> updates(const Aggregator& agg) {
  std::vector<std::vector<float>> u;
  for (std::size_t t = 0; t < agg.num_tensors(); ++t) u.emplace_back(agg.update(t).begin(), agg.update(t).end());
  return u;
}

}  // namespace

TEST_CASE("mpi: every rank receives every rank's message in rank order, empty ones included") {
  mpi_exchange ex(MPI_COMM_WORLD);
  CHECK(ex.rank() == world_rank());
  CHECK(ex.size() == world_size());
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const auto mine = test_bytes(ex.rank() + round);
    if (round == 1) {  // non-blocking: the lengths and then the bytes move while the rank polls
      ex.start(view(mine));
      while (!ex.test()) {
      }
      CHECK(ex.wait());
    } else {
      CHECK(ex.allgather(view(mine)));
    }
    CHECK(ex.failed_rank() == -1);
    for (int r = 0; r < ex.size(); ++r) {
      CAPTURE(r);
      CHECK(gradcomp_test::bitwise_equal(ex.message(r), test_bytes(r + round)));
    }
  }
}

TEST_CASE("mpi: DGC across ranks gives bitwise the update of one process adding the same messages") {
  mpi_exchange ex(MPI_COMM_WORLD);
  const int n = ex.size();
  worker mine(test_config(), gradcomp::cpu_backend{});
  gradcomp::dgc_aggregator<float> agg(mine.compressor);
  // Every rank's worker in this process, and their aggregation in rank order.
  std::vector<worker> all;
  for (int r = 0; r < n; ++r) all.emplace_back(test_config(), gradcomp::cpu_backend{});
  gradcomp::dgc_aggregator<float> single(mine.compressor);
  for (std::size_t step = 0; step < 6; ++step) {
    CAPTURE(step);
    auto gradients = [&](int r) {
      auto g = gradcomp_test::conformance_gradients<float>(step, static_cast<std::uint64_t>(r));
      if (step == 4)  // every gradient zero: whatever the selection keeps, it goes through
        for (auto& x : g) std::fill(x.begin(), x.end(), 0.0f);
      return g;
    };
    mine.load(gradients(ex.rank()));
    REQUIRE(mine.compressor.compress(mine.views()));
    const auto bytes = mine.encode();
    REQUIRE(bytes);
    REQUIRE(ex.allgather(view(*bytes)));
    REQUIRE(ex.aggregate(agg));

    single.begin();
    for (int r = 0; r < n; ++r) {
      all[static_cast<std::size_t>(r)].load(gradients(r));
      REQUIRE(all[static_cast<std::size_t>(r)].compressor.compress(all[static_cast<std::size_t>(r)].views()));
      const auto simulated = all[static_cast<std::size_t>(r)].encode();
      REQUIRE(simulated);
      CHECK(gradcomp_test::bitwise_equal(ex.message(r), *simulated));
      REQUIRE(single.add(view(*simulated)));
    }
    REQUIRE(single.finish(static_cast<std::size_t>(n)));
    CHECK(gradcomp_test::bitwise_equal(updates(agg), updates(single)));
  }
}

TEST_CASE("mpi: messages that select nothing go through and add nothing") {
  // AdaComp sends an element only where its residual plus gradient is not zero: with zero
  // gradients and residuals every rank's compressed tensors keep no entry at all.
  mpi_exchange ex(MPI_COMM_WORLD);
  gradcomp::adacomp_compressor<float> mine(gradcomp::adacomp_config{});
  for (const auto& x : gradcomp_test::conformance_model()) mine.add_tensor(x.name, x.shape);
  gradcomp::aggregator<float> agg(mine);
  std::vector<std::vector<float>> zeros;
  std::vector<gradcomp::span<const float>> views;
  for (const auto& x : gradcomp_test::conformance_model()) {
    std::size_t n = 1;
    for (const std::size_t d : x.shape) n *= d;
    zeros.emplace_back(n, 0.0f);
  }
  for (const auto& z : zeros) views.emplace_back(z.data(), z.size());
  REQUIRE(mine.compress(views));
  const auto stats = mine.stats();
  REQUIRE(stats);
  CHECK(stats->kept_elements == 0);
  std::vector<std::byte> bytes(mine.max_message_bytes({}));
  const auto len = mine.encode_message({}, gradcomp::span<std::byte>(bytes.data(), bytes.size()));
  REQUIRE(len);
  bytes.resize(*len);
  REQUIRE(ex.allgather(view(bytes)));
  REQUIRE(ex.aggregate(agg));
  std::size_t moved = 0;
  for (std::size_t t = 0; t < agg.num_tensors(); ++t)
    for (const float u : agg.update(t)) moved += u != 0.0f;
  CHECK(moved == 0);
}

TEST_CASE("mpi: a rank without a message, a damaged message and another compressor's are errors on every rank") {
  mpi_exchange ex(MPI_COMM_WORLD);
  const int n = ex.size(), last = n - 1;
  worker mine(test_config(), gradcomp::cpu_backend{});
  gradcomp::dgc_aggregator<float> agg(mine.compressor);
  auto encoded_step = [&](std::size_t step) {
    mine.load(gradcomp_test::conformance_gradients<float>(step, static_cast<std::uint64_t>(ex.rank())));
    REQUIRE(mine.compressor.compress(mine.views()));
    auto bytes = mine.encode();
    REQUIRE(bytes);
    return *bytes;
  };

  SUBCASE("the last rank's step was refused") {
    const auto bytes = encoded_step(0);
    const auto got = ex.rank() == last ? ex.allgather_failed(errc::non_finite_input) : ex.allgather(view(bytes));
    CHECK(got.error() == errc::peer_failed);
    CHECK(ex.failed_rank() == last);
    CHECK(ex.message(0).empty());
    CHECK(ex.aggregate(agg).error() == errc::peer_failed);
  }
  SUBCASE("the last rank's message is damaged in transit") {
    auto bytes = encoded_step(0);
    if (ex.rank() == last) bytes[bytes.size() / 2] ^= std::byte{0x40};
    REQUIRE(ex.allgather(view(bytes)));
    const auto got = ex.aggregate(agg);
    CHECK(got.error() == errc::checksum_mismatch);
    CHECK(ex.failed_rank() == last);
    CHECK(same_on_every_rank(static_cast<int>(got.error())));
  }
  SUBCASE("rank 0 sends EF-SignSGD's message for the same tensors") {
    std::vector<std::byte> bytes = encoded_step(0);
    if (ex.rank() == 0) {
      gradcomp::ef_signsgd_compressor<float> other(gradcomp::ef_signsgd_config{});
      for (const auto& x : gradcomp_test::conformance_model()) other.add_tensor(x.name, x.shape);
      const auto g = gradcomp_test::conformance_gradients<float>(0, 0);
      std::vector<gradcomp::span<const float>> views;
      for (const auto& x : g) views.emplace_back(x.data(), x.size());
      REQUIRE(other.compress(views));
      bytes.assign(other.max_message_bytes({}), std::byte{});
      const auto len = other.encode_message({}, gradcomp::span<std::byte>(bytes.data(), bytes.size()));
      REQUIRE(len);
      bytes.resize(*len);
    }
    REQUIRE(ex.allgather(view(bytes)));
    const auto got = ex.aggregate(agg);
    CHECK_FALSE(got);
    CHECK(ex.failed_rank() == 0);
    CHECK(same_on_every_rank(static_cast<int>(got.error())));
  }
  // The next step goes through on every rank.
  const auto bytes = encoded_step(1);
  REQUIRE(ex.allgather(view(bytes)));
  CHECK(ex.aggregate(agg));
  CHECK(ex.failed_rank() == -1);
}

TEST_CASE("mpi: lengths whose total MPI cannot count are refused before any byte moves") {
  using gradcomp::comm::detail::announcement;
  std::vector<int> counts, displs;
  std::vector<announcement> a(3);
  a[0].bytes = 10;
  a[1].bytes = 0;
  a[2].bytes = 20;
  CHECK(gradcomp::comm::detail::gather_layout(a, counts, displs) == errc::ok);
  CHECK(counts == std::vector<int>{10, 0, 20});
  CHECK(displs == std::vector<int>{0, 10, 10});
  a[1].bytes = 0x7fffffffu - 30;
  CHECK(gradcomp::comm::detail::gather_layout(a, counts, displs) == errc::ok);
  a[1].bytes += 1;
  CHECK(gradcomp::comm::detail::gather_layout(a, counts, displs) == errc::size_overflow);
  a[1].bytes = std::uint64_t(1) << 40;
  CHECK(gradcomp::comm::detail::gather_layout(a, counts, displs) == errc::size_overflow);
}
