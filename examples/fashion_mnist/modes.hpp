// The demo's modes as a registry: each entry names a mode, says what it is, and makes its
// settings (the compressor every worker runs and the receiver's settings). A mode is added by
// adding one entry to `modes()`; the command line, the usage text and the tests take the names
// from there. The backends the workers and the replica run on are listed the same way
// (`backend_names()`). Part of the example, not of the library.
//
// The registry and its adapters, which instantiate every compressor on every backend, are
// compiled once, in modes.cpp (the library target gradcomp_fashion_mnist; by nvcc, modes_cuda.cu):
// the demo, its tests and the libtorch trainer include this header only.
#pragma once

#include <gradcomp/gradcomp.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mlp.hpp"

namespace fmnist {

/// Everything one training run needs besides the mode.
struct train_options {
  std::size_t workers = 4;
  std::size_t epochs = 5;
  std::size_t batch = 32;             ///< images per worker per step
  std::size_t train_limit = 0;        ///< use the first n training images (0: all)
  std::size_t test_limit = 0;         ///< evaluate on the first n test images (0: all)
  std::size_t max_steps = 0;          ///< stop after this many steps (0: run all epochs)
  std::vector<std::size_t> layers = {784, 512, 256, 10};
  double lr = 0.1;                    ///< peak learning rate (cosine decay to 0 over the run)
  double momentum = 0.9;
  double final_density = 0.001;       ///< 99.9% sparsity
  double warmup_epochs = 1.0;         ///< length of DGC's warm-up (4 stages)
  double clip_norm = 5.0;             ///< DGC's global clipping threshold (local: / sqrt(N))
  bool compress_vectors = true;       ///< sparsify biases too (see README: small tensors)
  /// The top-k modes' rule for tensors their density leaves with few elements (--min-kept,
  /// --small-tensors; docs/algorithms.md, "Tensors too small to sparsify"); off by default.
  gradcomp::small_tensor_policy small_tensors{};
  std::uint32_t qsgd_levels = 15;     ///< QSGD's levels s of a bucket's norm (--qsgd-levels)
  std::uint64_t seed = 1;
  std::string backend = "cpu";        ///< where compression and the sums run (backend_names())
  /// How messages are encoded: smallest index coding per tensor, fp32 values, CRC-32C.
  gradcomp::wire::encode_options wire = [] {
    gradcomp::wire::encode_options w;
    w.checksum = true;
    return w;
  }();
};

/// A worker of a method whose step is several rounds of averaging over the workers (PowerSGD,
/// `powersgd_adapter`): the trainer opens the step with the worker's gradients, then for each
/// round sends the worker's message, averages every worker's with an aggregator of the round
/// (`round_kind`, `round_layout`) and hands the average back; the worker's `update` is then the
/// step's averaged gradient, the same bits on every worker.
class round_worker {
 public:
  virtual ~round_worker() = default;
  virtual gradcomp::result<void> begin(const std::vector<gradcomp::span<const float>>& grads) = 0;
  /// The round the open step awaits (1, 2, ...), 0 once it is complete.
  virtual std::size_t round() const = 0;
  virtual gradcomp::wire::message_kind round_kind() const = 0;
  virtual gradcomp::receiver_layout round_layout() const = 0;
  /// The longest message of any round.
  virtual std::size_t max_round_bytes(const gradcomp::wire::encode_options& opt) const = 0;
  virtual gradcomp::result<std::size_t> encode_round(const gradcomp::wire::encode_options& opt,
                                                     gradcomp::span<std::byte> out) const = 0;
  virtual gradcomp::result<void> end_round(gradcomp::span<const float> average) = 0;
  /// Elements this worker sent in the rounds of the last step.
  virtual std::size_t sent_elements() const = 0;
  /// Tensor t's averaged gradient from the last step.
  virtual gradcomp::span<const float> update(std::size_t t) const = 0;
};

/// One worker's compressor behind the common interface (any gradcomp compressor: see
/// `compressor_adapter`), with the per-step hooks the trainer calls.
class worker_compressor {
 public:
  virtual ~worker_compressor() = default;
  virtual std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                                 gradcomp::tensor_mode mode) = 0;
  virtual const gradcomp::tensor_info& info(std::size_t id) const = 0;
  /// Before each step: the epoch (for warm-up schedules) and the learning rate (for compressors
  /// whose messages carry it).
  virtual void begin_step(std::size_t epoch, double lr) = 0;
  /// Target density of the next step (1 for compressors that send every element).
  virtual double density() = 0;
  /// The density the run ends at.
  virtual double final_density() const = 0;
  virtual gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& grads) = 0;
  /// Whether the workers agree on their scales before each step (TernGrad's scale sharing): then
  /// the trainer takes every worker's `local_scales`, their maximum through the exchange, and
  /// calls `compress_shared` with it instead of `compress`.
  virtual bool shares_scales() const { return false; }
  virtual gradcomp::result<std::vector<float>> local_scales(const std::vector<gradcomp::span<const float>>&) {
    return gradcomp::fail(gradcomp::errc::invalid_argument);
  }
  virtual gradcomp::result<void> compress_shared(const std::vector<gradcomp::span<const float>>&,
                                                 gradcomp::span<const float>) {
    return gradcomp::fail(gradcomp::errc::invalid_argument);
  }
  virtual gradcomp::result<gradcomp::step_stats> stats() = 0;
  virtual std::size_t max_message_bytes(const gradcomp::wire::encode_options& opt) const = 0;
  virtual gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options& opt,
                                                       gradcomp::span<std::byte> out) = 0;
  virtual gradcomp::receiver_layout receiver() const = 0;
  /// Step-Ahead Error Feedback (`saef_adapter`): whether the worker's gradient is taken at x - e,
  /// and that point for tensor t (`out = x - e`).
  virtual bool steps_ahead() const { return false; }
  virtual void lookahead(std::size_t t, gradcomp::span<const float> x, gradcomp::span<float> out) {
    (void)t;
    std::copy(x.begin(), x.end(), out.begin());
  }
  /// Residual averaging (SAEF): whether it is due after this step, the worker's residual of tensor
  /// t (empty where none), and the mean to take.
  virtual bool averaging_due() const { return false; }
  virtual gradcomp::span<const float> residual(std::size_t) const { return {}; }
  virtual gradcomp::result<void> set_residuals(const std::vector<gradcomp::span<const float>>&) {
    return gradcomp::fail(gradcomp::errc::invalid_argument);
  }
  /// ISGQ (`isgq_adapter`): whether the worker sends its fully connected layers' weight gradients
  /// as their factors, which the trainer then hands over (one per layer, in order) before `compress`.
  virtual bool uses_factors() const { return false; }
  virtual void set_factors(const std::vector<layer_factors>&) {}
  /// A method of several rounds per step (PowerSGD): its rounds, which the trainer runs instead
  /// of `compress` and one message; null for the others. `receiver()` then describes the
  /// replica's stage that applies the momentum to the step's average.
  virtual round_worker* rounds() { return nullptr; }
};

