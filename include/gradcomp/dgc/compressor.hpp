/// @file compressor.hpp
/// @brief The whole Deep Gradient Compression step for a model: `dgc_compressor` (sender) and
/// `dgc_aggregator` (receiver).
///
/// One step of data-parallel training with DGC, on every worker:
/// 1. `compressor.compress(grads)`: for each registered tensor, clip locally (N^(-1/2) rule), add
///    the momentum-corrected gradient to the residual accumulator, select about `density * n`
///    entries (sampled threshold or exact top-k), move them out of the accumulator (exact
///    conservation) and, with momentum factor masking, zero the momentum at those positions.
///    Small and one-dimensional tensors are sent dense.
///    The step runs on the compressor's backend (docs/backends.md); `compressor.stats()` waits
///    for it and returns its statistics, or why it was refused (a NaN or an infinity in a
///    gradient, an overflow), in which case nothing changed.
/// 2. `compressor.encode_message(opt, buffer)` writes the step in the wire format
///    (docs/wire_format.md); the buffers of all workers are exchanged (allgather). In-process
///    users can also pass `compressor.message(t)` views directly.
/// 3. `aggregator.begin()`, `aggregator.add(bytes)` (or `add(message)`) for every worker,
///    `aggregator.finish(N)`: sums (duplicates add), divides by N, applies ordinary momentum
///    where the sender did not.
/// 4. `w -= lr * aggregator.update(t)` for every tensor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../aggregator.hpp"
#include "../backend.hpp"
#include "../common/compressor_base.hpp"
#include "../cpu/ops.hpp"
#include "../detail/assign.hpp"
#include "../detail/rng.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../select/sampled_threshold.hpp"
#include "../selection_types.hpp"
#include "../span.hpp"
#include "../wire/tensor_message.hpp"
#include "clipping.hpp"
#include "cpu_ops.hpp"
#include "../momentum_kind.hpp"
#include "step_plan.hpp"
#include "../wire/decode.hpp"
#include "../wire/device_section.hpp"
#include "../wire/encode.hpp"
#include "warmup_schedule.hpp"

namespace gradcomp {

/// How a compressed tensor's entries are chosen.
enum class selection_method : unsigned char {
  sampled_threshold = 0,  ///< DGC's sampled threshold (about k entries, never more).
  exact_topk = 1,         ///< Exactly k entries of largest magnitude.
};

/// What one DGC step did (the statistics every compressor reports).
using dgc_step_stats = step_stats;

/// Everything that parameterises DGC. The defaults are the paper's: vanilla momentum 0.9 with
/// correction and masking, the warm-up schedule to 99.9% sparsity, a 1% sample.
struct dgc_config {
  double momentum = 0.9;            ///< Momentum m in [0, 1).
  bool nesterov = false;            ///< Nesterov instead of vanilla momentum.
  bool momentum_correction = true;  ///< Accumulate velocity (DGC); false = plain error feedback,
                                    ///< momentum then applied by the receiver.
  bool momentum_masking = true;     ///< Zero the momentum at sent positions.
  double clip_norm = 0.0;           ///< Global gradient-norm threshold; 0 disables clipping.
  clip_scope clipping = clip_scope::global_norm;  ///< Norm over the model or per tensor.
  std::size_t num_workers = 1;      ///< N: the local threshold is clip_norm / sqrt(N).
  warmup_schedule schedule{};       ///< Density per warm-up stage.
  selection_method selection = selection_method::sampled_threshold;  ///< How entries are chosen.
  sampled_threshold_config sampling{};  ///< Parameters of the sampled threshold.
  std::uint64_t seed = 0;           ///< Sampling seed; the same on every worker.
  /// Read every gradient before touching any state and refuse NaN and infinity with
  /// `errc::non_finite_input`, nothing modified (the default). `false` skips that read when
  /// clipping is off (`clip_norm` 0), for trainers that have checked the gradients already, for
  /// instance while unscaling them for mixed precision: the step then reads each gradient once
  /// instead of twice. A non-finite gradient is then the caller's responsibility: it reaches the
  /// accumulators, a compressed tensor reports `errc::nan_input` (its state is then
  /// unspecified) and a dense tensor passes it on. The same read bounds what a step can add to
  /// the state, so without it the overflow guard of `compress` is off too: finite gradients
  /// large enough to overflow the accumulators (near the largest float) are then also the
  /// caller's responsibility. With clipping on, the norms need the read anyway and both checks
  /// stay.
  bool check_finite = true;
  /// Threads `compress` spreads the tensors over (CPU backend), the calling thread included;
  /// 1, the default, uses only the calling thread. Results are bitwise the same for every value.
  std::size_t threads = 1;
  compression_policy policy{};      ///< Which tensors are compressed.
  /// Compressed tensors that the schedule's densities leave with fewer than `min_kept` elements:
  /// they keep `min_kept` each step, or are sent dense (docs/algorithms.md, "Tensors too small to
  /// sparsify"). Off by default.
  small_tensor_policy small_tensors{};

