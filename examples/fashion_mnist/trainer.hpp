// Data-parallel training for the Fashion-MNIST demo (and the libtorch example's CNN): N workers, each with its own data shard,
// compressor state and sampling stream, all in one process (simulated) or one per MPI rank; every
// worker's gradient goes through gradcomp's wire format (encode -> bytes -> decode-and-accumulate
// in rank order) and the averaged update is applied to the model (in one process, one copy stands
// for every replica, which would apply the same bytes). Both ways train bitwise the same weights.
// Part of the example, not of the library.
#pragma once

#include <gradcomp/gradcomp.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "exchange.hpp"
#include "mlp.hpp"
#include "modes.hpp"

namespace fmnist {

/// What one epoch did.
struct epoch_record {
  std::size_t epoch = 0;
  std::size_t steps = 0;
  double train_loss = 0.0;       ///< mean over the epoch's worker batches
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double density = 0.0;          ///< target density of compressed tensors at the epoch's end
  double bytes_per_step = 0.0;   ///< mean message bytes per worker per step
  double ratio = 0.0;            ///< dense fp32 bytes / bytes_per_step
  double seconds = 0.0;
};

/// What a whole run did.
struct run_result {
  std::string mode;
  std::size_t workers = 0;
  std::size_t steps = 0;
  std::size_t parameters = 0;
  std::size_t tensors = 0;
  std::size_t compressed_tensors = 0;
  double dense_bytes = 0.0;            ///< fp32 bytes of all gradients of one worker
  double final_density = 1.0;          ///< target density of compressed tensors at the end
  double sent_fraction = 1.0;          ///< elements sent / elements, mean over the last epoch
  double final_accuracy = 0.0;
  double best_accuracy = 0.0;
  double first_loss = 0.0;             ///< mean training loss of the first step
  double bytes_per_step_final = 0.0;   ///< mean bytes per worker per step at the final density
  double bytes_per_step_run = 0.0;     ///< the same over the whole run
  double ratio_final = 0.0;
  double ratio_run = 0.0;
  double compress_seconds = 0.0;       ///< compress + encode + decode-and-accumulate + finish
  double compute_seconds = 0.0;        ///< forward and backward passes (every local worker's)
  double exchange_seconds = 0.0;       ///< decode-and-accumulate + finish (part of compress_seconds)
  double step_seconds = 0.0;           ///< whole steps (gradients included)
  double clipped_fraction = 0.0;       ///< worker steps whose gradient was clipped
  std::uint64_t weights_fnv1a = 0;     ///< FNV-1a of the trained parameters' bytes
  std::vector<epoch_record> epochs;
};

/// FNV-1a (64 bits) of the tensors' bytes, in order: equal for bitwise equal weights.
inline std::uint64_t fingerprint(const std::vector<tensor_slot>& tensors) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& t : tensors)
    for (const float x : t.weights) {
      unsigned char bytes[sizeof(float)];
      std::memcpy(bytes, &x, sizeof x);
      for (const unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
    }
  return h;
}

