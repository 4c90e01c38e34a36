// The exchange with its buffers in a Thrust backend's memory (comm/thrust_memory.hpp: what
// comm::nccl_exchange runs on the GPU), here on Thrust's OpenMP system under MPI: messages stay
// in the backend's memory and are added there by the device decoder, the dense path sums there.
// Every outcome — the updates on both paths, and every error with its rank — is bitwise or
// exactly the host exchange's for the same messages; PowerSGD's rounds (comm::exchange_rounds)
// run in the backend's memory as comm::nccl_exchange runs them on GPUs.
#include <gradcomp/comm/mpi.hpp>
#include <gradcomp/comm/rounds.hpp>
#include <gradcomp/comm/thrust_memory.hpp>
#include <gradcomp/powersgd/thrust_ops.hpp>

#include <doctest/doctest.h>

#include <thrust/system/omp/execution_policy.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/conformance.hpp"
#include "comm/mpi_rounds_support.hpp"
#include "comm/mpi_support.hpp"
#include "powersgd/rounds.hpp"
#include "support/transfer.hpp"
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

namespace {

namespace mr = gradcomp_test::mpi_rounds;
using device_powersgd = gradcomp::powersgd_compressor<float, omp_backend>;
using device_view = gradcomp::span<const float, device_space>;

// This rank's gradients of `step` in the backend's memory.
struct device_gradients {
  std::vector<gradcomp::backend_buffer<float, omp_backend>> buffers;
  std::vector<device_view> views;
  device_gradients(std::size_t step, int rank) {
    for (const auto& g : mr::gradients(step, rank)) buffers.push_back(gradcomp_test::upload(omp_backend{}, g));
    for (const auto& b : buffers) views.push_back(gradcomp::readonly(b.view()));
  }
  gradcomp::span<const device_view> all() const { return {views.data(), views.size()}; }
};

gradcomp::span<const float> host_view(const std::vector<float>& v) { return {v.data(), v.size()}; }

std::vector<gradcomp::span<const float>> host_views(const std::vector<std::vector<float>>& v) {
  std::vector<gradcomp::span<const float>> out;
  for (const auto& x : v) out.emplace_back(x.data(), x.size());
  return out;
}

}  // namespace

TEST_CASE("mpi + thrust memory: PowerSGD's rounds in the backend's memory are bitwise the host exchange's step") {
  const int rank = gradcomp_test::world_rank();
  const auto opt = gradcomp_test::round_options<float>();
  for (const exchange_path path : {exchange_path::allgather, exchange_path::allreduce}) {
    CAPTURE(gradcomp_test::path_name(path));
    device_exchange dev(MPI_COMM_WORLD, path);
    host_exchange host(MPI_COMM_WORLD, path);
    auto dc = mr::model(mr::config(), omp_backend{});
    auto hc = mr::model(mr::config());
    gradcomp::comm::round_buffers<float, omp_backend> dbuf;
    gradcomp::comm::round_buffers<float> hbuf;
    REQUIRE(hc.info(0).compressed);
    for (std::size_t s = 0; s < 3; ++s) {
      CAPTURE(s);
      const device_gradients dg(s, rank);
      const auto hg = mr::gradients(s, rank);
      const auto hv = mr::views(hg);
      REQUIRE(gradcomp::comm::exchange_rounds(dev, dc, dg.all(), dbuf, opt));
      const gradcomp::span<const gradcomp::span<const float>> host_grads(hv.data(), hv.size());
      REQUIRE(gradcomp::comm::exchange_rounds(host, hc, host_grads, hbuf, opt));
      CHECK(dev.last_path() == path);
      std::vector<std::vector<float>> updates;
      for (std::size_t t = 0; t < hc.num_tensors(); ++t) {
        CAPTURE(t);
        updates.push_back(gradcomp_test::download(omp_backend{}, dc.update(t)));
        CHECK(mr::same_bits(host_view(updates.back()), hc.update(t)));
        const auto e = gradcomp_test::download(omp_backend{}, dc.error_feedback(t));
        CHECK(mr::same_bits(host_view(e), hc.error_feedback(t)));
        const auto q = gradcomp_test::download(omp_backend{}, dc.q(t));
        CHECK(mr::same_bits(host_view(q), hc.q(t)));
      }
      CHECK(dc.step() == s + 1);
      CHECK(gradcomp_test::same_on_every_rank(mr::hash(host_views(updates))));
    }
  }
}

TEST_CASE("mpi + thrust memory: a refused PowerSGD step and a round of the other kind fail on every rank") {
  const int rank = gradcomp_test::world_rank(), n = gradcomp_test::world_size();
  const auto opt = gradcomp_test::round_options<float>();
  device_exchange dev(MPI_COMM_WORLD, exchange_path::allgather);
  auto dc = mr::model(mr::config(), omp_backend{});
  auto twin = mr::model(mr::config());  // the same state on the host, for rank 1's wrong message
  gradcomp::comm::round_buffers<float, omp_backend> buffers;

  // The last rank's gradient holds a NaN: its step is refused, and every rank's fails.
  auto g = mr::gradients(0, rank);
  if (rank == n - 1) g[0][17] = std::nanf("");
  const auto bad = gradcomp_test::upload(omp_backend{}, g[0]);
  device_gradients dg(0, rank);
  dg.views[0] = gradcomp::readonly(bad.view());
  const auto refused = gradcomp::comm::exchange_rounds(dev, dc, dg.all(), buffers, opt);
  REQUIRE(!refused);
  CHECK(refused.error() == errc::peer_failed);
  CHECK(dev.failed_rank() == n - 1);
  CHECK(dc.round() == 0);
  CHECK(dc.step() == 0);

  // The last rank sends its first round as the second round's kind: refused on every rank.
  const device_gradients good(0, rank);
  REQUIRE(dc.begin_step(good.all()));
  const auto hg = mr::gradients(0, rank);
  const auto hv = mr::views(hg);
  REQUIRE(twin.begin_step(gradcomp::span<const gradcomp::span<const float>>(hv.data(), hv.size())));
  auto& agg = buffers.aggregator_for(1, gradcomp::wire::message_kind::first_round, dc.round_layout(1));
  const auto msg = rank == n - 1 ? mr::first_round_as_second(twin, opt) : gradcomp_test::round_message(dc);
  const auto r = dev.reduce(device_bytes(msg).view(), agg);
  REQUIRE(!r);
  CHECK(r.error() == errc::layout_mismatch);
  CHECK(dev.failed_rank() == n - 1);
  dc.cancel_step();

  // The step then goes through on every rank.
  REQUIRE(gradcomp::comm::exchange_rounds(dev, dc, good.all(), buffers, opt));
  CHECK(dc.step() == 1);
}