  /// The momentum form the sender accumulates (`none` without momentum correction).
  momentum_kind sender_momentum() const noexcept {
    if (!momentum_correction) return momentum_kind::none;
    return nesterov ? momentum_kind::nesterov : momentum_kind::vanilla;
  }
  /// The momentum form the receiver applies to tensors the sender did not momentum-correct.
  momentum_kind receiver_momentum() const noexcept {
    return nesterov ? momentum_kind::nesterov : momentum_kind::vanilla;
  }
};



namespace detail {
struct dgc_snapshot_access;
}  // namespace detail

/**
 * @brief The sending side of DGC for a whole model, on one worker.
 *
 * Register tensors once with `add_tensor` (this allocates all state); then each step call
 * `compress` with one gradient per tensor, in registration order, and `encode_message` (or read
 * `message(t)`). `compress` and `encode_message` allocate nothing.
 *
 * Host plan, backend execution: the host plans each step from what never depends on the data
 * (the layout, the warm-up schedule, each tensor's k, the sampling seeds); every per-tensor state
 * (residual, momentum, selection results, counts, norms, clip coefficients, workspaces) lives in
 * the backend's memory, and `compress` issues the whole step there without waiting for it. The
 * step's outcome and its statistics stay in backend memory until asked for: `stats()`,
 * `encode_message`, `message`, `selection` and the next `compress` wait for the step (on a
 * device, one synchronisation; `compress` followed by `encode_message` synchronises once). On
 * the CPU the step is complete when `compress` returns and waiting costs nothing.
 *
 * Non-finite gradients: the step first reads every gradient once (the L2 norms needed for
 * clipping, or the largest magnitudes); if any holds a NaN or an infinity, the step is refused
 * with `errc::non_finite_input` and nothing is modified (the step counter does not advance), so
 * the trainer can skip the step or lower its loss scale. Residuals are never poisoned by a bad
 * gradient. The decision is taken on the backend, and the refusal is what `stats()` and
 * `encode_message` return. A trainer that has checked its gradients already can turn that read
 * off with `dgc_config::check_finite` when it does not clip.
 *
 * Overflow: finite gradients can still be large enough (near the largest float) to push the
 * momentum or the residual accumulator to infinity. A step either succeeds with every state
 * value finite or is refused with `errc::state_overflow`, every tensor's state bitwise unchanged
 * (and the step counter not advanced). The rule costs nothing measurable: the read above also
 * gives each gradient's largest magnitude (or its norm, which bounds it), and the compressor keeps
 * an upper bound of each tensor's largest |U| and |V|; only when these bounds come near the
 * largest finite value does the step compute its exact magnitudes first (one more read of the
 * state, without writing). The rule needs that read: with `check_finite` off and no clipping,
 * overflow is the caller's responsibility, as non-finite gradients are.
 *
 * Determinism: the same config, seed and gradients give bitwise the same messages on every run
 * and every backend that passes the conformance suite; sampling depends only on (seed, tensor
 * id, step), so all workers sample the same positions. Not thread-safe; use one compressor per
 * worker. With `dgc_config::threads` > 1, the CPU backend spreads the tensors over its own
 * threads (created on the first call and kept; a copy, or an object assigned to, creates its own
 * for its configuration's thread count).
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class dgc_compressor : public detail::compressor_base<dgc_compressor<T, Backend>, dgc_config, detail::dgc_tensor_record<T>,
                                                      detail::dgc_step_record, detail::dgc_ops<Backend>> {
  static_assert(detail::is_selectable_v<T>, "dgc_compressor supports float and double");
  using base = typename dgc_compressor::compressor_base;
  using ops = typename base::ops;
  using kernels = detail::dgc_ops<Backend>;  // the step's kernels
  template <class U>
  using buffer = typename base::template buffer<U>;
  using record = detail::dgc_tensor_record<T>;
  friend base;

 public:
  /// A gradient (or any tensor) in the backend's memory.
  using tensor_view = typename base::tensor_view;

  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`) for a bad value.
  explicit dgc_compressor(dgc_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg), wire::value_coding::unspecified, true, true) {
    // Checked as the steps use it: in T (0.99999999 is below 1, but rounds to 1 as a float).
    if (!(cfg_.momentum >= 0.0 && cfg_.momentum < 1.0 && static_cast<T>(cfg_.momentum) < T(1)))
      throw error(errc::invalid_argument, "momentum must be in [0, 1) in the value type");
    if (!(cfg_.clip_norm >= 0.0)) throw error(errc::invalid_argument, "clip_norm must be >= 0");
    if (cfg_.num_workers == 0) throw error(errc::invalid_argument, "num_workers must be >= 1");
    if (cfg_.selection != selection_method::sampled_threshold && cfg_.selection != selection_method::exact_topk)
      throw error(errc::invalid_argument, "selection is not a selection_method");
    if (cfg_.clipping != clip_scope::global_norm && cfg_.clipping != clip_scope::per_tensor)
      throw error(errc::invalid_argument, "clipping is not a clip_scope");
    if (cfg_.small_tensors.action != small_tensor_action::floor && cfg_.small_tensors.action != small_tensor_action::dense)
      throw error(errc::invalid_argument, "small_tensors.action is not a small_tensor_action");
    validate(cfg_.sampling).value();
  }

  /// Copies configuration, tensors and state; the copy creates its own threads when it needs them.
  dgc_compressor(const dgc_compressor&) = default;
  /// Moves everything, threads included.
  dgc_compressor(dgc_compressor&&) = default;
  /// Copy assignment with the strong guarantee: if copying throws, `*this` is unchanged, so its
  /// configuration, workspace and threads always agree.
  dgc_compressor& operator=(const dgc_compressor& other) { return detail::copy_assign(*this, other); }
  /// Move assignment.
  dgc_compressor& operator=(dgc_compressor&&) = default;
  ~dgc_compressor() = default;

  /**
   * @brief Registers a tensor and allocates its state; returns its id (0, 1, 2, ...).
   * Throws `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`,
   * `errc::invalid_argument` (a `mode` outside `tensor_mode`). Waits for a step in progress.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    // Every size is checked before anything is registered: the workspace of every slot, the
    // largest message and the snapshot fit size_t (always true with a 64-bit size_t: tensors
    // have below 2^32 elements).
    std::size_t ws_bytes = workspace_bytes_;
    std::size_t worst = 0;
    buffer<T> u;
    buffer<std::byte> workspace;
    momenta_.reserve(momenta_.size() + 1);
    guides_.reserve(guides_.size() + 1);
    compressed_order_.reserve(compressed_order_.size() + 1);
    if (mode == tensor_mode::automatic && small_and_dense(shape)) mode = tensor_mode::dense;
    const std::size_t id = this->add(
        std::move(name), std::move(shape), mode, cfg_.policy,
        [&](record&, const tensor_info& info) {
          const std::size_t n = info.numel;
          // Kernels that select every tensor at once keep their own scratch: no per-slot workspace.
          if (info.compressed && !base::whole_model)
            for (double d : cfg_.schedule.stages()) {
              const std::size_t k = kept_at(d)(n);
              ws_bytes = std::max(ws_bytes, cfg_.selection == selection_method::sampled_threshold
                                                ? kernels::template workspace_bytes<T>(this->backend_, cfg_.sampling, n, k)
                                                : ops::template exact_topk_workspace_bytes<T>(this->backend_, n, k));
            }
          constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
          const std::size_t slots = ops::executor_slots(this->exec_);
          if (ws_bytes > size_max / slots) throw error(errc::size_overflow, "workspace for all threads");
          // What the tensor can add to a message (8-byte values, 5-byte indices) or to a snapshot
          // (a residual and a momentum section of 8-byte values): at most two headers and 16 bytes
          // each.
          const std::uint64_t bytes = 2 * wire::section_header_bytes + 16 * static_cast<std::uint64_t>(n);
          if (bytes > size_max - worst_bytes_) throw error(errc::size_overflow, "message or snapshot size of the model");
          worst = static_cast<std::size_t>(bytes);
          if (info.compressed && cfg_.sender_momentum() != momentum_kind::none)
            u = ops::template allocate<T>(this->backend_, n);
          if (!base::whole_model) workspace = ops::template allocate<std::byte>(this->backend_, ws_bytes * slots);
        },
        [](const tensor_info&) { return wire::coding_parameters{}; },
        [&](const tensor_info& info) {
          std::size_t cap = 0;
          for (double d : cfg_.schedule.stages()) cap = std::max(cap, kept_at(d)(info.numel));
          return cap;
        });
    // Nothing below throws (the vectors have their room).
    worst_bytes_ += worst;
    workspace_bytes_ = ws_bytes;
    workspace_ = std::move(workspace);
    momenta_.push_back(std::move(u));
    guides_.emplace_back();
    compressed_order_.clear();
    for (std::size_t t : this->largest_first())
      if (this->tensors_[t].info.compressed) compressed_order_.push_back(t);
    return id;
  }

  /// The current epoch (for `schedule_unit::epoch`).
  std::size_t epoch() const noexcept { return epoch_; }
  /// Sets the epoch the next steps belong to; call at each epoch start.
  void set_epoch(std::size_t epoch) noexcept { epoch_ = epoch; }
  /// Density the next `compress` targets (waits for a step in progress).
  double density() {
    this->wait();
    return cfg_.schedule.density(epoch_, this->step_);
  }
  /// Bytes of the selection workspace of one executor slot (one thread on the CPU; 0 where the
  /// backend's kernels select every tensor at once with scratch of their own: the Thrust backend).
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }

  using base::compress;  // compress(grads): the same on the compressor's own backend value
  /**
   * @brief Issues one DGC step over all registered tensors on the execution context `on` (the
   * compressor's backend for `compress(grads)`; for example another stream of the same device:
   * later calls that wait for this step wait on `on`).
   *
   * The step runs on the backend and its outcome stays there: read it with `stats()` (or
   * `encode_message`, which refuses to encode a refused step). First waits for the previous step
   * when it is still in progress (its outcome fixes this step's number).
   *
   * @param grads one local gradient per tensor, in registration order, in the backend's memory.
   * @return `errc::wrong_tensor_count` or `errc::size_mismatch`,
   *         `errc::resource_unavailable` (a worker thread refused; nothing issued); the step's own
   *         outcome comes from `stats()`: `errc::non_finite_input` (nothing modified),
   *         `errc::state_overflow` (the step would overflow the momentum or the accumulator;
   *         nothing modified), `errc::nan_input` (only with `check_finite` off and no clipping:
   *         the accumulator overflowed to NaN; state is then unspecified).
   */
  [[nodiscard]] result<void> compress(const Backend& on, span<const tensor_view> grads) {
    if (auto started = this->begin_step(on, grads); !started) return started;
    auto& tensors = this->tensors_;

    // The host's plan: what the configuration and the step number fix.
    const double threshold = local_clip_threshold(cfg_.clip_norm, cfg_.num_workers);
    detail::dgc_step_plan plan;
    plan.read = threshold > 0.0 ? detail::gradient_read::norm
                                : cfg_.check_finite ? detail::gradient_read::largest : detail::gradient_read::none;
    plan.threshold = threshold;
    plan.per_tensor = cfg_.clipping == clip_scope::per_tensor;
    plan.kind = cfg_.sender_momentum();
    plan.momentum = static_cast<double>(static_cast<T>(cfg_.momentum));
    stage_ = cfg_.schedule.stage(epoch_, this->step_);
    density_ = cfg_.schedule.density_at_stage(stage_);
    detail::dgc_tensor_plan<T> tensor_plan;
    tensor_plan.kind = plan.kind;
    tensor_plan.momentum = static_cast<T>(cfg_.momentum);
    tensor_plan.exact = cfg_.selection == selection_method::exact_topk;
    tensor_plan.masking = cfg_.momentum_masking && plan.kind != momentum_kind::none;

    const auto records = this->records_.view();
    const auto step = this->step_record_.view();
    const span<const std::size_t> all = this->largest_first();
    const span<const std::size_t> compressed(compressed_order_.data(), compressed_order_.size());

    if constexpr (base::whole_model) {
      // The same steps, each over the whole model at once.
      const auto& model = this->bind_model(on, grads);
      kernels::read_gradients(on, plan.read, model, records);
      kernels::plan(on, records, plan, step);
      if (plan.read != detail::gradient_read::none) {
        kernels::exact_bounds(on, plan.kind, tensor_plan.momentum, model, records);
        kernels::settle_guard(on, readonly(records), step);
      }
      kernels::dense_steps(on, model, records, readonly(step));
      kernels::accumulate(on, tensor_plan, model, records, readonly(step));
      if (tensor_plan.exact)
        kernels::select_exact(on, tensor_plan, kept_at(density_), model, records, readonly(step));
      else
        kernels::select_sampled(on, tensor_plan, cfg_.sampling, kept_at(density_), cfg_.seed, this->step_, model,
                                records, readonly(step));
      kernels::commit(on, records, step);
      this->issued(on);
      return {};
    }
    // 1. Read every gradient before touching state: norms for clipping, or the largest
    // magnitudes, which also bound what the step adds to the state.
    if (plan.read != detail::gradient_read::none) {
      auto read = [&](std::size_t t, std::size_t) { kernels::read_gradient(on, plan.read, grads[t], records, t); };
      ops::for_each(on, this->exec_, all, read);
    }
    // 2. The verdict: finiteness, clip coefficients, the overflow guard (exact pass where the
    // bounds come near the largest finite value).
    kernels::plan(on, records, plan, step);
    if (plan.read != detail::gradient_read::none) {
      auto exact = [&](std::size_t t, std::size_t) {
        kernels::exact_bounds(on, plan.kind, tensor_plan.momentum, grads[t], readonly(momenta_[t].view()),
                              readonly(tensors[t].e.view()), records, t);
      };
      ops::for_each(on, this->exec_, compressed, exact);
      kernels::settle_guard(on, readonly(records), step);
    }
    // 3. Every tensor's step, obeying the verdict. Each depends only on its own state and
    // gradient, so the tensors run in any order on any slot with the same result.
    auto step_tensor = [&](std::size_t t, std::size_t slot) {
      auto& st = tensors[t];
      if (!st.info.compressed) {
        kernels::dense_step(on, grads[t], st.values.view(), records, t, readonly(step));
        return;
      }
      const detail::dgc_tensor_plan<T> p = plan_of(tensor_plan, t);
      const auto ws = workspace_.view().subspan(slot * workspace_bytes_, workspace_bytes_);
      kernels::compressed_step(on, p, cfg_.sampling, grads[t], momenta_[t].view(), st.e.view(), st.indices.view(),
                               st.values.view(), ws, guides_[t], records, t, readonly(step));
    };
    ops::for_each(on, this->exec_, all, step_tensor);
    kernels::commit(on, records, step);
    this->issued(on);
    return {};
  }