/// Which images each worker trains on: one shuffle of the training set (from the seed), then a
/// contiguous shard per worker, which the worker reshuffles at every epoch's start with its own
/// generator. Every mode, model and process sees the same order.
class batch_plan {
 public:
  batch_plan(std::size_t count, std::size_t workers, std::size_t batch, std::uint64_t seed) : batch_(batch) {
    if (workers == 0 || batch == 0) throw std::invalid_argument("workers and batch must be > 0");
    const std::size_t shard = count / workers;
    steps_ = shard / batch;
    if (steps_ == 0)
      throw std::invalid_argument("too few training images for " + std::to_string(workers) +
                                  " workers of batch " + std::to_string(batch));
    std::vector<std::size_t> order(count);
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed ^ 0x5eed5eedULL));
    for (std::size_t r = 0; r < workers; ++r) {
      shards_.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(r * shard),
                           order.begin() + static_cast<std::ptrdiff_t>((r + 1) * shard));
      rng_.emplace_back(seed * 1000003ULL + r);
    }
  }
  std::size_t steps_per_epoch() const noexcept { return steps_; }
  /// Worker r's shuffle at an epoch's start.
  void shuffle(std::size_t r) { std::shuffle(shards_[r].begin(), shards_[r].end(), rng_[r]); }
  /// Worker r's batch of step s of the epoch: images into x (batch rows), labels into y.
  void fill(const dataset& d, std::size_t r, std::size_t s, float* x, std::uint8_t* y) const {
    const std::size_t features = d.features();
    for (std::size_t i = 0; i < batch_; ++i) {
      const std::size_t item = shards_[r][s * batch_ + i];
      std::copy(d.image(item), d.image(item) + features, x + i * features);
      y[i] = d.labels[item];
    }
  }

 private:
  std::size_t batch_, steps_ = 0;
  std::vector<std::vector<std::size_t>> shards_;
  std::vector<std::mt19937_64> rng_;
};

/// The learning rate of step `step` of `total`: cosine decay from `peak` to 0.
inline double cosine_lr(double peak, std::size_t step, std::size_t total) {
  return 0.5 * peak * (1.0 + std::cos(3.14159265358979323846 * double(step) / double(total)));
}

/// Called after each epoch (for progress output); may be empty.
using epoch_callback = std::function<void(const run_result&, const epoch_record&)>;

/**
 * Trains `model` with mode `spec` on `train`, evaluating on `test` after every epoch, with the
 * same data order for every mode (`batch_plan`). `across` runs the workers it names local in this
 * process and exchanges with the others (one per MPI rank); without it, every worker runs here.
 * Throws std::runtime_error if gradcomp reports an error (a non-finite gradient, say).
 *
 * What the model provides (`mlp` is one; the libtorch example's CNN another):
 * - `tensors()`: each parameter tensor's name, shape and weights (`tensor_slot`), updated in place;
 * - `gradient_set`, `make_gradients()`, `gradient(x, y, batch, set)` (a forward and backward pass
 *   of `batch` images into the set's buffers, returning an `eval_result`) and `views(set)` (the
 *   set's buffers, one per tensor, as views: what the compressors read);
 * - `layers()` and `factors(l)` (fully connected layer l's factors of the last gradient, for ISGQ);
 * - `evaluate(pixels, labels, count)`;
 * - `receive(layout, includes_lr)`: the form of the updates it will apply; a model whose optimizer
 *   applies momentum itself takes the receiver-side momentum over (and clears it from `layout`);
 * - `apply(updates, lr, includes_lr)`: the averaged update of every tensor, applied in place.
 */
