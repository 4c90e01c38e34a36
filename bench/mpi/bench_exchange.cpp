// The exchange of one training step among MPI ranks, for docs/scaling.md: ResNet-50's gradient
// (bench/data/resnet50.txt, 25.6 M parameters) compressed by DGC on every rank and exchanged with
// comm::mpi_exchange (the messages' allgather, then the aggregation of every rank's message), and
// the dense alternative, MPI_Allreduce of the fp32 gradient, in the same run. Run under mpirun:
//
//   mpirun -np N bench_exchange [--benchmark_format=json --benchmark_out=FILE ...]
//
//   BM_dgc_allgather/<ppm>        one step's allgather of DGC messages at ppm parts per million
//   BM_dgc_aggregate/<ppm>        the same plus every rank's aggregation of the N messages
//   BM_dgc_reduce/<ppm>/<path>    the whole step by mpi_exchange::reduce on one path (0: the
//                                 allgather, 1: the dense rank-order allreduce), aggregation included
//   BM_powersgd_step/<r>/<path>   one PowerSGD step of rank r by comm::exchange_rounds: its two rounds
//                                 (P, then Q) each reduced on one path (0: the allgather, 1: the
//                                 dense allreduce, 2: reduce's own choice), the compression included
//   BM_dense_allreduce            MPI_Allreduce (sum) of the fp32 gradient
//   BM_dense_rank_order           mpi_exchange::allreduce_sum of it in rank order (bitwise the
//                                 same sum on every rank count's schedule)
//
// Every rank runs every benchmark for a fixed number of iterations (the collectives must match);
// an iteration's time is the slowest rank's, after a barrier. Rank 0 reports; counters: `ranks`,
// `bytes_per_rank` (what one rank sends) and `bytes_received` (what one rank receives); PowerSGD's
// also `payload_bytes` (the values its two rounds average).
#include <gradcomp/comm/mpi.hpp>
#include <gradcomp/comm/rounds.hpp>
#include <gradcomp/gradcomp.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../model_list.hpp"

namespace {

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

const std::vector<gradcomp_bench::tensor_spec>& resnet50() {
  static const auto model = gradcomp_bench::load_model(GRADCOMP_BENCH_DATA_DIR "/resnet50.txt");
  return model;
}

// The slowest rank's time of f(), after a barrier.
template <class F>
double timed(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  f();
  const double mine = MPI_Wtime() - start;
  double slowest = 0.0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// One rank's DGC step on ResNet-50 at `density`, encoded: this rank's message.
struct dgc_rank {
  gradcomp::dgc_compressor<float> compressor;
  std::vector<std::vector<float>> grads;
  std::vector<std::byte> message;

  explicit dgc_rank(double density) : compressor(config(density)) {
    std::mt19937 rng(17u + static_cast<unsigned>(world_rank()));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& t : resnet50()) {
      compressor.add_tensor(t.name, t.shape);
      grads.emplace_back(t.numel);
      for (auto& x : grads.back()) x = normal(rng);
    }
  }
  static gradcomp::dgc_config config(double density) {
    gradcomp::dgc_config cfg;
    cfg.schedule = gradcomp::warmup_schedule::constant(density);
    return cfg;
  }
  bool step() {
    std::vector<gradcomp::span<const float>> views;
    for (const auto& g : grads) views.emplace_back(g.data(), g.size());
    if (!compressor.compress(views)) return false;
    message.resize(compressor.max_message_bytes({}));
    const auto n = compressor.encode_message({}, gradcomp::span<std::byte>(message.data(), message.size()));
    if (!n) return false;
    message.resize(*n);
    return true;
  }
};

void report_bytes(benchmark::State& state, double sent, double received) {
  state.counters["ranks"] = world_size();
  state.counters["bytes_per_rank"] = sent;
  state.counters["bytes_received"] = received;
}

void dgc_exchange(benchmark::State& state, bool aggregate) {
  const double density = static_cast<double>(state.range(0)) * 1e-6;
  dgc_rank me(density);
  gradcomp::dgc_aggregator<float> agg(me.compressor);
  gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD);
  double sent = 0.0, received = 0.0;
  for (auto _ : state) {
    if (!me.step()) {
      state.SkipWithError("compress failed");
      break;
    }
    bool ok = true;
    const double t = timed([&] {
      ok = ex.allgather(gradcomp::span<const std::byte>(me.message.data(), me.message.size())).has_value();
      if (ok && aggregate) ok = ex.aggregate(agg).has_value();
    });
    if (!ok) {
      state.SkipWithError("exchange failed");
      break;
    }
    state.SetIterationTime(t);
    sent = static_cast<double>(me.message.size());
    received = 0.0;
    for (int r = 0; r < ex.size(); ++r)
      if (r != ex.rank()) received += static_cast<double>(ex.message(r).size());
  }
  report_bytes(state, sent, received);
}

// The whole step on one path: what reduce() costs when the automatic choice takes that path.
void BM_dgc_reduce(benchmark::State& state) {
  using gradcomp::comm::exchange_path;
  const double density = static_cast<double>(state.range(0)) * 1e-6;
  const exchange_path path = state.range(1) == 0 ? exchange_path::allgather : exchange_path::allreduce;
  dgc_rank me(density);
  gradcomp::dgc_aggregator<float> agg(me.compressor);
  gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD, path);
  for (auto _ : state) {
    if (!me.step()) {
      state.SkipWithError("compress failed");
      break;
    }
    bool ok = true;
    state.SetIterationTime(
        timed([&] { ok = ex.reduce(gradcomp::span<const std::byte>(me.message.data(), me.message.size()), agg).has_value(); }));
    if (!ok) {
      state.SkipWithError("reduce failed");
      break;
    }
  }
  const double n = static_cast<double>(gradcomp_bench::model_numel(resnet50()));
  const double ranks = world_size();
  // The dense path: a reduce-scatter and an allgather, each (N - 1) / N of the values per rank.
  const double moved = path == exchange_path::allreduce ? 2.0 * (ranks - 1) / ranks * 4.0 * n
                                                        : static_cast<double>(me.message.size()) * (ranks - 1);
  report_bytes(state, moved, moved);
}