  /**
   * @brief What the receiving side needs: every tensor, sent dense (the tensors DGC does not
   * compress) or sparse (at most k of the schedule's largest density), and the receiver-side
   * momentum for the tensors the senders do not momentum-correct (dense tensors; all tensors
   * without `momentum_correction`).
   */
  receiver_layout receiver() const {
    receiver_layout r;
    r.momentum = cfg_.momentum;
    r.kind = cfg_.receiver_momentum();
    const bool corrected = cfg_.sender_momentum() != momentum_kind::none;
    for (const auto& st : this->tensors_) {
      receiver_tensor rt;
      rt.info = st.info;
      rt.dense = !st.info.compressed;
      rt.momentum = !st.info.compressed || !corrected;
      rt.max_kept = st.info.compressed ? kept_at(cfg_.schedule.max_density())(st.info.numel) : 0;
      r.tensors.push_back(std::move(rt));
    }
    return r;
  }

  /// What the selection of compressed tensor `id` achieved in the last step (unchecked id;
  /// waits for the step).
  selection_result<T> selection(std::size_t id) {
    this->wait();
    return this->host_records()[id].selection;
  }

  /// The residual accumulator V of tensor `id` (unchecked id), in the backend's memory (empty for
  /// dense tensors): the compressor's `error_feedback(id)`.
  backend_span<const T, Backend> residual(std::size_t id) const noexcept { return this->tensors_[id].e.view(); }
  /// The momentum buffer U of tensor `id` (unchecked id), in the backend's memory (empty for dense
  /// tensors and without correction).
  backend_span<const T, Backend> momentum_buffer(std::size_t id) const noexcept { return momenta_[id].view(); }

