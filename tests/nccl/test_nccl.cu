// comm::nccl_exchange on every GPU of this machine (up to 4), one rank per GPU, one thread per
// rank: DGC messages of every rank, uploaded to each rank's GPU, exchanged on each path and with
// each way of gathering, must give every rank bitwise the update one process computes on the host
// by adding the same messages in rank order; a damaged message must be the same error, with the
// same rank, everywhere; a dense tensor summed in rank order must be the host's sum, bitwise;
// PowerSGD on each rank's GPU, its two rounds through comm::exchange_rounds, must end every step
// with bitwise the update of every rank's worker run on the host. Without a CUDA device it exits
// 77 (ctest: skipped). One GPU runs it with one rank; the exchange's collectives between ranks
// need two GPUs or more.
// The shared test helpers use doctest's macros; this program reports on its own.
#define DOCTEST_CONFIG_DISABLE
#include <gradcomp/comm/nccl.hpp>
#include <gradcomp/comm/rounds.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/conformance.hpp"

namespace {

using gradcomp::errc;
using gradcomp::comm::exchange_path;
using gradcomp::comm::nccl_gather;
using cuda_backend = gradcomp::thrust_backend<thrust::system::cuda::tag>;
using device_space = gradcomp::thrust_space<thrust::system::cuda::tag>;
using worker = gradcomp_test::conformance_worker<float, gradcomp::cpu_backend>;
using updates_t = std::vector<std::vector<float>>;

std::atomic<int> failures{0};

void expect(bool ok, const char* what, int rank, int step) {
  if (ok) return;
  ++failures;
  std::printf("FAILED: %s (rank %d, step %d)\n", what, rank, step);
}

gradcomp::dgc_config config() {
  gradcomp::dgc_config cfg;
  cfg.clip_norm = 3.0;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.05);
  return cfg;
}

constexpr int steps = 3;

// Every rank's message of every step ([step][rank]), from compressors on the host.
std::vector<std::vector<std::vector<std::byte>>> messages(int ranks) {
  std::vector<std::vector<std::vector<std::byte>>> m(steps);
  std::vector<worker> workers;
  for (int r = 0; r < ranks; ++r) workers.emplace_back(config(), gradcomp::cpu_backend{});
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < ranks; ++r) {
      auto& w = workers[static_cast<std::size_t>(r)];
      w.load(gradcomp_test::conformance_gradients<float>(static_cast<std::size_t>(s), static_cast<std::uint64_t>(r)));
      if (!w.compressor.compress(w.views())) ++failures;
      auto bytes = w.encode();
      if (!bytes) ++failures;
      m[static_cast<std::size_t>(s)].push_back(bytes ? *bytes : std::vector<std::byte>{});
    }
  return m;
}

// The host's updates of every step: one aggregator adding the messages in rank order.
std::vector<updates_t> host_updates(const std::vector<std::vector<std::vector<std::byte>>>& m, const worker& layout) {
  gradcomp::aggregator<float> agg(layout.compressor);
  std::vector<updates_t> out;
  for (const auto& step : m) {
    agg.begin();
    for (const auto& msg : step)
      if (!agg.add(gradcomp::span<const std::byte>(msg.data(), msg.size()))) ++failures;
    if (!agg.finish(step.size())) ++failures;
    updates_t u;
    for (std::size_t t = 0; t < agg.num_tensors(); ++t) u.emplace_back(agg.update(t).begin(), agg.update(t).end());
    out.push_back(std::move(u));
  }
  return out;
}

struct device_bytes {
  gradcomp::backend_buffer<std::byte, cuda_backend> buffer;
  std::size_t size;
  device_bytes(const cuda_backend& on, const std::vector<std::byte>& host)
      : buffer(gradcomp::allocate_buffer<std::byte>(on, host.size() + 1)), size(host.size()) {
    (void)gradcomp::copy_to_backend(on, gradcomp::span<const std::byte>(host.data(), host.size()),
                                    buffer.view().first(host.size()));
  }
  gradcomp::span<const std::byte, device_space> view() const {
    return gradcomp::span<const std::byte, device_space>(buffer.view().data(), size);
  }
};

// PowerSGD: a compressed matrix at rank 2 and a bias sent dense.
template <class B>
gradcomp::powersgd_compressor<float, B> powersgd_model(const B& on) {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  cfg.seed = 5;
  gradcomp::powersgd_compressor<float, B> c(cfg, on);
  c.add_tensor("w", {48, 40});
  c.add_tensor("bias", {48});
  return c;
}

