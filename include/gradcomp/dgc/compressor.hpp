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
#include "../cpu/ops.hpp"
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
class dgc_compressor {
  static_assert(detail::is_selectable_v<T>, "dgc_compressor supports float and double");
  using ops = detail::ops<Backend>;
  using kernels = detail::dgc_ops<Backend>;  // the step's kernels
  using space = memory_space_t<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;
  using record = detail::dgc_tensor_record<T>;
  // Host code reads the backend's records and messages in place where it can, and through
  // staged copies where it cannot.
  static constexpr bool host_memory = is_host_accessible_v<space>;

 public:
  /// A gradient (or any tensor) in the backend's memory.
  using tensor_view = backend_span<const T, Backend>;

  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`) for a bad value.
  explicit dgc_compressor(dgc_config cfg, Backend backend = Backend{})
      : cfg_(std::move(cfg)), backend_(backend) {
    // Checked as the steps use it: in T (0.99999999 is below 1, but rounds to 1 as a float).
    if (!(cfg_.momentum >= 0.0 && cfg_.momentum < 1.0 && static_cast<T>(cfg_.momentum) < T(1)))
      throw error(errc::invalid_argument, "momentum must be in [0, 1) in the value type");
    if (!(cfg_.clip_norm >= 0.0)) throw error(errc::invalid_argument, "clip_norm must be >= 0");
    if (cfg_.num_workers == 0) throw error(errc::invalid_argument, "num_workers must be >= 1");
    if (cfg_.threads == 0) throw error(errc::invalid_argument, "threads must be >= 1");
    if (cfg_.selection != selection_method::sampled_threshold && cfg_.selection != selection_method::exact_topk)
      throw error(errc::invalid_argument, "selection is not a selection_method");
    if (cfg_.clipping != clip_scope::global_norm && cfg_.clipping != clip_scope::per_tensor)
      throw error(errc::invalid_argument, "clipping is not a clip_scope");
    validate(cfg_.sampling).value();
    exec_ = ops::make_executor(cfg_.threads);
    step_record_ = ops::template allocate<detail::dgc_step_record>(backend_, 1);
  }

  /// Copies configuration, tensors and state; the copy creates its own threads when it needs them.
  dgc_compressor(const dgc_compressor&) = default;
  /// Moves everything, threads included.
  dgc_compressor(dgc_compressor&&) = default;
  /// Copy assignment with the strong guarantee: if copying throws, `*this` is unchanged, so its
  /// configuration, workspace and threads always agree.
  dgc_compressor& operator=(const dgc_compressor& other) {
    if (this != &other) {
      dgc_compressor copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
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
    tensor_state st;
    st.info = detail::new_tensor_info(tensors_, std::move(name), std::move(shape), mode, cfg_.policy);
    const std::size_t n = st.info.numel;
    // Every size is checked before anything is registered: the workspace of every slot, the
    // largest message and the snapshot fit size_t (always true with a 64-bit size_t: tensors
    // have below 2^32 elements).
    std::size_t ws_bytes = workspace_bytes_;
    std::size_t cap = 0;
    if (st.info.compressed) {
      for (double d : cfg_.schedule.stages()) {
        const std::size_t k = kept_count(n, d);
        cap = std::max(cap, k);
        if (cfg_.selection == selection_method::sampled_threshold)
          ws_bytes = std::max(
              ws_bytes, kernels::template workspace_bytes<T>(backend_, cfg_.sampling, n, k));
        else
          ws_bytes = std::max(ws_bytes, ops::template exact_topk_workspace_bytes<T>(backend_, n, k));
      }
    }
    constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
    const std::size_t slots = ops::executor_slots(exec_);
    if (ws_bytes > size_max / slots) throw error(errc::size_overflow, "workspace for all threads");
    // What the tensor can add to a message (8-byte values, 5-byte indices) or to a snapshot (a
    // residual and a momentum section of 8-byte values): at most two headers and 16 bytes each.
    const std::uint64_t worst = 2 * wire::section_header_bytes + 16 * static_cast<std::uint64_t>(n);
    if (worst > size_max - worst_bytes_) throw error(errc::size_overflow, "message or snapshot size of the model");
    wait();  // the records are read and rewritten below
    // Everything that can throw is allocated before anything changes.
    if (st.info.compressed) {
      if (cfg_.sender_momentum() != momentum_kind::none) st.u = ops::template allocate<T>(backend_, n);
      st.v = ops::template allocate<T>(backend_, n);
      st.indices = ops::template allocate<std::uint32_t>(backend_, cap);
      st.values = ops::template allocate<T>(backend_, cap);
    } else {
      st.values = ops::template allocate<T>(backend_, n);
    }
    std::vector<record> host(tensors_.size());
    if (!tensors_.empty())
      ops::copy_to_host(backend_, readonly(records_.view()), span<record>(host.data(), host.size()));
    ops::synchronize(backend_);  // before the vector may move
    record added{};
    added.compressed = st.info.compressed ? 1 : 0;
    host.push_back(added);
    auto records = ops::template allocate<record>(backend_, host.size());
    ops::copy_to_backend(backend_, span<const record>(host.data(), host.size()), records.view());
    auto workspace = ops::template allocate<std::byte>(backend_, ws_bytes * slots);
    std::vector<record> staged_records(host.size());
    std::vector<std::uint32_t> staged_indices(host_memory ? 0 : staged_index_count_ + (st.info.compressed ? cap : 0));
    std::vector<T> staged_values(host_memory ? 0 : staged_value_count_ + st.values.size());
    std::vector<std::size_t> order = order_;
    order.push_back(tensors_.size());
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const std::size_t na = a < tensors_.size() ? tensors_[a].info.numel : n;
      const std::size_t nb = b < tensors_.size() ? tensors_[b].info.numel : n;
      return na > nb;
    });
    std::vector<std::size_t> compressed_order;
    for (std::size_t t : order)
      if (t == tensors_.size() ? st.info.compressed : tensors_[t].info.compressed) compressed_order.push_back(t);
    messages_.reserve(tensors_.size() + 1);
    guides_.reserve(tensors_.size() + 1);
    tensors_.reserve(tensors_.size() + 1);
    // Nothing below throws.
    worst_bytes_ += static_cast<std::size_t>(worst);
    workspace_bytes_ = ws_bytes;
    workspace_ = std::move(workspace);
    records_ = std::move(records);
    staged_records_ = std::move(staged_records);
    if (!host_memory) {
      st.staged_index_offset = staged_index_count_;
      st.staged_value_offset = staged_value_count_;
      staged_index_count_ = staged_indices.size();
      staged_value_count_ = staged_values.size();
      staged_indices_ = std::move(staged_indices);
      staged_values_ = std::move(staged_values);
    }
    order_ = std::move(order);
    compressed_order_ = std::move(compressed_order);
    tensors_.push_back(std::move(st));
    guides_.emplace_back();
    messages_.emplace_back();
    return tensors_.size() - 1;
  }

  /// Number of registered tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }
  /// The registration record of tensor `id` (unchecked).
  const tensor_info& info(std::size_t id) const noexcept { return tensors_[id].info; }
  /// The configuration.
  const dgc_config& config() const noexcept { return cfg_; }
  /// The backend value calls without one of their own run on.
  const Backend& backend() const noexcept { return backend_; }
  /// Steps compressed so far (waits for a step in progress: a refused step does not count).
  std::size_t step() {
    wait();
    return step_;
  }
  /// The current epoch (for `schedule_unit::epoch`).
  std::size_t epoch() const noexcept { return epoch_; }
  /// Sets the epoch the next steps belong to; call at each epoch start.
  void set_epoch(std::size_t epoch) noexcept { epoch_ = epoch; }
  /// Density the next `compress` targets (waits for a step in progress).
  double density() {
    wait();
    return cfg_.schedule.density(epoch_, step_);
  }
  /// Bytes of the selection workspace of one executor slot (one thread on the CPU).
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }

  /**
   * @brief Issues one DGC step over all registered tensors on the compressor's backend.
   *
   * The step runs on the backend and its outcome stays there: read it with `stats()` (or
   * `encode_message`, which refuses to encode a refused step). First waits for the previous step
   * when it is still in progress (its outcome fixes this step's number).
   *
   * @param grads one local gradient per tensor, in registration order, in the backend's memory.
   * @return `errc::wrong_tensor_count` or `errc::size_mismatch`,
   *         `errc::resource_unavailable` (a worker thread refused; nothing issued); the step's own
   *         outcome comes from `stats()`.
   */
  [[nodiscard]] result<void> compress(span<const tensor_view> grads) { return compress(backend_, grads); }

  /// `compress` taking a vector of gradient views.
  [[nodiscard]] result<void> compress(const std::vector<tensor_view>& grads) {
    return compress(backend_, span<const tensor_view>(grads.data(), grads.size()));
  }

  /**
   * @brief `compress` on the execution context `on` (for example another stream of the same
   * device; the CPU backend has one context). Later calls that wait for this step wait on `on`.
   */
  [[nodiscard]] result<void> compress(const Backend& on, span<const tensor_view> grads) {
    if (const errc e = detail::check_gradients(tensors_, grads); e != errc::ok) return fail(e);
    wait();
    if (auto started = ops::start_executor(on, exec_, tensors_.size()); !started) return started;

    // The host's plan: what the configuration and the step number fix.
    const double threshold = local_clip_threshold(cfg_.clip_norm, cfg_.num_workers);
    detail::dgc_step_plan plan;
    plan.read = threshold > 0.0 ? detail::gradient_read::norm
                                : cfg_.check_finite ? detail::gradient_read::largest : detail::gradient_read::none;
    plan.threshold = threshold;
    plan.per_tensor = cfg_.clipping == clip_scope::per_tensor;
    plan.kind = cfg_.sender_momentum();
    plan.momentum = static_cast<double>(static_cast<T>(cfg_.momentum));
    pending_.stage = cfg_.schedule.stage(epoch_, step_);
    pending_.density = cfg_.schedule.density_at_stage(pending_.stage);
    detail::dgc_tensor_plan<T> tensor_plan;
    tensor_plan.kind = plan.kind;
    tensor_plan.momentum = static_cast<T>(cfg_.momentum);
    tensor_plan.exact = cfg_.selection == selection_method::exact_topk;
    tensor_plan.masking = cfg_.momentum_masking && plan.kind != momentum_kind::none;

    const auto records = records_.view();
    const auto step = step_record_.view();
    const span<const std::size_t> all(order_.data(), order_.size());
    const span<const std::size_t> compressed(compressed_order_.data(), compressed_order_.size());

    // 1. Read every gradient before touching state: norms for clipping, or the largest
    // magnitudes, which also bound what the step adds to the state.
    if (plan.read != detail::gradient_read::none) {
      auto read = [&](std::size_t t, std::size_t) { kernels::read_gradient(on, plan.read, grads[t], records, t); };
      ops::for_each(on, exec_, all, read);
    }
    // 2. The verdict: finiteness, clip coefficients, the overflow guard (exact pass where the
    // bounds come near the largest finite value).
    kernels::plan(on, records, plan, step);
    if (plan.read != detail::gradient_read::none) {
      auto exact = [&](std::size_t t, std::size_t) {
        tensor_state& st = tensors_[t];
        kernels::exact_bounds(on, plan.kind, tensor_plan.momentum, grads[t], readonly(st.u.view()),
                              readonly(st.v.view()), records, t);
      };
      ops::for_each(on, exec_, compressed, exact);
      kernels::settle_guard(on, readonly(records), step);
    }
    // 3. Every tensor's step, obeying the verdict. Each depends only on its own state and
    // gradient, so the tensors run in any order on any slot with the same result.
    auto step_tensor = [&](std::size_t t, std::size_t slot) {
      tensor_state& st = tensors_[t];
      if (!st.info.compressed) {
        kernels::dense_step(on, grads[t], st.values.view(), records, t, readonly(step));
        return;
      }
      detail::dgc_tensor_plan<T> p = tensor_plan;
      p.k = kept_count(st.info.numel, pending_.density);
      p.seed = detail::derive_seed(cfg_.seed, t, step_);
      const auto ws = workspace_.view().subspan(slot * workspace_bytes_, workspace_bytes_);
      kernels::compressed_step(on, p, cfg_.sampling, grads[t], st.u.view(), st.v.view(), st.indices.view(),
                               st.values.view(), ws, guides_[t], records, t, readonly(step));
    };
    ops::for_each(on, exec_, all, step_tensor);
    kernels::commit(on, records, step);
    pending_.on = on;
    pending_.issued = true;
    payload_staged_ = false;
    pending_.number = step_;
    return {};
  }

  /**
   * @brief The outcome and statistics of the last `compress` (waits for it).
   * @return the statistics, or the step's refusal: `errc::non_finite_input` (nothing modified),
   *         `errc::state_overflow` (the step would overflow the momentum or the accumulator;
   *         nothing modified), `errc::nan_input` (only with `check_finite` off and no clipping:
   *         the accumulator overflowed to NaN; state is then unspecified);
   *         `errc::invalid_argument` before the first `compress`.
   */
  [[nodiscard]] result<step_stats> stats() {
    wait();
    if (last_status_ != errc::ok) return fail(last_status_);
    return last_stats_;
  }

  /**
   * @brief An upper bound of `encode_message`'s output with options `opt`, valid for every step
   * (it uses the largest density of the schedule). Reserve a buffer of this size once.
   */
  std::size_t max_message_bytes(const wire::encode_options& opt = {}) const noexcept {
    // Registration checked that the sizes fit (numel below 2^32, the total below size_t's limit).
    std::uint64_t total = wire::message_overhead_bytes(opt);
    for (const auto& st : tensors_) {
      const std::size_t kept = st.info.compressed ? st.indices.size() : st.info.numel;
      total += *wire::max_section_bytes(st.info.numel, kept, !st.info.compressed, opt);
    }
    return static_cast<std::size_t>(total);
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
    for (const auto& st : tensors_) {
      receiver_tensor rt;
      rt.info = st.info;
      rt.dense = !st.info.compressed;
      rt.momentum = !st.info.compressed || !corrected;
      rt.max_kept = st.info.compressed ? kept_count(st.info.numel, cfg_.schedule.max_density()) : 0;
      r.tensors.push_back(std::move(rt));
    }
    return r;
  }

  /**
   * @brief Encodes the last step's message of every tensor into `out` (wire format,
   * docs/wire_format.md); this is what a worker sends. Waits for the step (on a device, together
   * with the copy of its message: one synchronisation). Allocates nothing.
   * @return bytes written; the step's refusal (see `stats()`); or the errors of `wire::encode`
   *         (`errc::output_too_small`, `errc::value_out_of_range` when a value does not fit
   *         fp16/bf16).
   */
  [[nodiscard]] result<std::size_t> encode_message(const wire::encode_options& opt, span<std::byte> out) {
    wait(true);
    if (last_status_ != errc::ok) return fail(last_status_);
    for (std::size_t t = 0; t < tensors_.size(); ++t) messages_[t] = host_message(t);
    return wire::encode(span<const tensor_message<T>>(messages_.data(), messages_.size()), opt, out);
  }

  /// Tensor `id`'s part of the last step's message, in the backend's memory (unchecked id; waits
  /// for the step).
  tensor_message<T, space> message(std::size_t id) {
    wait();
    const tensor_state& st = tensors_[id];
    tensor_message<T, space> m;
    m.tensor = id;
    m.numel = st.info.numel;
    m.dense = !st.info.compressed;
    if (m.dense) {
      m.values = readonly(st.values.view());
    } else {
      const std::size_t kept = static_cast<std::size_t>(host_records()[id].kept);
      m.indices = readonly(st.indices.view()).first(kept);
      m.values = readonly(st.values.view()).first(kept);
    }
    return m;
  }

  /**
   * @brief The last step's message as views of the backend's memory, for an encoder that runs
   * there (`wire::device_encoder`, `<gradcomp/thrust/wire_encode.hpp>`): each compressed tensor's
   * index and value buffers (room for its largest k) with the location of its count, each dense
   * tensor's values, and the step's verdict (a refused step's refusal). Waits for nothing: the
   * views stay valid while the compressor and its tensors do, and always hold the data of the
   * step issued last, in the stream's order, so the encoder is set up once and issued after each
   * `compress`.
   */
  wire::device_message<T, space> device_message() const {
    wire::device_message<T, space> m;
    const record* records = records_.view().data();
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor_state& st = tensors_[t];
      wire::device_section<T, space> s;
      s.tensor = static_cast<std::uint32_t>(t);
      s.numel = static_cast<std::uint32_t>(st.info.numel);
      s.dense = !st.info.compressed;
      s.values = readonly(st.values.view());
      if (st.info.compressed) {
        s.indices = readonly(st.indices.view());
        s.kept = &(records + t)->kept;
      }
      m.sections.push_back(s);
    }
    m.verdict = &step_record_.view().data()->status;
    return m;
  }

  /// What the selection of compressed tensor `id` achieved in the last step (unchecked id;
  /// waits for the step).
  selection_result<T> selection(std::size_t id) {
    wait();
    return host_records()[id].selection;
  }

  /// The residual accumulator V of tensor `id` (unchecked id), in the backend's memory (empty for
  /// dense tensors).
  backend_span<const T, Backend> residual(std::size_t id) const noexcept { return tensors_[id].v.view(); }
  /// The momentum buffer U of tensor `id` (unchecked id), in the backend's memory (empty for dense
  /// tensors and without correction).
  backend_span<const T, Backend> momentum_buffer(std::size_t id) const noexcept { return tensors_[id].u.view(); }

 private:
  friend struct detail::dgc_snapshot_access;

  struct tensor_state {
    tensor_info info;
    buffer<T> u;                    // momentum U
    buffer<T> v;                    // residual accumulator V
    buffer<std::uint32_t> indices;  // last step's sent indices (capacity: max k)
    buffer<T> values;               // last step's sent values (or the whole dense tensor)
    std::size_t staged_index_offset = 0;  // where the message is staged on the host
    std::size_t staged_value_offset = 0;
  };

  // The step issued by the last compress, until its outcome is read.
  struct pending_step {
    bool issued = false;
    Backend on{};
    std::size_t number = 0;
    std::size_t stage = 0;
    double density = 0.0;
  };

  // The records as the host can read them: in place in host-accessible memory, else the copy
  // the last wait staged.
  const record* host_records() const noexcept {
    if constexpr (host_memory)
      return records_.view().data();
    else
      return staged_records_.data();
  }

  // Tensor t's message in host memory (after wait(true)).
  tensor_message<T> host_message(std::size_t t) const noexcept {
    const tensor_state& st = tensors_[t];
    const std::size_t n = st.info.compressed ? static_cast<std::size_t>(host_records()[t].kept) : st.info.numel;
    tensor_message<T> m;
    m.tensor = t;
    m.numel = st.info.numel;
    m.dense = !st.info.compressed;
    if constexpr (host_memory) {
      if (st.info.compressed) m.indices = span<const std::uint32_t>(st.indices.view().data(), n);
      m.values = span<const T>(st.values.view().data(), n);
    } else {
      if (st.info.compressed) m.indices = span<const std::uint32_t>(staged_indices_.data() + st.staged_index_offset, n);
      m.values = span<const T>(staged_values_.data() + st.staged_value_offset, n);
    }
    return m;
  }

  // Waits for the step in progress and takes its outcome: the verdict, the statistics, the step
  // counter. With `payload`, backends whose memory the host cannot read also copy the messages
  // to the host, within the same synchronisation when a step is in progress (up to each tensor's
  // k of the step: the counts are not known before it).
  void wait(bool payload = false) {
    if constexpr (host_memory) {
      (void)payload;
      if (!pending_.issued) return;
      ops::synchronize(pending_.on);
      take_outcome(step_record_.view()[0]);
    } else {
      payload = payload && !payload_staged_;
      if (!pending_.issued && !payload) return;
      const Backend on = pending_.issued ? pending_.on : backend_;
      const double density = pending_.issued ? pending_.density : last_density_;
      detail::dgc_step_record verdict;
      if (pending_.issued) {
        ops::copy_to_host(on, readonly(records_.view()), span<record>(staged_records_.data(), staged_records_.size()));
        ops::copy_to_host(on, readonly(step_record_.view()), span<detail::dgc_step_record>(&verdict, 1));
      }
      if (payload) {
        for (std::size_t t = 0; t < tensors_.size(); ++t) {
          const tensor_state& st = tensors_[t];
          const std::size_t cap = st.info.compressed ? kept_count(st.info.numel, density) : st.info.numel;
          if (st.info.compressed)
            ops::copy_to_host(on, readonly(st.indices.view()).first(cap),
                              span<std::uint32_t>(staged_indices_.data() + st.staged_index_offset, cap));
          ops::copy_to_host(on, readonly(st.values.view()).first(cap),
                            span<T>(staged_values_.data() + st.staged_value_offset, cap));
        }
      }
      ops::synchronize(on);
      if (payload) payload_staged_ = true;
      if (pending_.issued) take_outcome(verdict);
    }
  }

  void take_outcome(const detail::dgc_step_record& verdict) {
    pending_.issued = false;
    last_status_ = static_cast<errc>(verdict.status);
    if (last_status_ != errc::ok) return;
    last_density_ = pending_.density;
    step_stats s;
    s.step = pending_.number;
    s.stage = pending_.stage;
    s.density = pending_.density;
    s.clip_coefficient = verdict.global_coef;
    const record* r = host_records();
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const std::size_t n = tensors_[t].info.numel;
      s.total_elements += n;
      if (cfg_.clipping == clip_scope::per_tensor) s.clip_coefficient = std::min(s.clip_coefficient, r[t].coef);
      if (!tensors_[t].info.compressed) {
        s.dense_elements += n;
        continue;
      }
      s.target_elements += kept_count(n, pending_.density);
      s.kept_elements += static_cast<std::size_t>(r[t].kept);
    }
    last_stats_ = s;
    ++step_;
  }

  dgc_config cfg_;
  Backend backend_;
  typename ops::executor exec_;
  std::vector<tensor_state> tensors_;
  buffer<record> records_;                        // one per tensor, in backend memory
  buffer<detail::dgc_step_record> step_record_;   // the step's verdict, in backend memory
  std::vector<typename kernels::template selection_state<T>> guides_;  // per tensor, the backend's
  buffer<std::byte> workspace_;
  std::size_t workspace_bytes_ = 0;
  // Bound of the largest message or snapshot of the registered tensors (see add_tensor).
  std::size_t worst_bytes_ = wire::message_header_bytes + wire::checksum_bytes + wire::section_header_bytes +
                             8 * wire::snapshot_state_words;
  std::vector<tensor_message<T>> messages_;
  std::size_t step_ = 0;
  std::size_t epoch_ = 0;
  std::vector<std::size_t> order_;             // tensor ids, largest first
  std::vector<std::size_t> compressed_order_;  // the compressed ones
  pending_step pending_{};
  errc last_status_ = errc::invalid_argument;  // no step yet
  step_stats last_stats_{};
  double last_density_ = 0.0;  // the density of the last successful step
  // Host copies of backend memory the host cannot read (unused for host-accessible memory).
  std::vector<record> staged_records_;
  std::vector<std::uint32_t> staged_indices_;
  std::vector<T> staged_values_;
  std::size_t staged_index_count_ = 0;
  std::size_t staged_value_count_ = 0;
  bool payload_staged_ = false;
};


/// The receiving side of DGC: the common `aggregator` (built from `dgc_compressor::receiver()`).
template <class T, class Backend = cpu_backend>
using dgc_aggregator = aggregator<T, Backend>;

}  // namespace gradcomp
