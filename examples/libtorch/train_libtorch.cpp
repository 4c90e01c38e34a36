// Data-parallel training of a small CNN on Fashion-MNIST in libtorch, with every gradcomp
// compressor selectable by name.
//
// N workers (simulated in this process, or one per MPI process with --mpi) each compute their
// gradient with torch's autograd into their own .grad() tensors; gradcomp compresses straight from
// those tensors' memory, the messages go through the wire format, every replica decodes and
// averages them, and torch's SGD applies the average to the parameters in place. Modes come from
// the demo's registry (examples/fashion_mnist/modes.cpp): dense, dgc, topk_ef, ef_signsgd,
// terngrad, onebit_sgd, qsgd, adacomp, saef_topk, saef_sign, isgq, ...
//
//   train_libtorch                                    every mode, 4 workers, 1 epoch
//   train_libtorch --modes dense,dgc --workers 8 --seeds 1,2,3 --json runs.jsonl
//   mpirun -np 4 train_libtorch --mpi --modes dgc     one worker per MPI process
//
// Run with --help for every option.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cnn.hpp"
#include "command_line.hpp"
#include "numerics.hpp"
#include "torch_data.hpp"
#include "trainer.hpp"
#if defined(FMNIST_WITH_MPI)
#include "exchange_mpi.hpp"
#endif

namespace {

struct cli {
  fmnist::train_options train;
  std::vector<std::string> modes = fmnist::mode_names();
  std::vector<std::size_t> seeds = {1};
  double weight_decay = 1e-4;
  std::string data_dir = fmnist::default_data_dir();
  std::string cache = "fashion-mnist-idx";
  std::string json;
  double min_accuracy = 0.0;
  int threads = 0;
  bool portable = false;
  bool mpi = false;
};

const char* help =
    "usage: train_libtorch [options]\n"
    "  --modes LIST         comma-separated, from the registry (default: all; --list-modes)\n"
    "  --list-modes         print every mode with what it does, and exit\n"
    "  --workers N          data-parallel workers (default 4)\n"
    "  --seeds LIST         seeds of initial weights, data order and sampling; one run each (default 1)\n"
    "  --epochs E           epochs (default 1)\n"
    "  --batch B            images per worker per step (default 32)\n"
    "  --lr X               peak learning rate, cosine decay to 0 (default 0.1)\n"
    "  --weight-decay X     torch::optim::SGD's weight decay (default 1e-4)\n"
    "  --density D          final density of the top-k modes (default 0.001)\n"
    "  --warmup-epochs W    their warm-up to that density (default 0.25)\n"
    "  --min-kept N         the top-k modes keep at least N elements of a tensor that their density\n"
    "                       leaves fewer (default 0: none)\n"
    "  --small-tensors A    what such a tensor does: floor (keeps N) or dense (is sent whole)\n"
    "  --qsgd-levels S      QSGD's levels of a bucket's norm, 1 to 65535 (default 15)\n"
    "  --train-limit N      train on the first N images only (default: all 60000)\n"
    "  --test-limit N       evaluate on the first N test images only (default: all 10000)\n"
    "  --max-steps S        stop each run after S steps\n"
    "  --threads T          torch's intra-op threads (default: torch's choice)\n"
    "  --portable           the same bits on every x86-64 machine: torch's baseline kernels, no oneDNN,\n"
    "                       one thread (slower; without it the bits follow the CPU; numerics.hpp)\n"
    "  --min-accuracy A     exit with status 3 if a run ends below test accuracy A (0..1)\n"
    "  --json FILE          one JSON object per run, one per line\n"
    "  --data DIR           the Fashion-MNIST IDX files, gzipped or not (default "
    "/usr/share/datasets/fashion-mnist)\n"
    "  --cache DIR          where they are inflated for torch's MNIST reader (default fashion-mnist-idx)\n"
    "  --mpi                one worker per MPI process (under mpirun): the same run, bit for bit\n";

const fmnist::command_line command{"train_libtorch", help};

cli parse(int argc, char** argv) {
  cli c;
  c.train.epochs = 1;
  c.train.warmup_epochs = 0.25;
  bool workers_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return command.value(argc, argv, i, a); };
    if (a == "--help" || a == "-h") {
      std::fputs(help, stdout);
      std::exit(0);
    } else if (a == "--list-modes") {
      fmnist::command_line::list_modes();
    } else if (a == "--workers") {
      c.train.workers = command.count(a, value());
      workers_set = true;
    } else if (a == "--seeds") {
      c.seeds.clear();
      for (const auto& s : fmnist::split_list(value())) c.seeds.push_back(command.count(a, s));
    } else if (a == "--epochs") {
      c.train.epochs = command.count(a, value());
    } else if (a == "--weight-decay") {
      c.weight_decay = command.number(a, value());
    } else if (a == "--threads") {
      c.threads = static_cast<int>(command.count(a, value()));
    } else if (a == "--portable") {
      c.portable = true;
    } else if (a == "--min-accuracy") {
      c.min_accuracy = command.number(a, value());
    } else if (a == "--json") {
      c.json = value();
    } else if (a == "--data") {
      c.data_dir = value();
    } else if (a == "--cache") {
      c.cache = value();
    } else if (a == "--mpi") {
      c.mpi = command.mpi_flag();
    } else if (!fmnist::training_option(command, a, value, c.modes, c.train)) {
      command.error("unknown option '" + a + "'");
    }
  }
  fmnist::check_training_options(command, c.modes, c.train);
  if (c.seeds.empty()) command.error("--seeds is empty");
  if (!(c.weight_decay >= 0.0)) command.error("--weight-decay must be >= 0");
  if (!(c.min_accuracy >= 0.0 && c.min_accuracy <= 1.0)) command.error("--min-accuracy must be in [0, 1]");
  if (c.mpi && workers_set) command.error("--mpi runs one worker per process: leave --workers out");
  if (c.portable && c.threads > 1) command.error("--portable runs torch on one thread: leave --threads out");
  return c;
}