template <class Model>
run_result train_model(Model& model, const mode_spec& spec, const dataset& train, const dataset& test,
                       const train_options& o, const epoch_callback& on_epoch = {}, exchange* across = nullptr) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  auto check = [](const auto& r, const char* what) {
    if (!r) throw std::runtime_error(std::string(what) + ": " + gradcomp::to_string(r.error()));
  };

  batch_plan plan(train.count, o.workers, o.batch, o.seed);
  const std::size_t steps_per_epoch = plan.steps_per_epoch();
  const std::size_t total_steps =
      o.max_steps ? std::min(o.max_steps, o.epochs * steps_per_epoch) : o.epochs * steps_per_epoch;

  const std::vector<tensor_slot> tensors = model.tensors();
  // The exchange between the workers, one compressor per worker this process runs (each with its
  // own state and sampling stream) and one aggregator for the replica.
  in_process_exchange in_process(o.workers);
  exchange& net = across != nullptr ? *across : in_process;
  if (net.size() != o.workers)
    throw std::invalid_argument(std::to_string(o.workers) + " workers over an exchange of " + std::to_string(net.size()));
  std::vector<std::unique_ptr<worker_compressor>> workers(o.workers);
  worker_compressor* lead = nullptr;  // the first local worker: the settings every worker shares
  for (std::size_t r = 0; r < o.workers; ++r) {
    if (!net.local(r)) continue;
    workers[r] = make_worker(spec, o, r);
    for (const auto& p : tensors)
      workers[r]->add_tensor(p.name, p.shape, spec.dense ? gradcomp::tensor_mode::dense : gradcomp::tensor_mode::automatic);
    if (lead == nullptr) lead = workers[r].get();
  }
  if (lead == nullptr) throw std::invalid_argument("no worker runs in this process");
  gradcomp::receiver_layout layout = lead->receiver();
  model.receive(layout, spec.update_includes_lr);
  const std::unique_ptr<replica_sums> aggregator = make_replica(o, layout);
  const std::size_t max_bytes = lead->max_message_bytes(o.wire);
  // A method of several rounds per step (PowerSGD): each round's messages averaged on every
  // replica by an aggregator of the round (built again when a round's layout changes, as from
  // the dense steps to the compressing ones), the step's average then through the replica's
  // momentum stage as one dense message.
  round_worker* const lead_rounds = lead->rounds();
  const std::size_t max_round_bytes = lead_rounds ? lead_rounds->max_round_bytes(o.wire) : 0;
  struct round_sums {
    std::unique_ptr<gradcomp::aggregator<float>> sums;
    gradcomp::wire::message_kind kind{};
    std::vector<std::size_t> sizes;
  };
  std::vector<round_sums> rounds;
  std::vector<float> average;
  std::vector<std::byte> average_message;
  if (lead_rounds) {
    std::vector<gradcomp::tensor_message<float>> whole(tensors.size());
    for (std::size_t t = 0; t < whole.size(); ++t) whole[t] = {t, lead->info(t).numel, true, {}, {}};
    const gradcomp::span<const gradcomp::tensor_message<float>> sections(whole.data(), whole.size());
    average_message.resize(gradcomp::wire::max_encoded_bytes(sections, o.wire).value());
  }

  run_result res;
  res.mode = spec.name;
  res.workers = o.workers;
  res.tensors = tensors.size();
  for (std::size_t t = 0; t < res.tensors; ++t) {
    res.parameters += lead->info(t).numel;
    res.compressed_tensors += lead->info(t).compressed;
  }
  res.dense_bytes = 4.0 * static_cast<double>(res.parameters);
  res.final_density = lead->final_density();

  // The server stage of double-way compression (SAEF), with the same tensors; the weights' copy
  // that the step ahead restores.
  std::unique_ptr<update_stage> server = spec.make_server ? spec.make_server() : nullptr;
  if (server)
    for (const auto& p : tensors) server->add_tensor(p.name, p.shape, gradcomp::tensor_mode::automatic);
  std::vector<std::vector<float>> weights(tensors.size()), averaged(weights.size());

  const std::size_t features = train.features();
  std::vector<float> x(o.batch * features);
  std::vector<std::uint8_t> y(o.batch);
  // Workers that share scales compute every gradient first (each into its own buffers), then
  // compress; the others compress each gradient as it comes (one set of buffers).
  const bool sharing = lead->shares_scales();
  std::vector<typename Model::gradient_set> grads;
  std::vector<std::vector<gradcomp::span<const float>>> views;
  for (std::size_t r = 0; r < (sharing ? o.workers : 1); ++r) {
    grads.push_back(model.make_gradients());
    views.push_back(Model::views(grads.back()));
  }

  double bytes_final = 0.0, bytes_run = 0.0, clipped = 0.0;
  std::size_t steps_final = 0, step = 0;
  const std::size_t test_count = o.test_limit ? std::min(o.test_limit, test.count) : test.count;
  for (std::size_t epoch = 0; epoch < o.epochs && step < total_steps; ++epoch) {
    const auto epoch_start = clock::now();
    epoch_record rec;
    rec.epoch = epoch + 1;
    for (std::size_t r = 0; r < o.workers; ++r)
      if (net.local(r)) plan.shuffle(r);
    double loss_sum = 0.0, bytes_epoch = 0.0, sent_elements = 0.0;
    for (std::size_t s = 0; s < steps_per_epoch && step < total_steps; ++s, ++step) {
      const auto step_start = clock::now();
      const double lr = cosine_lr(o.lr * spec.lr_scale, step, total_steps);
      for (auto& w : workers)
        if (w) w->begin_step(epoch, lr);
      rec.density = lead->density();
      double compress_time = 0.0, compute_time = 0.0, step_bytes = 0.0;
      // Each local worker's figures of the step (its loss, elements sent, whether it clipped),
      // shared with every process and added up in rank order.
      std::vector<std::array<double, 3>> figures(o.workers);
      // Worker r's step outcome, message and its statistics, once it has compressed.
      auto send = [&](std::size_t r) {
        const auto stats = workers[r]->stats();
        check(stats, "compress");
        const auto bytes = workers[r]->encode_message(o.wire, net.outbox(r, max_bytes));
        check(bytes, "encode");
        net.send(r, *bytes);
        figures[r][1] = static_cast<double>(stats->kept_elements + stats->dense_elements);
        figures[r][2] = stats->clip_coefficient < 1.0 ? 1.0 : 0.0;
      };
      aggregator->begin();
      // Step ahead (SAEF): each worker's gradient at x - e_r, the weights restored afterwards.
      const bool ahead = lead->steps_ahead();
      if (ahead)
        for (std::size_t t = 0; t < weights.size(); ++t) weights[t].assign(tensors[t].weights.begin(), tensors[t].weights.end());
      for (std::size_t r = 0; r < o.workers; ++r) {
        if (!net.local(r)) continue;
        if (ahead)
          for (std::size_t t = 0; t < weights.size(); ++t)
            workers[r]->lookahead(t, gradcomp::span<const float>(weights[t].data(), weights[t].size()),
                                  tensors[t].weights);
        plan.fill(train, r, s, x.data(), y.data());
        const std::size_t own = sharing ? r : 0;
        const auto g0 = clock::now();
        const eval_result br = model.gradient(x.data(), y.data(), o.batch, grads[own]);
        compute_time += seconds(g0, clock::now());
        if (workers[r]->uses_factors()) {  // ISGQ: the layers' factors of this gradient
          std::vector<layer_factors> f;
          for (std::size_t l = 0; l < model.layers(); ++l) f.push_back(model.factors(l));
          workers[r]->set_factors(f);
        }
        figures[r][0] = br.loss;
        const auto t0 = clock::now();
        if (sharing) {
          const auto local = workers[r]->local_scales(views[own]);
          check(local, "local_scales");
          net.contribute_max(r, gradcomp::span<const float>(local->data(), local->size()));
        } else if (lead_rounds) {
          check(workers[r]->rounds()->begin(views[own]), "begin");
        } else {
          check(workers[r]->compress(views[own]), "compress");
          send(r);
        }
        compress_time += seconds(t0, clock::now());
      }
      if (ahead)
        for (std::size_t t = 0; t < weights.size(); ++t)
          std::copy(weights[t].begin(), weights[t].end(), tensors[t].weights.begin());
      if (sharing) {  // every worker with the largest of the workers' scales
        const auto t0 = clock::now();
        for (std::size_t r = 0; r < o.workers; ++r) {
          if (!net.local(r)) continue;
          check(workers[r]->compress_shared(views[r], net.maximum()), "compress");
          send(r);
        }
        compress_time += seconds(t0, clock::now());
      }
      double round_bytes = 0.0;
      if (lead_rounds) {  // every round: every worker's message, averaged in rank order
        const auto t0 = clock::now();
        for (std::size_t k = 1; lead_rounds->round() != 0; ++k) {
          for (std::size_t r = 0; r < o.workers; ++r) {
            if (!net.local(r)) continue;
            const auto bytes = workers[r]->rounds()->encode_round(o.wire, net.outbox(r, max_round_bytes));
            check(bytes, "encode");
            net.send(r, *bytes);
          }
          if (rounds.size() < k) rounds.resize(k);
          round_sums& rs = rounds[k - 1];
          const gradcomp::receiver_layout layout_k = lead_rounds->round_layout();
          std::vector<std::size_t> sizes;
          for (const auto& rt : layout_k.tensors) sizes.push_back(rt.info.numel);
          if (!rs.sums || rs.kind != lead_rounds->round_kind() || rs.sizes != sizes) {
            rs.sums = std::make_unique<gradcomp::aggregator<float>>(lead_rounds->round_kind(), layout_k);
            rs.kind = lead_rounds->round_kind();
            rs.sizes = std::move(sizes);
          }
          rs.sums->begin();
          for (std::size_t r = 0; r < o.workers; ++r) {
            check(rs.sums->add(net.received(r)), "decode");
            round_bytes += static_cast<double>(net.received(r).size());
          }
          check(rs.sums->finish(o.workers), "finish");
          average.clear();
          for (std::size_t t = 0; t < rs.sums->num_tensors(); ++t) {
            const auto u = rs.sums->update(t);
            average.insert(average.end(), u.begin(), u.end());
          }
          for (std::size_t r = 0; r < o.workers; ++r)
            if (net.local(r))
              check(workers[r]->rounds()->end_round(gradcomp::span<const float>(average.data(), average.size())),
                    "end_round");
        }
        for (std::size_t r = 0; r < o.workers; ++r)
          if (net.local(r)) figures[r][1] = static_cast<double>(workers[r]->rounds()->sent_elements());
        compress_time += seconds(t0, clock::now());
      }
      for (std::size_t r = 0; r < o.workers; ++r)
        if (net.local(r)) net.share_numbers(r, gradcomp::span<const double>(figures[r].data(), figures[r].size()));
      for (std::size_t r = 0; r < o.workers; ++r) {
        const auto f = net.numbers(r);
        loss_sum += f[0];
        if (step == 0) res.first_loss += f[0] / double(o.workers);
        sent_elements += f[1];
        clipped += f[2];
        if (!lead_rounds) step_bytes += static_cast<double>(net.received(r).size());
      }
      step_bytes += round_bytes;
      // Every replica receives every worker's message and sums them in rank order.
      const auto t1 = clock::now();
      if (lead_rounds) {  // the step's average, the same on every worker: the replica's momentum
        std::vector<gradcomp::tensor_message<float>> whole(tensors.size());
        for (std::size_t t = 0; t < whole.size(); ++t) {
          const auto u = lead_rounds->update(t);
          whole[t] = {t, u.size(), true, {}, u};
        }
        const auto bytes = gradcomp::wire::encode(
            gradcomp::span<const gradcomp::tensor_message<float>>(whole.data(), whole.size()), o.wire,
            gradcomp::span<std::byte>(average_message.data(), average_message.size()));
        check(bytes, "encode");
        check(aggregator->add(gradcomp::span<const std::byte>(average_message.data(), *bytes)), "decode");
        check(aggregator->finish(1), "finish");
      } else {
        for (std::size_t r = 0; r < o.workers; ++r) check(aggregator->add(net.received(r)), "decode");
        check(aggregator->finish(o.workers), "finish");
      }
      if (server) {  // double-way compression: the average compressed again, on every replica
        // (each update is valid until the next call: copied first)
        std::vector<gradcomp::span<const float>> mean;
        for (std::size_t t = 0; t < averaged.size(); ++t) {
          const auto u = aggregator->update(t);
          averaged[t].assign(u.begin(), u.end());
          mean.emplace_back(averaged[t].data(), averaged[t].size());
        }
        check(server->step(mean), "server step");
      }
      const double exchange_time = seconds(t1, clock::now());
      compress_time += exchange_time;
      res.exchange_seconds += exchange_time;
      res.compute_seconds += compute_time;
      std::vector<gradcomp::span<const float>> updates;
      for (std::size_t t = 0; t < tensors.size(); ++t) updates.push_back(server ? server->update(t) : aggregator->update(t));
      model.apply(updates, lr, spec.update_includes_lr);
      // Residual averaging (SAEF): every worker takes the mean of the workers' residuals.
      if (lead->averaging_due()) {
        const auto t0 = clock::now();
        std::vector<std::vector<float>> mean(tensors.size());
        std::vector<gradcomp::span<const float>> views_mean;
        for (std::size_t t = 0; t < tensors.size(); ++t) {
          for (std::size_t r = 0; r < o.workers; ++r)
            if (net.local(r)) net.share_floats(r, workers[r]->residual(t));
          mean[t].assign(lead->residual(t).size(), 0.0f);
          for (std::size_t r = 0; r < o.workers; ++r) {
            const auto e = net.floats(r);
            for (std::size_t i = 0; i < e.size(); ++i) mean[t][i] += e[i];
          }
          for (auto& v : mean[t]) v /= static_cast<float>(o.workers);
          views_mean.emplace_back(mean[t].data(), mean[t].size());
        }
        for (auto& w : workers)
          if (w) check(w->set_residuals(views_mean), "residual averaging");
        res.compress_seconds += seconds(t0, clock::now());
      }
      bytes_epoch += step_bytes;
      bytes_run += step_bytes;
      if (rec.density == res.final_density) {
        bytes_final += step_bytes;
        ++steps_final;
      }
      ++rec.steps;
      res.compress_seconds += compress_time;
      res.step_seconds += seconds(step_start, clock::now());
    }
    const double worker_steps = double(rec.steps * o.workers);
    rec.train_loss = loss_sum / worker_steps;
    const eval_result te = model.evaluate(test.pixels.data(), test.labels.data(), test_count);
    rec.test_loss = te.loss;
    rec.test_accuracy = te.accuracy();
    rec.bytes_per_step = bytes_epoch / worker_steps;
    rec.ratio = res.dense_bytes / rec.bytes_per_step;
    rec.seconds = seconds(epoch_start, clock::now());
    res.sent_fraction = sent_elements / worker_steps / double(res.parameters);
    res.best_accuracy = std::max(res.best_accuracy, rec.test_accuracy);
    res.final_accuracy = rec.test_accuracy;
    res.epochs.push_back(rec);
    if (on_epoch) on_epoch(res, rec);
  }
  res.steps = step;
  const double all_worker_steps = double(step * o.workers);
  res.clipped_fraction = clipped / all_worker_steps;
  res.bytes_per_step_run = bytes_run / all_worker_steps;
  res.ratio_run = res.dense_bytes / res.bytes_per_step_run;
  if (steps_final > 0) {
    res.bytes_per_step_final = bytes_final / double(steps_final * o.workers);
    res.ratio_final = res.dense_bytes / res.bytes_per_step_final;
  }
  res.weights_fnv1a = fingerprint(tensors);
  return res;
}

/**
 * Trains the MLP of `o.layers` (same seed, same initial weights for every mode) with `train_model`.
 * When `final_parameters` is given, the trained parameters are copied there.
 */
inline run_result train(const mode_spec& spec, const dataset& train, const dataset& test,
                        const train_options& o, const epoch_callback& on_epoch = {},
                        std::vector<parameter>* final_parameters = nullptr, exchange* across = nullptr) {
  mlp model(o.layers, o.seed);
  run_result res = train_model(model, spec, train, test, o, on_epoch, across);
  if (final_parameters) *final_parameters = model.parameters();
  return res;
}

}  // namespace fmnist
