// comm::mpi_exchange on the ranks of MPI_COMM_WORLD (2 and 4 under ctest): every rank receives
// every message in rank order, the aggregated update is bitwise the one a single process computes
// from the same messages, and a missing, damaged or foreign message is the same error on every
// rank, with the next step unaffected.
#include <gradcomp/comm/mpi.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/conformance.hpp"
#include "comm/mpi_support.hpp"
#include "support/inputs.hpp"

namespace {

using gradcomp::errc;
using gradcomp::comm::mpi_exchange;
using worker = gradcomp_test::conformance_worker<float, gradcomp::cpu_backend>;
using gradcomp_test::path_name;
using gradcomp_test::same_on_every_rank;
using gradcomp_test::view;
using gradcomp_test::world_rank;
using gradcomp_test::world_size;

gradcomp::dgc_config test_config(double density = 0.01) { return gradcomp_test::mpi_test_config(density); }

// Rank r's test bytes: (7 r + 3) mod 23 bytes (rank 3's are empty), each a function of r and i.
std::vector<std::byte> test_bytes(int r) {
  std::vector<std::byte> b(static_cast<std::size_t>((7 * r + 3) % 23));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 13 + static_cast<std::size_t>(r) * 101);
  return b;
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
    auto gradients = [&](int r) { return gradcomp_test::step_gradients(step, r, 4); };
    const auto bytes = gradcomp_test::encoded(mine, gradients(ex.rank()));
    REQUIRE(ex.allgather(view(bytes)));
    REQUIRE(ex.aggregate(agg));