std::string json_line(const fmnist::run_result& r, std::size_t seed, const fmnist::train_options& o) {
  const double steps = static_cast<double>(r.steps);
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"mode\": \"%s\", \"workers\": %zu, \"seed\": %zu, \"epochs\": %zu, \"steps\": %zu, "
                "\"batch\": %zu, \"parameters\": %zu, \"final_accuracy\": %.6f, \"best_accuracy\": %.6f, "
                "\"dense_bytes\": %.0f, \"bytes_per_step\": %.1f, \"bytes_per_step_final\": %.1f, "
                "\"ratio\": %.2f, \"ratio_final\": %.2f, \"compute_ms\": %.4f, \"compress_ms\": %.4f, "
                "\"exchange_ms\": %.4f, \"step_ms\": %.4f, \"min_kept\": %zu, \"small_tensors\": \"%s\", "
                "\"lr\": %g, \"warmup_epochs\": %g, \"density\": %g, \"qsgd_levels\": %u, "
                "\"weights_fnv1a\": \"%016llx\"",
                r.mode.c_str(), r.workers, seed, o.epochs, r.steps, o.batch, r.parameters, r.final_accuracy,
                r.best_accuracy, r.dense_bytes, r.bytes_per_step_run, r.bytes_per_step_final, r.ratio_run,
                r.ratio_final, 1e3 * r.compute_seconds / steps,
                1e3 * (r.compress_seconds - r.exchange_seconds) / steps, 1e3 * r.exchange_seconds / steps,
                1e3 * r.step_seconds / steps, o.small_tensors.min_kept,
                o.small_tensors.action == gradcomp::small_tensor_action::dense ? "dense" : "floor", o.lr,
                o.warmup_epochs, o.final_density, static_cast<unsigned>(o.qsgd_levels),
                static_cast<unsigned long long>(r.weights_fnv1a));
  // The test accuracy after each epoch: where the run stopped improving.
  std::string line = buf;
  line += ", \"epoch_accuracy\": [";
  for (std::size_t e = 0; e < r.epochs.size(); ++e) {
    std::snprintf(buf, sizeof buf, "%s%.4f", e ? ", " : "", r.epochs[e].test_accuracy);
    line += buf;
  }
  return line + "]}";
}

}  // namespace