/// The server side of double-way compression (SAEF): the averaged update compressed again; what
/// every worker applies is its `update`. Every replica runs the same one on the same average.
class update_stage {
 public:
  virtual ~update_stage() = default;
  virtual std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                                 gradcomp::tensor_mode mode) = 0;
  virtual gradcomp::result<void> step(const std::vector<gradcomp::span<const float>>& mean) = 0;
  /// Tensor t's update to apply, valid until the next step.
  virtual gradcomp::span<const float> update(std::size_t t) const = 0;
};

/// The replica's side: every worker's message summed and averaged on a backend
/// (`gradcomp::aggregator`), each tensor's update then read on the host.
class replica_sums {
 public:
  virtual ~replica_sums() = default;
  virtual void begin() = 0;
  virtual gradcomp::result<void> add(gradcomp::span<const std::byte> message) = 0;
  virtual gradcomp::result<void> finish(std::size_t workers) = 0;
  /// Tensor t's averaged update in host memory, valid until the next `begin` (each tensor's its
  /// own, so that every tensor's may be held at once).
  virtual gradcomp::span<const float> update(std::size_t t) = 0;
};

/// The backends of --backend: "cpu", and "thrust" where the demo was built with the Thrust headers
/// ("cuda" instead where nvcc built it).
std::vector<std::string> backend_names();

/// The replica's sums for `layout` on the backend `o.backend`; throws std::invalid_argument for a
/// backend not in backend_names().
std::unique_ptr<replica_sums> make_replica(const train_options& o, const gradcomp::receiver_layout& layout);

/// A mode turned into gradcomp settings.
struct mode_spec {
  std::string name;
  /// The DGC settings (the modes built on `dgc_compressor`; unused by the others).
  gradcomp::dgc_config config;
  bool dense = false;  ///< every tensor sent whole (the baseline)
  /// Worker `rank`'s compressor; empty: a `dgc_compressor` of `config` (its seed varied per rank).
  std::function<std::unique_ptr<worker_compressor>(std::size_t rank)> make_worker;
  /// The messages carry the learning rate: apply `w -= update` instead of `w -= lr * update`.
  bool update_includes_lr = false;
  /// The mode's peak learning rate as a multiple of `--lr` (a method that needs a smaller one).
  double lr_scale = 1.0;
  /// Double-way compression: the server stage every replica runs on the average (SAEF); empty:
  /// the average itself is applied.
  std::function<std::unique_ptr<update_stage>()> make_server;
};

/// One entry of the registry.
struct mode_entry {
  std::string name;
  std::string description;
  std::function<mode_spec(const train_options& o, std::size_t steps_per_epoch)> make;
};

/// Every mode of the demo, in the order it runs them by default.
const std::vector<mode_entry>& modes();

/// The names of `modes()`, in order (those of the command line).
std::vector<std::string> mode_names();

/// The settings of the named mode; throws std::invalid_argument for an unknown name.
mode_spec make_mode(const std::string& name, const train_options& o, std::size_t steps_per_epoch);

/// Worker `rank`'s compressor for `spec`, on the backend `o.backend`.
std::unique_ptr<worker_compressor> make_worker(const mode_spec& spec, const train_options& o, std::size_t rank);

}  // namespace fmnist