 private:
  friend struct detail::dgc_snapshot_access;

  // A compressed tensor's kept count at `density`: kept_count, raised to the small-tensor floor.
  kept_rule kept_at(double density) const noexcept {
    const bool floor = cfg_.small_tensors.action == small_tensor_action::floor;
    return kept_rule{density, floor ? cfg_.small_tensors.min_kept : 0};
  }
  // Whether a tensor of this shape is small and sent dense by the small-tensor policy: fewer than
  // min_kept elements at the schedule's smallest density.
  bool small_and_dense(const std::vector<std::size_t>& shape) const noexcept {
    if (cfg_.small_tensors.action != small_tensor_action::dense || cfg_.small_tensors.min_kept == 0) return false;
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return kept_count(n, cfg_.schedule.min_density()) < cfg_.small_tensors.min_kept;
  }

  // Tensor t's plan in this step: the step's, with its k of the density and its sampling seed.
  detail::dgc_tensor_plan<T> plan_of(const detail::dgc_tensor_plan<T>& step_plan, std::size_t t) const noexcept {
    detail::dgc_tensor_plan<T> p = step_plan;
    p.k = kept_at(density_)(this->tensors_[t].info.numel);
    p.seed = detail::derive_seed(cfg_.seed, t, this->step_);
    return p;
  }