    single.begin();
    for (int r = 0; r < n; ++r) {
      const auto simulated = gradcomp_test::encoded(all[static_cast<std::size_t>(r)], gradients(r));
      CHECK(gradcomp_test::bitwise_equal(ex.message(r), simulated));
      REQUIRE(single.add(view(simulated)));
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
  auto encoded_step = [&](std::size_t step) { return gradcomp_test::encoded_step(mine, step, ex.rank()); };

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
    if (ex.rank() == 0) bytes = gradcomp_test::ef_signsgd_message();
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

TEST_CASE("mpi: reduce gives bitwise one process's update on either path, and the automatic path moves fewer bytes") {
  using gradcomp::comm::exchange_path;
  const int n = world_size();
  for (const exchange_path path : {exchange_path::allgather, exchange_path::allreduce, exchange_path::automatic})
    for (const double density : {0.01, 1.0}) {
      CAPTURE(path_name(path));
      CAPTURE(density);
      mpi_exchange ex(MPI_COMM_WORLD, path);
      CHECK(ex.path() == path);
      worker mine(test_config(density), gradcomp::cpu_backend{});
      gradcomp::dgc_aggregator<float> agg(mine.compressor);
      std::vector<worker> all;
      for (int r = 0; r < n; ++r) all.emplace_back(test_config(density), gradcomp::cpu_backend{});
      gradcomp::dgc_aggregator<float> single(mine.compressor);
      std::uint64_t dense_bytes = 0;
      for (std::size_t t = 0; t < agg.num_tensors(); ++t) dense_bytes += agg.update(t).size() * sizeof(float);
      for (std::size_t step = 0; step < 4; ++step) {
        CAPTURE(step);
        auto gradients = [&](int r) { return gradcomp_test::step_gradients(step, r, 2); };
        const auto bytes = gradcomp_test::encoded(mine, gradients(ex.rank()));
        if (step == 1) {  // non-blocking: the aggregation runs in the test() that finds the data
          ex.start_reduce(view(bytes), agg);
          while (!ex.test()) {
          }
          REQUIRE(ex.wait());
        } else {
          REQUIRE(ex.reduce(view(bytes), agg));
        }
        CHECK(ex.failed_rank() == -1);

        single.begin();
        std::uint64_t total = 0;
        for (int r = 0; r < n; ++r) {
          const auto simulated = gradcomp_test::encoded(all[static_cast<std::size_t>(r)], gradients(r));
          total += simulated.size();
          REQUIRE(single.add(view(simulated)));
        }
        REQUIRE(single.finish(static_cast<std::size_t>(n)));
        CHECK(gradcomp_test::bitwise_equal(updates(agg), updates(single)));
        const exchange_path expected = gradcomp::comm::choose_path(path, total, dense_bytes, n);
        CHECK(ex.last_path() == expected);
        if (path == exchange_path::automatic && n >= 4 && density == 1.0)  // 4 dense-sized messages
          CHECK(ex.last_path() == exchange_path::allreduce);
        if (path == exchange_path::automatic && density == 0.01) CHECK(ex.last_path() == exchange_path::allgather);
      }
    }
}

TEST_CASE("mpi: on the dense path too, a missing, damaged, foreign or overflowing message is an error on every rank") {
  using gradcomp::comm::exchange_path;
  const int n = world_size(), last = n - 1;
  for (const exchange_path path : {exchange_path::allreduce, exchange_path::allgather}) {
    CAPTURE(path_name(path));
    mpi_exchange ex(MPI_COMM_WORLD, path);
    worker mine(test_config(), gradcomp::cpu_backend{});
    gradcomp::dgc_aggregator<float> agg(mine.compressor);
    auto encoded_step = [&](std::size_t step) { return gradcomp_test::encoded_step(mine, step, ex.rank()); };
    SUBCASE("the last rank's step was refused") {
      const auto bytes = encoded_step(0);
      const auto got = ex.rank() == last ? ex.reduce_failed(errc::non_finite_input, agg) : ex.reduce(view(bytes), agg);
      CHECK(got.error() == errc::peer_failed);
      CHECK(ex.failed_rank() == last);
    }
    SUBCASE("the last rank's message is damaged in transit") {
      auto bytes = encoded_step(0);
      if (ex.rank() == last) bytes[bytes.size() / 2] ^= std::byte{0x40};
      const auto got = ex.reduce(view(bytes), agg);
      CHECK(got.error() == errc::checksum_mismatch);
      CHECK(ex.failed_rank() == last);
    }
    SUBCASE("rank 0 sends EF-SignSGD's message for the same tensors") {
      std::vector<std::byte> bytes = encoded_step(0);
      if (ex.rank() == 0) bytes = gradcomp_test::ef_signsgd_message();
      const auto got = ex.reduce(view(bytes), agg);
      CHECK_FALSE(got);
      CHECK(ex.failed_rank() == 0);
      CHECK(same_on_every_rank(static_cast<int>(got.error())));
    }
    SUBCASE("the sums leave the finite range when rank 1's message is added") {
      const auto bytes = gradcomp_test::overflowing_message();
      REQUIRE_FALSE(bytes.empty());
      const auto got = ex.reduce(view(bytes), agg);
      if (n > 1) {
        CHECK(got.error() == errc::state_overflow);
        CHECK(ex.failed_rank() == 1);
      } else {
        CHECK(got);
      }
    }
    // The next step goes through on every rank.
    const auto bytes = encoded_step(1);
    CHECK(ex.reduce(view(bytes), agg));
    CHECK(ex.failed_rank() == -1);
  }
}

TEST_CASE("mpi: allreduce_sum adds every rank's dense tensor, in rank order bitwise, and refuses non-finite ones") {
  using gradcomp::comm::dense_order;
  mpi_exchange ex(MPI_COMM_WORLD);
  const int n = ex.size(), last = n - 1;
  auto values = [](int r, std::size_t len) {
    std::vector<double> v(len);
    for (std::size_t i = 0; i < len; ++i)
      v[i] = static_cast<double>((i * 2654435761u + static_cast<std::size_t>(r) * 40503u) % 1000003) *
             (i % 3 == 0 ? 1e-9 : 1e4) * ((i + static_cast<std::size_t>(r)) % 2 ? -1.0 : 1.0);
    return v;
  };
  for (const std::size_t len : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(1000), std::size_t(4099)}) {
    CAPTURE(len);
    std::vector<double> expected = values(0, len), magnitude(len);
    for (std::size_t i = 0; i < len; ++i) magnitude[i] = std::fabs(expected[i]);
    for (int r = 1; r < n; ++r) {
      const auto v = values(r, len);
      for (std::size_t i = 0; i < len; ++i) {
        expected[i] += v[i];
        magnitude[i] += std::fabs(v[i]);
      }
    }
    std::vector<double> d = values(ex.rank(), len);
    REQUIRE(ex.allreduce_sum(gradcomp::span<double>(d.data(), d.size())));
    CHECK((len == 0 || std::memcmp(d.data(), expected.data(), len * sizeof(double)) == 0));
    // float, and the library's order: within the rounding any order of float additions allows.
    std::vector<float> f(len);
    const auto v = values(ex.rank(), len);
    for (std::size_t i = 0; i < len; ++i) f[i] = static_cast<float>(v[i]);
    ex.start_allreduce_sum(gradcomp::span<float>(f.data(), f.size()), dense_order::library);
    REQUIRE(ex.wait());
    for (std::size_t i = 0; i < len; ++i)
      CHECK(std::fabs(static_cast<double>(f[i]) - expected[i]) <= 2.0 * n * 6e-8 * magnitude[i]);
  }
  for (const dense_order order : {dense_order::rank_order, dense_order::library}) {
    CAPTURE(order == dense_order::rank_order);
    std::vector<float> f(100, 1.0f);
    if (ex.rank() == last) f[57] = std::numeric_limits<float>::quiet_NaN();
    auto got = ex.allreduce_sum(gradcomp::span<float>(f.data(), f.size()), order);
    CHECK(got.error() == errc::non_finite_input);
    CHECK(ex.failed_rank() == last);
    CHECK(f[0] == 1.0f);  // unchanged
    std::fill(f.begin(), f.end(), std::numeric_limits<float>::max() / 1.5f);
    got = ex.allreduce_sum(gradcomp::span<float>(f.data(), f.size()), order);
    if (n > 1) {
      CHECK(got.error() == errc::state_overflow);
      CHECK(ex.failed_rank() == (order == dense_order::rank_order ? 1 : -1));
      CHECK(f[0] == std::numeric_limits<float>::max() / 1.5f);
    }
    std::vector<float> g(ex.rank() == last && n > 1 ? 11 : 10, 2.0f);
    got = ex.allreduce_sum(gradcomp::span<float>(g.data(), g.size()), order);
    if (n > 1) {
      CHECK(got.error() == errc::layout_mismatch);
      CHECK(ex.failed_rank() == last);
    }
    std::fill(g.begin(), g.end(), 2.0f);
    g.resize(10);
    REQUIRE(ex.allreduce_sum(gradcomp::span<float>(g.data(), g.size()), order));
    CHECK(g[9] == 2.0f * static_cast<float>(n));
  }
}

TEST_CASE("mpi: the dense path in the library's order sums the same messages (bitwise with two ranks)") {
  using gradcomp::comm::dense_order;
  using gradcomp::comm::exchange_path;
  const int n = world_size();
  mpi_exchange ordered(MPI_COMM_WORLD, exchange_path::allreduce), library(MPI_COMM_WORLD, exchange_path::allreduce);
  library.set_dense_path_order(dense_order::library);
  CHECK(library.dense_path_order() == dense_order::library);
  CHECK(ordered.dense_path_order() == dense_order::rank_order);
  worker mine(test_config(0.2), gradcomp::cpu_backend{});
  gradcomp::dgc_aggregator<float> a(mine.compressor), b(mine.compressor);
  for (std::size_t step = 0; step < 3; ++step) {
    CAPTURE(step);
    const auto bytes = gradcomp_test::encoded_step(mine, step, ordered.rank());
    REQUIRE(ordered.reduce(view(bytes), a));
    REQUIRE(library.reduce(view(bytes), b));
    CHECK(library.last_path() == exchange_path::allreduce);
    const auto ua = updates(a), ub = updates(b);
    if (n <= 2) {  // one addition: the same in any order
      CHECK(gradcomp_test::bitwise_equal(ua, ub));
    } else {
      for (std::size_t t = 0; t < ua.size(); ++t) {
        float largest = 0.0f;
        for (const float x : ua[t]) largest = std::max(largest, std::fabs(x));
        for (std::size_t i = 0; i < ua[t].size(); ++i) CHECK(std::fabs(ua[t][i] - ub[t][i]) <= 1e-5f * largest);
      }
    }
  }
  const auto huge = gradcomp_test::overflowing_message();
  const auto got = library.reduce(view(huge), b);
  if (n > 1) {
    CHECK(got.error() == errc::state_overflow);
    CHECK(library.failed_rank() == -1);  // the library's sum does not tell after which rank
  }
}
