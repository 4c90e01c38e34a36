// Command-line helpers of the demo's programs (train_fashion_mnist, train_libtorch): numbers and
// lists from option values, usage errors that exit with status 2. Part of the example, not the
// library.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <algorithm>
#include <vector>

#include "modes.hpp"  // train_options, mode_names
#if defined(FMNIST_WITH_MPI)
#include <mpi.h>
#endif

namespace fmnist {

/// A program's name and usage text, for its usage errors.
struct command_line {
  const char* program;
  const char* usage;

  /// Prints "program: what" and the usage to stderr, exits with status 2.
  [[noreturn]] void error(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n%s", program, what.c_str(), usage);
    std::exit(2);
  }
  /// The finite number `s` of option `flag`.
  double number(const std::string& flag, const std::string& s) const {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(v)) error(flag + " needs a number, got '" + s + "'");
    return v;
  }
  /// The value of option `flag`, the argument after `argv[i]` (`i` moves to it); a usage error
  /// when the arguments end first.
  std::string value(int argc, char** argv, int& i, const std::string& flag) const {
    if (i + 1 >= argc) error(flag + " needs a value");
    return argv[++i];
  }
  /// --list-modes: prints every mode's name and description, exits with status 0.
  [[noreturn]] static void list_modes() {
    for (const auto& m : modes()) std::printf("%-14s %s\n", m.name.c_str(), m.description.c_str());
    std::exit(0);
  }
  /// The --mpi flag: true in a build with MPI (FMNIST_WITH_MPI), a usage error otherwise.
  bool mpi_flag() const {
#if defined(FMNIST_WITH_MPI)
    return true;
#else
    error("--mpi needs a build with MPI (install libopenmpi-dev and reconfigure)");
#endif
  }
  /// Reports a failed run as "program: what" on stderr and returns exit status 1. With
  /// `end_job` (one process of an MPI job, whose other processes may be waiting in a collective
  /// for this one) the whole job ends instead.
  int failure(const char* what, bool end_job) const {
    std::fprintf(stderr, "%s: %s\n", program, what);
#if defined(FMNIST_WITH_MPI)
    if (end_job) MPI_Abort(MPI_COMM_WORLD, 1);
#else
    (void)end_job;
#endif
    return 1;
  }
  /// The whole number `s` (>= 0) of option `flag`.
  std::size_t count(const std::string& flag, const std::string& s) const {
    const double v = number(flag, s);
    if (v < 0 || v != std::floor(v) || v > 1e12) error(flag + " needs a whole number >= 0, got '" + s + "'");
    return static_cast<std::size_t>(v);
  }
};

/// The non-empty items of a comma-separated list.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

/**
 * The options both trainers take: --modes, --batch, --lr, --density, --warmup-epochs,
 * --min-kept, --small-tensors, --qsgd-levels, --train-limit, --test-limit and --max-steps, into
 * `modes` and `o`
 * (`value()` reads the option's value). Returns false for any other option.
 */
template <class Value>
bool training_option(const command_line& cmd, const std::string& a, Value&& value, std::vector<std::string>& modes,
                     train_options& o) {
  if (a == "--modes") modes = split_list(value());
  else if (a == "--batch") o.batch = cmd.count(a, value());
  else if (a == "--lr") o.lr = cmd.number(a, value());
  else if (a == "--density") o.final_density = cmd.number(a, value());
  else if (a == "--warmup-epochs") o.warmup_epochs = cmd.number(a, value());
  else if (a == "--min-kept") o.small_tensors.min_kept = cmd.count(a, value());
  else if (a == "--small-tensors") {
    const std::string v = value();
    if (v == "floor") o.small_tensors.action = gradcomp::small_tensor_action::floor;
    else if (v == "dense") o.small_tensors.action = gradcomp::small_tensor_action::dense;
    else cmd.error("--small-tensors must be 'floor' or 'dense', not '" + v + "'");
  }
  else if (a == "--qsgd-levels") {
    const std::size_t s = cmd.count(a, value());
    if (s < 1 || s > 65535) cmd.error("--qsgd-levels must be in [1, 65535]");
    o.qsgd_levels = static_cast<std::uint32_t>(s);
  }
  else if (a == "--train-limit") o.train_limit = cmd.count(a, value());
  else if (a == "--test-limit") o.test_limit = cmd.count(a, value());
  else if (a == "--max-steps") o.max_steps = cmd.count(a, value());
  else return false;
  return true;
}

/// Checks what `training_option` read (and the worker and epoch counts): a usage error otherwise.
inline void check_training_options(const command_line& cmd, const std::vector<std::string>& modes,
                                   const train_options& o) {
  if (modes.empty()) cmd.error("--modes is empty");
  const std::vector<std::string> known = mode_names();
  for (const auto& m : modes)
    if (std::find(known.begin(), known.end(), m) == known.end()) cmd.error("unknown mode '" + m + "'");
  if (o.workers == 0 || o.epochs == 0 || o.batch == 0) cmd.error("--workers, --epochs and --batch must be > 0");
  if (!(o.final_density > 0.0 && o.final_density <= 1.0)) cmd.error("--density must be in (0, 1]");
  if (!(o.lr > 0.0)) cmd.error("--lr must be > 0");
  if (!(o.warmup_epochs >= 0.0)) cmd.error("--warmup-epochs must be >= 0");
}

}  // namespace fmnist
