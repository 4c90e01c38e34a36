// Data-parallel training across MPI ranks: each rank compresses its own gradient with DGC, the
// ranks exchange their wire messages (comm::mpi_exchange::reduce: an allgather of the messages, or
// a dense allreduce where that moves fewer bytes), and every rank adds them in rank order and
// applies the same update, so the replicas stay bitwise equal. It trains twice, on the automatic
// path and always on the dense path, and finds the same weights, bit for bit.
//
//   mpirun -np 4 build/examples/mpi_exchange_step
#include <gradcomp/comm/mpi.hpp>
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

// FNV-1a of the weights' bytes: equal on every rank when the replicas are.
std::uint64_t fingerprint(const std::vector<float>& w) {
  std::uint64_t h = 1469598103934665603ull;
  for (const float x : w) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &x, sizeof bits);
    for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

struct outcome {
  bool ok = false;
  double first_error = 0.0, error = 0.0;
  std::uint64_t weights = 0;  // fingerprint
};

outcome train(gradcomp::comm::exchange_path path) {
  gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD, path);

  const double density = 0.05;
  gradcomp::dgc_config config;
  config.schedule = gradcomp::warmup_schedule::constant(density);
  config.num_workers = static_cast<std::size_t>(ex.size());
  gradcomp::dgc_compressor<float> compressor(config);  // this rank's worker
  compressor.add_tensor("fc.weight", {128, 256});
  compressor.add_tensor("fc.bias", {128});
  gradcomp::dgc_aggregator<float> aggregator(compressor);  // this rank's replica

  // A least-squares problem: the weights move towards `target`; each rank sees its own noise.
  std::vector<float> weight(128 * 256, 0.0f), bias(128, 0.0f), target(weight.size());
  for (std::size_t i = 0; i < target.size(); ++i) target[i] = std::sin(0.01f * static_cast<float>(i));
  std::mt19937 rng(1234u + static_cast<unsigned>(ex.rank()));
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<float> g_weight(weight.size()), g_bias(bias.size());
  std::vector<std::byte> message(compressor.max_message_bytes({}));
  const float lr = 0.004f;  // DGC's velocity waits about 1 / density steps to be sent: a small step
  const int steps = 200;

  outcome out;
  double& first_error = out.first_error;
  double& error = out.error;
  for (int step = 0; step < steps; ++step) {
    error = 0.0;
    for (std::size_t i = 0; i < weight.size(); ++i) {
      g_weight[i] = weight[i] - target[i] + noise(rng);
      error += static_cast<double>(weight[i] - target[i]) * (weight[i] - target[i]);
    }
    for (std::size_t i = 0; i < bias.size(); ++i) g_bias[i] = bias[i] + noise(rng);
    if (step == 0) first_error = error;

    // Compress and encode this rank's step. A refused step still takes part in the exchange
    // (reduce_failed), so that no rank waits for it: every rank then gets peer_failed.
    const auto issued = compressor.compress({gradcomp::as_const_span(g_weight), gradcomp::as_const_span(g_bias)});
    const auto bytes = issued ? compressor.encode_message({}, gradcomp::span<std::byte>(message.data(), message.size()))
                              : gradcomp::result<std::size_t>(gradcomp::fail(issued.error()));
    // Every rank's message, added in rank order, averaged: the same update on every rank.
    const auto aggregated = bytes ? ex.reduce(gradcomp::span<const std::byte>(message.data(), *bytes), aggregator)
                                  : ex.reduce_failed(bytes.error(), aggregator);
    if (!aggregated) {
      std::fprintf(stderr, "rank %d, step %d: %s (rank %d)\n", ex.rank(), step,
                   gradcomp::to_string(aggregated.error()), ex.failed_rank());
      return out;
    }
    const auto dw = aggregator.update(0), db = aggregator.update(1);
    for (std::size_t i = 0; i < weight.size(); ++i) weight[i] -= lr * dw[i];
    for (std::size_t i = 0; i < bias.size(); ++i) bias[i] -= lr * db[i];
  }

  // The replicas agree bit for bit: every rank's fingerprint is rank 0's.
  std::uint64_t mine = fingerprint(weight), root = mine;
  MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  int differ = mine != root ? 1 : 0, any = 0;
  MPI_Allreduce(&differ, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (ex.rank() == 0)
    std::printf("%s path: %d ranks, %d steps at %.0f%% density: squared error %.1f -> %.1f; replicas %s\n",
                path == gradcomp::comm::exchange_path::allreduce ? "dense" : "automatic", ex.size(), steps,
                100.0 * density, first_error, error, any == 0 ? "bitwise equal" : "DIFFER");
  out.ok = any == 0 && error < 0.01 * first_error;
  out.weights = mine;
  return out;
}

int run() {
  const outcome automatic = train(gradcomp::comm::exchange_path::automatic);
  const outcome dense = train(gradcomp::comm::exchange_path::allreduce);
  const bool same = automatic.weights == dense.weights;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("weights of both paths: %s\n", same ? "bitwise equal" : "DIFFER");
  return automatic.ok && dense.ok && same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int status = run();
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