// One rank's PowerSGD step on ResNet-50, its two rounds through exchange_rounds on one path.
// Per round, on the allgather path a rank sends its message and receives N - 1 messages; on the
// dense path it sends and receives 2 (N - 1) / N of the round's values (a reduce-scatter and an
// allgather of the sums).
void BM_powersgd_step(benchmark::State& state) {
  using gradcomp::comm::exchange_path;
  gradcomp::powersgd_config cfg;
  cfg.rank = static_cast<std::size_t>(state.range(0));
  const exchange_path path = state.range(1) == 0   ? exchange_path::allgather
                             : state.range(1) == 1 ? exchange_path::allreduce
                                                   : exchange_path::automatic;
  gradcomp::powersgd_compressor<float> c(cfg);
  std::vector<std::vector<float>> grads;
  std::mt19937 rng(17u + static_cast<unsigned>(world_rank()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& t : resnet50()) {
    c.add_tensor(t.name, t.shape);
    grads.emplace_back(t.numel);
    for (auto& x : grads.back()) x = normal(rng);
  }
  std::vector<gradcomp::span<const float>> views;
  for (const auto& g : grads) views.emplace_back(g.data(), g.size());
  const gradcomp::span<const gradcomp::span<const float>> all(views.data(), views.size());
  gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD, path);
  gradcomp::comm::round_buffers<float> buffers;
  const double ranks = world_size();
  double sent = 0.0, received = 0.0, payload = 0.0;
  for (auto _ : state) {
    // The messages of this step's rounds: a header, a section per vector, 4 bytes per value.
    std::vector<double> message, values;
    for (std::size_t k = 1; k <= c.rounds(); ++k) {
      message.push_back(static_cast<double>(gradcomp::wire::message_header_bytes +
                                            c.round_layout(k).tensors.size() * gradcomp::wire::section_header_bytes +
                                            4 * c.round_size(k)));
      values.push_back(4.0 * static_cast<double>(c.round_size(k)));
    }
    bool ok = true;
    state.SetIterationTime(timed([&] { ok = gradcomp::comm::exchange_rounds(ex, c, all, buffers).has_value(); }));
    if (!ok) {
      state.SkipWithError("exchange_rounds failed");
      break;
    }
    // Both rounds' messages are dense, so reduce's choice is the same for both: the last round's.
    const bool dense = ex.last_path() == exchange_path::allreduce;
    sent = received = 0.0;
    for (std::size_t k = 0; k < message.size(); ++k) {
      sent += dense ? 2.0 * (ranks - 1) / ranks * values[k] : message[k];
      received += dense ? 2.0 * (ranks - 1) / ranks * values[k] : message[k] * (ranks - 1);
    }
    payload = 0.0;
    for (const double v : values) payload += v;
  }
  report_bytes(state, sent, received);
  state.counters["payload_bytes"] = payload;  // the values of both rounds, as a dense allreduce sums them
}

void BM_dgc_allgather(benchmark::State& state) { dgc_exchange(state, false); }
void BM_dgc_aggregate(benchmark::State& state) { dgc_exchange(state, true); }

void BM_dense_allreduce(benchmark::State& state) {
  const std::size_t n = gradcomp_bench::model_numel(resnet50());
  std::vector<float> g(n, 1.0f + static_cast<float>(world_rank())), sum(n);
  for (auto _ : state) {
    int rc = MPI_SUCCESS;
    state.SetIterationTime(timed([&] {
      rc = MPI_Allreduce(g.data(), sum.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }));
    if (rc != MPI_SUCCESS) {
      state.SkipWithError("MPI_Allreduce failed");
      break;
    }
  }
  // A ring allreduce sends and receives 2 (N - 1) / N of the gradient per rank.
  const double ring = 2.0 * (world_size() - 1) / world_size() * 4.0 * static_cast<double>(n);
  report_bytes(state, ring, ring);
}

void BM_dense_rank_order(benchmark::State& state) {
  const std::size_t n = gradcomp_bench::model_numel(resnet50());
  std::vector<float> g(n);
  gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::fill(g.begin(), g.end(), 1.0f + static_cast<float>(world_rank()));
    bool ok = true;
    state.SetIterationTime(
        timed([&] { ok = ex.allreduce_sum(gradcomp::span<float>(g.data(), g.size())).has_value(); }));
    if (!ok) {
      state.SkipWithError("allreduce_sum failed");
      break;
    }
  }
  const double moved = 2.0 * (world_size() - 1) / world_size() * 4.0 * static_cast<double>(n);
  report_bytes(state, moved, moved);
}

BENCHMARK(BM_dgc_allgather)->Arg(1000)->Arg(10000)->Iterations(8)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dgc_aggregate)->Arg(1000)->Arg(10000)->Iterations(8)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dgc_reduce)->Args({1000, 0})->Args({1000, 1})->Iterations(4)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_powersgd_step)
    ->Args({1, 2})
    ->Args({4, 2})
    ->Args({4, 0})
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dense_allreduce)->Iterations(4)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dense_rank_order)->Iterations(4)->UseManualTime()->Unit(benchmark::kMillisecond);

// Discards what it is given: the reporter of every rank but 0.
class silent_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  // Ranks other than 0 run the same benchmarks (the collectives must match) and report nothing.
  std::vector<char*> args(argv, argv + argc);
  if (world_rank() != 0)
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; }),
               args.end());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (world_rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
