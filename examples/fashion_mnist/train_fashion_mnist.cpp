// Data-parallel training on Fashion-MNIST with and without Deep Gradient Compression.
//
// N simulated workers (default 4) train a 784-512-256-10 MLP on the real Fashion-MNIST files;
// every worker's gradient goes through gradcomp (compress -> wire bytes -> decode-and-accumulate)
// and one averaged update is applied. The modes (dense, dgc, topk_ef, dgc_no_warmup) run with the
// same seed, data order and epochs, and a table compares accuracy and bytes on the wire.
//
//   train_fashion_mnist                       quick comparison of the four modes, 4 workers
//   train_fashion_mnist --full                longer comparison, 8 workers
//   train_fashion_mnist --modes dense,dgc --workers 2 --epochs 3 --summary-json out.json
//   mpirun -np 4 train_fashion_mnist --mpi    one worker per MPI process: the same run, bit for bit
//
// Run with --help for every option.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_line.hpp"
#include "dataset.hpp"
#include "trainer.hpp"
#if defined(FMNIST_WITH_MPI)
#include "exchange_mpi.hpp"
#endif

namespace {

struct cli {
  fmnist::train_options train;
  std::vector<std::string> modes = fmnist::mode_names();
  std::string data_dir = fmnist::default_data_dir();
  std::string csv = "train_fashion_mnist.csv";
  std::string summary_json;
  std::size_t jobs = 0;
  bool full = false;
  bool workers_set = false;
  bool mpi = false;
};

const char* usage_text =
    "usage: train_fashion_mnist [options]\n"
    "  --modes LIST         comma-separated, from --list-modes (default: all)\n"
    "  --list-modes         print every mode, one per line with what it does, and exit\n"
    "  --workers N          simulated workers (default 4; 8 with --full)\n"
    "  --epochs E           epochs (default 5; 12 with --full)\n"
    "  --full               the longer comparison: 8 workers, 12 epochs\n"
    "  --batch B            images per worker per step (default 32)\n"
    "  --lr X               peak learning rate, cosine decay to 0 (default 0.1)\n"
    "  --density D          final density of DGC modes (default 0.001 = 99.9% sparsity)\n"
    "  --warmup-epochs W    length of the warm-up to that density (default 1)\n"
    "  --min-kept N         the top-k modes keep at least N elements of a tensor that their density\n"
    "                       leaves fewer (default 0: none)\n"
    "  --small-tensors A    what such a tensor does: floor (keeps N) or dense (is sent whole)\n"
    "  --qsgd-levels S      QSGD's levels of a bucket's norm, 1 to 65535 (default 15)\n"
    "  --clip X             DGC's gradient clipping threshold (default 5)\n"
    "  --dense-biases       send bias vectors dense instead of sparsifying them\n"
    "  --train-limit N      train on the first N images only (default: all 60000)\n"
    "  --test-limit N       evaluate on the first N test images only (default: all 10000)\n"
    "  --max-steps S        stop every mode after S steps\n"
    "  --seed S             seed of initial weights, data order and sampling (default 1)\n"
    "  --jobs J             modes trained at the same time (default: number of cores)\n"
    "  --mpi                one worker per MPI process (run under mpirun; --workers defaults to\n"
    "                       the number of processes): the same run as in one process, bit for bit\n"
    "  --backend NAME       where the workers compress and the replica sums: cpu (default);\n"
    "                       thrust: the portable Thrust backend on OpenMP, the code a GPU runs,\n"
    "                       the same results bit for bit (builds with the Thrust headers);\n"
    "                       cuda: that backend on the GPU (train_fashion_mnist_cuda, built by nvcc)\n"
    "  --data DIR           directory of the IDX files (default /usr/share/datasets/fashion-mnist)\n"
    "  --csv FILE           per-epoch CSV (default train_fashion_mnist.csv; '' to skip)\n"
    "  --summary-json FILE  one JSON object per mode\n";

const fmnist::command_line command{"train_fashion_mnist", usage_text};

cli parse(int argc, char** argv) {
  cli c;
  bool& workers_set = c.workers_set;
  bool epochs_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return command.value(argc, argv, i, a); };
    if (a == "--list-modes") {
      fmnist::command_line::list_modes();
    }
    if (a == "--help" || a == "-h") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else if (a == "--full") {
      c.full = true;
    } else if (a == "--workers") {
      c.train.workers = command.count(a, value());
      workers_set = true;
    } else if (a == "--epochs") {
      c.train.epochs = command.count(a, value());
      epochs_set = true;
    } else if (a == "--clip") {
      c.train.clip_norm = command.number(a, value());
    } else if (a == "--dense-biases") {
      c.train.compress_vectors = false;
    } else if (a == "--seed") {
      c.train.seed = command.count(a, value());
    } else if (a == "--jobs") {
      c.jobs = command.count(a, value());
    } else if (a == "--backend") {
      c.train.backend = value();
    } else if (a == "--data") {
      c.data_dir = value();
    } else if (a == "--csv") {
      c.csv = value();
    } else if (a == "--summary-json") {
      c.summary_json = value();
    } else if (a == "--mpi") {
      c.mpi = command.mpi_flag();
    } else if (!fmnist::training_option(command, a, value, c.modes, c.train)) {
      command.error("unknown option '" + a + "'");
    }
  }
  if (c.full) {
    if (!workers_set) c.train.workers = 8;
    if (!epochs_set) c.train.epochs = 12;
  }
  fmnist::check_training_options(command, c.modes, c.train);
  const std::vector<std::string> backends = fmnist::backend_names();
  if (std::find(backends.begin(), backends.end(), c.train.backend) == backends.end())
    command.error("unknown or unavailable backend '" + c.train.backend + "'");
  if (!(c.train.clip_norm >= 0.0)) command.error("--clip must be >= 0");
  if (c.jobs == 0) c.jobs = std::max(1u, std::thread::hardware_concurrency());
  return c;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void write_csv(const std::string& path, const std::vector<fmnist::run_result>& runs) {
  std::ofstream out(path);
  out << "mode,workers,epoch,steps,train_loss,test_loss,test_accuracy,density,"
         "wire_bytes_per_step,compression_ratio,seconds\n";
  for (const auto& r : runs)
    for (const auto& e : r.epochs)
      out << r.mode << ',' << r.workers << ',' << e.epoch << ',' << e.steps << ','
          << fmt("%.6f", e.train_loss) << ',' << fmt("%.6f", e.test_loss) << ','
          << fmt("%.6f", e.test_accuracy) << ',' << fmt("%.6g", e.density) << ','
          << fmt("%.1f", e.bytes_per_step) << ',' << fmt("%.2f", e.ratio) << ','
          << fmt("%.3f", e.seconds) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_json(const std::string& path, const std::vector<fmnist::run_result>& runs,
                const fmnist::train_options& o) {
  std::ofstream out(path);
  out << "[\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    out << "  {\"mode\": \"" << r.mode << "\", \"backend\": \"" << o.backend << "\", \"workers\": " << r.workers
        << ", \"epochs\": " << r.epochs.size() << ", \"steps\": " << r.steps
        << ", \"batch_per_worker\": " << o.batch << ", \"parameters\": " << r.parameters
        << ", \"final_sparsity\": " << fmt("%.17g", 1.0 - r.final_density)
        << ", \"sent_fraction\": " << fmt("%.6g", r.sent_fraction)
        << ", \"test_accuracy\": " << fmt("%.17g", r.final_accuracy)
        << ", \"best_test_accuracy\": " << fmt("%.17g", r.best_accuracy)
        << ", \"wire_bytes_per_step\": " << fmt("%.17g", r.bytes_per_step_final)
        << ", \"wire_bytes_per_step_run\": " << fmt("%.1f", r.bytes_per_step_run)
        << ", \"dense_bytes_per_step\": " << fmt("%.0f", r.dense_bytes)
        << ", \"compression_ratio\": " << fmt("%.17g", r.ratio_final)
        << ", \"compression_ratio_run\": " << fmt("%.17g", r.ratio_run)
        << ", \"clipped_fraction\": " << fmt("%.4f", r.clipped_fraction)
        << ", \"weights_fnv1a\": \"" << hex64(r.weights_fnv1a) << "\""
        << ", \"compress_seconds\": " << fmt("%.3f", r.compress_seconds)
        << ", \"step_seconds\": " << fmt("%.3f", r.step_seconds) << "}"
        << (i + 1 < runs.size() ? ",\n" : "\n");
  }
  out << "]\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

// The results table: every column a function of the run's numerics, so the same run prints the
// same table on every machine (scripts/demo_tables.py renders it from the summary JSON, and the
// test demo.table_format checks that the two agree). Times are in print_times.
void print_table(const std::vector<fmnist::run_result>& runs) {
  const fmnist::run_result* dense = nullptr;
  for (const auto& r : runs)
    if (r.mode == "dense") dense = &r;
  std::printf("\n%-14s %9s %9s %8s %10s %14s %10s %10s\n", "mode", "final acc", "best acc", "vs dense",
              "sparsity", "bytes/step", "ratio", "ratio run");
  for (const auto& r : runs) {
    const std::string delta =
        dense ? fmt("%+.2f pp", 100.0 * (r.final_accuracy - dense->final_accuracy)) : "-";
    std::printf("%-14s %8.2f%% %8.2f%% %8s %9.2f%% %14.0f %9.1fx %9.1fx\n", r.mode.c_str(),
                100.0 * r.final_accuracy, 100.0 * r.best_accuracy, delta.c_str(),
                100.0 * (1.0 - r.final_density), r.bytes_per_step_final, r.ratio_final, r.ratio_run);
  }
  std::printf(
      "\nbytes/step: mean wire message bytes per worker per step at the final density (whole\n"
      "messages: headers, every tensor, checksum); ratio: dense fp32 gradient bytes over that;\n"
      "ratio run: the same over the whole run, warm-up included.\n");
}

// This machine's times, which differ from run to run.
void print_times(const std::vector<fmnist::run_result>& runs) {
  std::printf("\n%-14s %9s %10s\n", "mode", "step ms", "comp/step");
  for (const auto& r : runs)
    std::printf("%-14s %9.2f %9.1f%%\n", r.mode.c_str(), 1e3 * r.step_seconds / static_cast<double>(r.steps),
                100.0 * r.compress_seconds / r.step_seconds);
  std::printf(
      "\nstep ms: wall time of a training step, all workers' gradients included; comp/step: its share\n"
      "spent compressing, encoding, decoding and aggregating.\n");
}

}  // namespace

int main(int argc, char** argv) {
  cli c = parse(argc, argv);
  bool speaks = true;  // this process prints and writes the results (rank 0 under --mpi)
#if defined(FMNIST_WITH_MPI)
  const fmnist::mpi_session mpi(c.mpi, argc, argv);
  if (c.mpi) {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    speaks = rank == 0;
    if (!c.workers_set) c.train.workers = static_cast<std::size_t>(ranks);
    if (c.train.workers != static_cast<std::size_t>(ranks)) {
      if (speaks)
        std::fprintf(stderr, "train_fashion_mnist: --mpi runs one worker per process: --workers %zu, %d processes\n",
                     c.train.workers, ranks);
      return 2;
    }
    c.jobs = 1;  // one mode at a time: every process takes part in every collective, in order
  }
#endif
  try {
    fmnist::pin_eigen_blocking();  // the same bits on every machine (before any thread multiplies)
    fmnist::dataset train = fmnist::load_split(c.data_dir, "train");
    fmnist::dataset test = fmnist::load_split(c.data_dir, "t10k");
    double mean = 0.0, stddev = 1.0;
    train = fmnist::head(train, c.train.train_limit);
    fmnist::pixel_stats(train, mean, stddev);
    fmnist::normalise(train, mean, stddev);
    fmnist::normalise(test, mean, stddev);
    const fmnist::train_options& o = c.train;
    const std::size_t steps_per_epoch = train.count / o.workers / o.batch;
    if (speaks) {
      std::printf("Fashion-MNIST: %zu training images, %zu test images; MLP", train.count,
                  o.test_limit ? std::min(o.test_limit, test.count) : test.count);
      for (std::size_t i = 0; i < o.layers.size(); ++i) std::printf("%s%zu", i ? "-" : " ", o.layers[i]);
      std::printf("\n%zu workers%s x batch %zu, %zu epochs of %zu steps, lr %g (cosine), momentum %g, backend %s\n",
                  o.workers, c.mpi ? " (one per MPI process)" : "", o.batch, o.epochs, steps_per_epoch, o.lr,
                  o.momentum, o.backend.c_str());
      std::printf("DGC: final density %g, warm-up %g epoch(s), clip %g, biases %s", o.final_density,
                  o.warmup_epochs, o.clip_norm, o.compress_vectors ? "sparsified" : "dense");
      if (o.small_tensors.min_kept > 0)
        std::printf(", tensors that keep fewer than %zu elements %s", o.small_tensors.min_kept,
                    o.small_tensors.action == gradcomp::small_tensor_action::dense ? "sent dense" : "keep that many");
      std::printf("; modes:");
      for (const auto& m : c.modes) std::printf(" %s", m.c_str());
      std::printf("\n\n");
      std::fflush(stdout);
    }

    std::vector<fmnist::run_result> runs(c.modes.size());
    std::vector<std::string> errors(c.modes.size());
    std::mutex print_mutex;
    auto run_one = [&](std::size_t i) {
      try {
        const auto spec = fmnist::make_mode(c.modes[i], o, steps_per_epoch);
        const auto progress = [&](const fmnist::run_result& r, const fmnist::epoch_record& e) {
          if (!speaks) return;
          std::lock_guard<std::mutex> lock(print_mutex);
          std::printf("[%-13s] epoch %2zu/%zu  train loss %.4f  test acc %6.2f%%  density %-9.4g "
                      "bytes/step %9.0f  ratio %7.1fx  %5.1f s\n",
                      r.mode.c_str(), e.epoch, o.epochs, e.train_loss, 100.0 * e.test_accuracy,
                      e.density, e.bytes_per_step, e.ratio, e.seconds);
          std::fflush(stdout);
        };
#if defined(FMNIST_WITH_MPI)
        if (c.mpi) {
          fmnist::mpi_process_exchange across(MPI_COMM_WORLD);
          runs[i] = fmnist::train(spec, train, test, o, progress, nullptr, &across);
          return;
        }
#endif
        runs[i] = fmnist::train(spec, train, test, o, progress);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    };
    // Modes are independent: `jobs` threads take them in order.
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> pool;
    for (std::size_t j = 0; j < std::min(c.jobs, c.modes.size()); ++j)
      pool.emplace_back([&] {
        for (std::size_t i = next++; i < c.modes.size(); i = next++) run_one(i);
      });
    for (auto& t : pool) t.join();
    for (std::size_t i = 0; i < errors.size(); ++i)
      if (!errors[i].empty()) throw std::runtime_error("mode " + c.modes[i] + ": " + errors[i]);
    if (!speaks) return 0;

    print_table(runs);
    print_times(runs);
    if (!c.csv.empty()) {
      write_csv(c.csv, runs);
      std::printf("per-epoch figures: %s\n", c.csv.c_str());
    }
    if (!c.summary_json.empty()) {
      write_json(c.summary_json, runs, o);
      std::printf("summary: %s\n", c.summary_json.c_str());
    }
  } catch (const fmnist::load_error& e) {
    return command.failure(e.what(), false);  // every process reads the data and fails alike
  } catch (const std::exception& e) {
    return command.failure(e.what(), c.mpi);
  }
  return 0;
}