// Rank r's gradients of step s.
std::vector<std::vector<float>> powersgd_gradients(int s, int r) {
  std::vector<std::vector<float>> g{std::vector<float>(48 * 40), std::vector<float>(48)};
  for (std::size_t t = 0; t < g.size(); ++t)
    for (std::size_t i = 0; i < g[t].size(); ++i)
      g[t][i] = static_cast<float>((i * 2654435761u + t * 40503u + static_cast<std::size_t>(s * 31 + r) * 977u) %
                                   2003) / 1001.0f - 1.0f;
  return g;
}

gradcomp::wire::encode_options round_options() {
  gradcomp::wire::encode_options opt;
  opt.dense_values = gradcomp::wire::value_coding::fp32;
  opt.checksum = true;
  return opt;
}

// Every rank's PowerSGD worker on the host, each round's messages added in rank order: the
// updates every rank must end each step with.
std::vector<updates_t> powersgd_expected(int ranks) {
  std::vector<gradcomp::powersgd_compressor<float>> ws;
  for (int r = 0; r < ranks; ++r) ws.push_back(powersgd_model(gradcomp::cpu_backend{}));
  gradcomp::comm::round_buffers<float> buffers;
  std::vector<updates_t> out;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<std::vector<float>>> g;
    for (int r = 0; r < ranks; ++r) {
      g.push_back(powersgd_gradients(s, r));
      std::vector<gradcomp::span<const float>> v;
      for (const auto& x : g.back()) v.emplace_back(x.data(), x.size());
      auto& w = ws[static_cast<std::size_t>(r)];
      if (!w.begin_step(gradcomp::span<const gradcomp::span<const float>>(v.data(), v.size()))) ++failures;
    }
    for (std::size_t k = 1; ws[0].round() != 0; ++k) {
      auto& agg = buffers.aggregator_for(k, ws[0].round_kind(k), ws[0].round_layout(k));
      agg.begin();
      for (auto& w : ws) {
        const auto msg = buffers.message(w.max_round_bytes(round_options()));
        const auto n = w.encode_round(round_options(), msg);
        if (!n || !agg.add(gradcomp::span<const std::byte>(msg.data(), *n))) ++failures;
      }
      if (!agg.finish(ws.size())) ++failures;
      for (auto& w : ws)
        if (!w.end_round(buffers.averages_of(agg))) ++failures;
    }
    updates_t u;
    for (std::size_t t = 0; t < ws[0].num_tensors(); ++t)
      u.emplace_back(ws[0].update(t).begin(), ws[0].update(t).end());
    out.push_back(std::move(u));
  }
  return out;
}

// This rank's PowerSGD worker on its GPU, through the exchange's rounds.
void run_powersgd(int rank, const cuda_backend& on, gradcomp::comm::nccl_exchange& ex,
                  const std::vector<updates_t>& expected) {
  auto c = powersgd_model(on);
  gradcomp::comm::round_buffers<float, cuda_backend> buffers(on);
  for (int s = 0; s < steps; ++s) {
    std::vector<gradcomp::backend_buffer<float, cuda_backend>> d;
    std::vector<gradcomp::span<const float, device_space>> v;
    for (const auto& g : powersgd_gradients(s, rank)) {
      d.push_back(gradcomp::allocate_buffer<float>(on, g.size()));
      (void)gradcomp::copy_to_backend(on, gradcomp::span<const float>(g.data(), g.size()), d.back().view());
      v.push_back(gradcomp::readonly(d.back().view()));
    }
    const auto done = gradcomp::comm::exchange_rounds(
        ex, c, gradcomp::span<const gradcomp::span<const float, device_space>>(v.data(), v.size()), buffers,
        round_options());
    expect(static_cast<bool>(done), "PowerSGD's rounds", rank, s);
    updates_t u;
    for (std::size_t t = 0; t < c.num_tensors(); ++t) {
      std::vector<float> h(c.update(t).size());
      (void)gradcomp::copy_to_host(on, c.update(t), gradcomp::span<float>(h.data(), h.size()));
      gradcomp::synchronize(on);
      u.push_back(std::move(h));
    }
    expect(gradcomp_test::bitwise_equal(u, expected[static_cast<std::size_t>(s)]),
           "PowerSGD's update bitwise the host's", rank, s);
  }
}