int main(int argc, char** argv) {
  cli c = parse(argc, argv);
  bool speaks = true;
#if defined(FMNIST_WITH_MPI)
  const fmnist::mpi_session mpi(c.mpi, argc, argv);
  if (c.mpi) {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    speaks = rank == 0;
    c.train.workers = static_cast<std::size_t>(ranks);
  }
#endif
  if (c.portable) torch_demo::pin_numerics();
  else if (c.threads > 0) torch::set_num_threads(c.threads);
  try {
    torch_demo::prepare_idx_dir(c.data_dir, c.cache);
    fmnist::dataset train = fmnist::head(torch_demo::load_split(c.cache, true), c.train.train_limit);
    fmnist::dataset test = torch_demo::load_split(c.cache, false);
    double mean = 0.0, stddev = 1.0;
    fmnist::pixel_stats(train, mean, stddev);
    fmnist::normalise(train, mean, stddev);
    fmnist::normalise(test, mean, stddev);
    const std::size_t steps_per_epoch = train.count / c.train.workers / c.train.batch;
    if (speaks)
      std::printf("Fashion-MNIST (torch's MNIST reader): %zu training images; CNN; %zu workers%s x batch %zu, "
                  "%zu epoch(s) of %zu steps, lr %g (cosine), momentum %g, weight decay %g\n",
                  train.count, c.train.workers, c.mpi ? " (one per MPI process)" : "", c.train.batch,
                  c.train.epochs, steps_per_epoch, c.train.lr, c.train.momentum, c.weight_decay);
    std::ofstream json;
    if (speaks && !c.json.empty()) {
      json.open(c.json, std::ios::app);
      if (!json) throw std::runtime_error("cannot write " + c.json);
    }
    bool below = false;
    for (const std::size_t seed : c.seeds)
      for (const auto& name : c.modes) {
        fmnist::train_options o = c.train;
        o.seed = seed;
        torch_demo::cnn model(seed, c.weight_decay);
        fmnist::exchange* across = nullptr;
#if defined(FMNIST_WITH_MPI)
        std::unique_ptr<fmnist::mpi_process_exchange> mpi;
        if (c.mpi) across = (mpi = std::make_unique<fmnist::mpi_process_exchange>(MPI_COMM_WORLD)).get();
#endif
        const auto r = fmnist::train_model(model, fmnist::make_mode(name, o, steps_per_epoch), train, test, o, {}, across);
        below = below || r.final_accuracy < c.min_accuracy;
        if (!speaks) continue;
        const double steps = static_cast<double>(r.steps);
        std::printf("%-12s seed %zu  test acc %6.2f%%  bytes/step %9.0f  ratio %7.1fx  ms/step: compute %6.2f  "
                    "compress %6.2f  exchange %6.2f\n",
                    name.c_str(), seed, 100.0 * r.final_accuracy, r.bytes_per_step_run, r.ratio_run,
                    1e3 * r.compute_seconds / steps, 1e3 * (r.compress_seconds - r.exchange_seconds) / steps,
                    1e3 * r.exchange_seconds / steps);
        std::fflush(stdout);
        if (json) json << json_line(r, seed, o) << "\n" << std::flush;
      }
    if (below) {
      if (speaks) std::fprintf(stderr, "train_libtorch: a run ended below test accuracy %g\n", c.min_accuracy);
      return 3;
    }
  } catch (const fmnist::load_error& e) {
    return command.failure(e.what(), false);  // every process reads the data and fails alike
  } catch (const std::exception& e) {
    return command.failure(e.what(), c.mpi);
  }
  return 0;
}