  // The base's hooks: a tensor's work items in a whole-model step, and its momentum there; the
  // step in progress sends at most k of its density per compressed tensor
  // (so a device's payload comes to the host with the records, in one synchronisation), and its
  // statistics are the schedule's: the stage, the density, k as the target, the clip coefficient.
  detail::model_items model_items(std::size_t t, const tensor_info& info) const noexcept {
    if constexpr (base::whole_model) return detail::dgc_model_items(info.numel, info.compressed);
    else return base::model_items(t, info);
  }
  detail::own_buffers model_buffers(std::size_t t) noexcept {
    detail::own_buffers own;
    own.aux[0] = momenta_[t].view().data();
    return own;
  }

  std::size_t step_bound(std::size_t t) const noexcept {
    const tensor_info& info = this->tensors_[t].info;
    return info.compressed ? kept_at(density_)(info.numel) : info.numel;
  }
  void finish_stats(step_stats& s, const detail::dgc_step_record& verdict, const record* r) const noexcept {
    s.stage = stage_;
    s.density = density_;
    s.clip_coefficient = verdict.global_coef;
    s.target_elements = 0;
    for (std::size_t t = 0; t < this->tensors_.size(); ++t) {
      const tensor_info& info = this->tensors_[t].info;
      if (cfg_.clipping == clip_scope::per_tensor) s.clip_coefficient = std::min(s.clip_coefficient, r[t].coef);
      if (info.compressed) s.target_elements += kept_at(density_)(info.numel);
    }
  }

  using base::cfg_;
  std::vector<buffer<T>> momenta_;  // per tensor, the momentum U (compressed tensors, with correction)
  std::vector<typename kernels::template selection_state<T>> guides_;  // per tensor, the backend's
  buffer<std::byte> workspace_;
  std::size_t workspace_bytes_ = 0;
  // Bound of the largest message or snapshot of the registered tensors (see add_tensor).
  std::size_t worst_bytes_ = wire::message_header_bytes + wire::checksum_bytes + wire::section_header_bytes +
                             8 * wire::snapshot_state_words;
  std::size_t epoch_ = 0;
  std::vector<std::size_t> compressed_order_;  // the compressed tensors, largest first
  std::size_t stage_ = 0;      // the warm-up stage of the step issued last
  double density_ = 0.0;       // and its density
};


/// The receiving side of DGC: the common `aggregator` (built from `dgc_compressor::receiver()`).
template <class T, class Backend = cpu_backend>
using dgc_aggregator = aggregator<T, Backend>;

}  // namespace gradcomp