void run_rank(int rank, int ranks, ncclComm_t comm, exchange_path path, nccl_gather gather,
              const std::vector<std::vector<std::vector<std::byte>>>& m, const std::vector<updates_t>& expected,
              const std::vector<updates_t>& powersgd) {
  cudaSetDevice(rank);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  {
    const cuda_backend on = cuda_backend{}.on(stream);
    worker layout(config(), gradcomp::cpu_backend{});
    gradcomp::aggregator<float, cuda_backend> agg(layout.compressor, on);
    gradcomp::comm::nccl_exchange ex(comm, on, path, gather);
    for (int s = 0; s < steps; ++s) {
      const device_bytes mine(on, m[static_cast<std::size_t>(s)][static_cast<std::size_t>(rank)]);
      expect(static_cast<bool>(ex.reduce(mine.view(), agg)), "reduce", rank, s);
      updates_t u;
      for (std::size_t t = 0; t < agg.num_tensors(); ++t) {
        std::vector<float> h(agg.update(t).size());
        (void)gradcomp::copy_to_host(on, agg.update(t), gradcomp::span<float>(h.data(), h.size()));
        gradcomp::synchronize(on);
        u.push_back(std::move(h));
      }
      expect(gradcomp_test::bitwise_equal(u, expected[static_cast<std::size_t>(s)]), "update bitwise the host's", rank, s);
    }
    // The last rank's message damaged: checksum_mismatch, naming it, on every rank.
    auto damaged = m[0][static_cast<std::size_t>(rank)];
    if (rank == ranks - 1) damaged[damaged.size() / 2] ^= std::byte{0x40};
    const device_bytes bad(on, damaged);
    const auto got = ex.reduce(bad.view(), agg);
    expect(!got && got.error() == errc::checksum_mismatch && ex.failed_rank() == ranks - 1, "damaged message", rank, -1);
    // A dense tensor, in rank order: the host's sum of every rank's values, bitwise.
    std::vector<float> h(4099), sum(4099, 0.0f);
    for (int r = 0; r < ranks; ++r)
      for (std::size_t i = 0; i < h.size(); ++i) {
        const float v = static_cast<float>((i * 2654435761u + static_cast<std::size_t>(r) * 977u) % 10007) *
                        (i % 2 ? -1e-3f : 1e2f);
        if (r == rank) h[i] = v;
        sum[i] = r == 0 ? v : sum[i] + v;
      }
    auto d = gradcomp::allocate_buffer<float>(on, h.size());
    (void)gradcomp::copy_to_backend(on, gradcomp::span<const float>(h.data(), h.size()), d.view());
    expect(static_cast<bool>(ex.allreduce_sum(d.view())), "allreduce_sum", rank, -1);
    (void)gradcomp::copy_to_host(on, gradcomp::readonly(d.view()), gradcomp::span<float>(h.data(), h.size()));
    gradcomp::synchronize(on);
    expect(std::memcmp(h.data(), sum.data(), h.size() * sizeof(float)) == 0, "allreduce_sum bitwise the host's", rank, -1);
    run_powersgd(rank, on, ex, powersgd);
  }
  cudaStreamDestroy(stream);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("no CUDA device: compiled and linked only\n");
    return 77;
  }
  const int ranks = devices < 4 ? devices : 4;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks));
  std::vector<int> devs(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) devs[static_cast<std::size_t>(r)] = r;
  if (ncclCommInitAll(comms.data(), ranks, devs.data()) != ncclSuccess) {
    std::printf("FAILED: ncclCommInitAll\n");
    return 1;
  }
  const auto m = messages(ranks);
  const worker layout(config(), gradcomp::cpu_backend{});
  const auto expected = host_updates(m, layout);
  const auto powersgd = powersgd_expected(ranks);
  for (const nccl_gather gather : {nccl_gather::grouped, nccl_gather::padded})
    for (const exchange_path path : {exchange_path::allgather, exchange_path::allreduce, exchange_path::automatic}) {
      std::vector<std::thread> threads;
      for (int r = 0; r < ranks; ++r)
        threads.emplace_back(run_rank, r, ranks, comms[static_cast<std::size_t>(r)], path, gather, std::cref(m),
                             std::cref(expected), std::cref(powersgd));
      for (auto& t : threads) t.join();
    }
  for (auto c : comms) ncclCommDestroy(c);
  std::printf("%d rank(s) on %d GPU(s): %d failure(s)\n", ranks, devices, failures.load());
  return failures.load() == 0 ? 0 : 1;
}
