// The exchange with its buffers in a Thrust backend's memory (comm/thrust_memory.hpp: what
// comm::nccl_exchange runs on the GPU), here on Thrust's OpenMP system under MPI: messages stay
// in the backend's memory and are added there by the device decoder, the dense path sums there.
// Every outcome — the updates on both paths, and every error with its rank — is bitwise or
// exactly the host exchange's for the same messages.
#include <gradcomp/comm/mpi.hpp>
#include <gradcomp/comm/thrust_memory.hpp>

#include <doctest/doctest.h>

#include <thrust/system/omp/execution_policy.h>

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
using gradcomp::comm::exchange_path;
using omp_backend = gradcomp::thrust_backend<thrust::system::omp::tag>;
using device_exchange = gradcomp::comm::basic_mpi_exchange<omp_backend>;
using host_exchange = gradcomp::comm::mpi_exchange;
using worker = gradcomp_test::conformance_worker<float, gradcomp::cpu_backend>;
using device_space = gradcomp::thrust_space<thrust::system::omp::tag>;

// Bytes in the backend's memory.
struct device_bytes {
  gradcomp::backend_buffer<std::byte, omp_backend> buffer;
  std::size_t size = 0;
  explicit device_bytes(const std::vector<std::byte>& host)
      : buffer(gradcomp::allocate_buffer<std::byte>(omp_backend{}, host.size() + 1)), size(host.size()) {
    REQUIRE(gradcomp::copy_to_backend(omp_backend{}, gradcomp::span<const std::byte>(host.data(), host.size()),
                                      buffer.view().first(host.size())));
  }
  gradcomp::span<const std::byte, device_space> view() const {
    return gradcomp::span<const std::byte, device_space>(buffer.view().data(), size);
  }
};

template <class Aggregator>
std::vector<std::vector<float>> updates(const Aggregator& agg) {
  std::vector<std::vector<float>> u;
  for (std::size_t t = 0; t < agg.num_tensors(); ++t) {
    std::vector<float> h(agg.update(t).size());
    REQUIRE(gradcomp::copy_to_host(agg.backend(), agg.update(t), gradcomp::span<float>(h.data(), h.size())));
    gradcomp::synchronize(agg.backend());
    u.push_back(std::move(h));
  }
  return u;
}

// The outcome of one step on both exchanges: the same error (or none) and failing rank.
template <class DeviceAggregator, class HostAggregator>
void same_outcome(device_exchange& dev, DeviceAggregator& dagg, host_exchange& host, HostAggregator& hagg,
                  const std::vector<std::byte>& mine) {
  const device_bytes d(mine);
  const auto got = dev.reduce(d.view(), dagg);
  const auto expected = host.reduce(gradcomp_test::view(mine), hagg);
  CHECK(static_cast<bool>(got) == static_cast<bool>(expected));
  if (!got && !expected) CHECK(got.error() == expected.error());
  CHECK(dev.failed_rank() == host.failed_rank());
  CHECK(dev.last_path() == host.last_path());
  if (got && expected) CHECK(gradcomp_test::bitwise_equal(updates(dagg), updates(hagg)));
}

}  // namespace

TEST_CASE("mpi + thrust memory: steps on both paths give bitwise the host exchange's updates") {
  for (const exchange_path path : {exchange_path::allgather, exchange_path::allreduce, exchange_path::automatic})
    for (const double density : {0.01, 1.0}) {
      CAPTURE(gradcomp_test::path_name(path));
      CAPTURE(density);
      device_exchange dev(MPI_COMM_WORLD, path);
      host_exchange host(MPI_COMM_WORLD, path);
      worker mine(gradcomp_test::mpi_test_config(density), gradcomp::cpu_backend{});
      gradcomp::aggregator<float, omp_backend> dagg(mine.compressor);
      gradcomp::aggregator<float> hagg(mine.compressor);
      for (std::size_t step = 0; step < 3; ++step) {
        CAPTURE(step);
        same_outcome(dev, dagg, host, hagg, gradcomp_test::encoded_step(mine, step, dev.rank()));
        CHECK(dev.failed_rank() == -1);
      }
      // The allgather by hand: every message readable where it landed.
      const auto bytes = mine.encode();
      REQUIRE(bytes);
      const device_bytes d(*bytes);
      REQUIRE(dev.allgather(d.view()));
      std::vector<std::byte> back(dev.message(dev.rank()).size());
      REQUIRE(gradcomp::copy_to_host(omp_backend{}, dev.message(dev.rank()), gradcomp::span<std::byte>(back.data(), back.size())));
      CHECK(back == *bytes);
      REQUIRE(dev.aggregate(dagg));
    }
}

TEST_CASE("mpi + thrust memory: a missing, damaged, foreign or overflowing message fails as on the host") {
  const int n = gradcomp_test::world_size(), last = n - 1;
  for (const exchange_path path : {exchange_path::allgather, exchange_path::allreduce}) {
    CAPTURE(gradcomp_test::path_name(path));
    device_exchange dev(MPI_COMM_WORLD, path);
    host_exchange host(MPI_COMM_WORLD, path);
    worker mine(gradcomp_test::mpi_test_config(), gradcomp::cpu_backend{});
    gradcomp::aggregator<float, omp_backend> dagg(mine.compressor);
    gradcomp::aggregator<float> hagg(mine.compressor);
    const auto good = gradcomp_test::encoded_step(mine, 0, dev.rank());

    auto damaged = good;
    if (dev.rank() == last) damaged[damaged.size() / 2] ^= std::byte{0x40};
    same_outcome(dev, dagg, host, hagg, damaged);
    CHECK(dev.failed_rank() == last);

    auto foreign = good;
    if (dev.rank() == 0) foreign = gradcomp_test::ef_signsgd_message();
    same_outcome(dev, dagg, host, hagg, foreign);
    CHECK(dev.failed_rank() == 0);

    same_outcome(dev, dagg, host, hagg, gradcomp_test::overflowing_message());
    CHECK(dev.failed_rank() == (n > 1 ? 1 : -1));

    // A message cut short at the last rank.
    std::vector<std::byte> truncated = good;
    if (dev.rank() == last) truncated.resize(truncated.size() - 3);
    same_outcome(dev, dagg, host, hagg, truncated);
    CHECK(dev.failed_rank() == last);

    // A rank without a message.
    const auto got = dev.rank() == last ? dev.reduce_failed(errc::non_finite_input, dagg)
                                        : dev.reduce(device_bytes(good).view(), dagg);
    CHECK(got.error() == errc::peer_failed);
    CHECK(dev.failed_rank() == last);

    same_outcome(dev, dagg, host, hagg, good);
    CHECK(dev.failed_rank() == -1);
  }
}

TEST_CASE("mpi + thrust memory: allreduce_sum of a tensor in the backend's memory is the host's, bitwise") {
  device_exchange dev(MPI_COMM_WORLD);
  host_exchange host(MPI_COMM_WORLD);
  for (const std::size_t len : {std::size_t(0), std::size_t(3), std::size_t(4099)}) {
    CAPTURE(len);
    std::vector<float> h(len);
    for (std::size_t i = 0; i < len; ++i)
      h[i] = static_cast<float>((i * 2654435761u + static_cast<std::size_t>(dev.rank()) * 977u) % 10007) *
             (i % 2 ? -1e-3f : 1e2f);
    auto d = gradcomp::allocate_buffer<float>(omp_backend{}, len);
    REQUIRE(gradcomp::copy_to_backend(omp_backend{}, gradcomp::span<const float>(h.data(), h.size()), d.view()));
    REQUIRE(dev.allreduce_sum(d.view()));
    REQUIRE(host.allreduce_sum(gradcomp::span<float>(h.data(), h.size())));
    std::vector<float> back(len);
    REQUIRE(gradcomp::copy_to_host(omp_backend{}, gradcomp::readonly(d.view()), gradcomp::span<float>(back.data(), back.size())));
    CHECK((len == 0 || std::memcmp(back.data(), h.data(), len * sizeof(float)) == 0));
  }
  auto d = gradcomp::allocate_buffer<float>(omp_backend{}, 5);
  std::vector<float> bad(5, 1.0f);
  if (dev.rank() == 0) bad[4] = std::numeric_limits<float>::infinity();
  REQUIRE(gradcomp::copy_to_backend(omp_backend{}, gradcomp::span<const float>(bad.data(), bad.size()), d.view()));
  for (const auto order : {gradcomp::comm::dense_order::rank_order, gradcomp::comm::dense_order::library}) {
    CHECK(dev.allreduce_sum(d.view(), order).error() == errc::non_finite_input);
    CHECK(dev.failed_rank() == 0);
  }
}
