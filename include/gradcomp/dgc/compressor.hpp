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

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../detail/rng.hpp"
#include "../detail/task_pool.hpp"
#include "../error.hpp"
#include "../select/sampled_threshold.hpp"
#include "../select/selection_types.hpp"
#include "../span.hpp"
#include "../tensor_message.hpp"
#include "clipping.hpp"
#include "momentum_kind.hpp"
#include "../wire/decode.hpp"
#include "../wire/encode.hpp"
#include "warmup_schedule.hpp"

namespace gradcomp {

/// How a compressed tensor's entries are chosen.
enum class selection_method : unsigned char {
  sampled_threshold = 0,  ///< DGC's sampled threshold (about k entries, never more).
  exact_topk = 1,         ///< Exactly k entries of largest magnitude.
};

/// Per-tensor override of the compression policy.
enum class tensor_mode : unsigned char {
  automatic = 0,   ///< Decided by `compression_policy`.
  compressed = 1,  ///< Always sparsified.
  dense = 2,       ///< Always sent whole.
};

/**
 * @brief Which tensors are sparsified (docs/algorithms.md, "Which tensors are compressed").
 *
 * The default is the DGC authors' rule: tensors of rank <= 1 (biases, normalisation parameters)
 * go dense, every other tensor is compressed. `min_compressed_elements` additionally sends small
 * tensors dense (another framework uses 16384); `predicate`, when set, decides instead of both.
 */
struct compression_policy {
  std::size_t min_compressed_elements = 0;  ///< Tensors with fewer elements go dense.
  bool compress_vectors = false;            ///< Compress rank <= 1 tensors too.
  /// Optional: returns true to compress the tensor of this name and shape.
  std::function<bool(const std::string& name, const std::vector<std::size_t>& shape)> predicate;

  /// Applies the policy to one tensor.
  bool compresses(const std::string& name, const std::vector<std::size_t>& shape) const {
    if (predicate) return predicate(name, shape);
    std::size_t numel = 1;
    for (std::size_t d : shape) numel *= d;
    if (!compress_vectors && shape.size() <= 1) return false;
    return numel >= min_compressed_elements;
  }
};

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

/// A registered tensor.
struct tensor_info {
  std::string name;                ///< Unique name.
  std::vector<std::size_t> shape;  ///< Dimensions (only their product and rank matter).
  std::size_t numel = 0;           ///< Number of elements.
  bool compressed = false;         ///< Sparsified (true) or sent dense (false).
};

/// What one `compress` call did.
struct dgc_step_stats {
  std::size_t step = 0;               ///< Step number of this call (0-based).
  std::size_t stage = 0;              ///< Warm-up stage.
  double density = 0.0;               ///< Target density of compressed tensors.
  double clip_coefficient = 1.0;      ///< Global clip factor (smallest factor when per tensor).
  std::size_t total_elements = 0;     ///< Elements of all tensors.
  std::size_t dense_elements = 0;     ///< Elements sent dense.
  std::size_t target_elements = 0;    ///< Sum of k over compressed tensors.
  std::size_t kept_elements = 0;      ///< Entries actually selected in compressed tensors.
};

namespace detail {
struct snapshot_access;

// Bounds of magnitudes that stay clear of overflow: a step whose magnitudes, bounded in double
// arithmetic from exact inputs, stay below state_limit<T>() cannot produce an infinity in T (the
// margin covers T's rounding of the few operations of a step); bounds carried to the next step
// are widened by bound_slack for the same reason.
template <class T>
constexpr double state_limit() noexcept {
  return static_cast<double>(std::numeric_limits<T>::max()) * (1.0 - 1.0 / 65536.0);
}
inline constexpr double bound_slack = 1.0 + 1.0 / 1048576.0;

// A norm as scale * root (see cpu::norm_result), so that a norm beyond the double range still
// gives its clip coefficient.
struct scaled_norm {
  double scale = 1.0;
  double root = 0.0;
};

// clip_coefficient for a scaled norm: threshold / norm when the norm exceeds a positive
// threshold, else exactly 1; with scale 1, bitwise clip_coefficient(root, threshold).
inline double clip_coefficient(scaled_norm n, double threshold) noexcept {
  if (n.scale == 1.0) return gradcomp::clip_coefficient(n.root, threshold);
  if (!(threshold > 0.0)) return 1.0;
  const double t = threshold / n.scale;
  return n.root > t ? t / n.root : 1.0;
}

// The L2 norm of a vector of norms (the global norm over tensors), summed in tensor order. When a
// norm is scaled or the sum of squares overflows, the norms are recomputed relative to the
// largest one (its scale, or its root when unscaled), so every finite gradient gets its true
// clip coefficient; otherwise the plain sum, so ordinary steps keep their bits.
inline scaled_norm global_norm(const std::vector<scaled_norm>& norms) noexcept {
  double sq = 0.0;
  bool plain = true;
  for (const auto& n : norms) {
    plain = plain && n.scale == 1.0;
    sq += n.root * n.root;
  }
  if (plain && std::isfinite(sq)) return {1.0, std::sqrt(sq)};
  double top = 0.0;
  for (const auto& n : norms) top = std::max(top, n.scale == 1.0 ? n.root : n.scale);
  double scaled = 0.0;
  for (const auto& n : norms) {
    const double x = n.scale == 1.0 ? n.root / top : (n.scale / top) * n.root;
    scaled += x * x;
  }
  return {top, std::sqrt(scaled)};
}

inline std::size_t checked_numel(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::uint32_t>::max() / d)
      throw error(errc::size_overflow, "tensor has more than 2^32 - 1 elements");
    n *= d;
  }
  return n;
}
}  // namespace detail

/**
 * @brief The sending side of DGC for a whole model, on one worker.
 *
 * Register tensors once with `add_tensor` (this allocates all state); then each step call
 * `compress` with one gradient per tensor, in registration order, and read `message(t)`.
 * `compress` allocates nothing.
 *
 * Non-finite gradients: `compress` first reads every gradient once (the L2 norms needed for
 * clipping); if any holds a NaN or an infinity it returns `errc::non_finite_input` and modifies
 * nothing (the step counter does not advance), so the trainer can skip the step or lower its loss
 * scale. Residuals are never poisoned by a bad gradient. A trainer that has checked its gradients
 * already can turn that read off with `dgc_config::check_finite` when it does not clip.
 *
 * Overflow: finite gradients can still be large enough (near the largest float) to push the
 * momentum or the residual accumulator to infinity. `compress` either succeeds with every state
 * value finite or returns `errc::state_overflow` with every tensor's state bitwise unchanged (and
 * the step counter not advanced). The rule costs nothing measurable: the read above also gives
 * each gradient's largest magnitude (or its norm, which bounds it), and the compressor keeps an
 * upper bound of each tensor's largest |U| and |V|; only when these bounds come near the largest
 * finite value does `compress` compute the step's exact magnitudes first (one more read of the
 * state, without writing). The rule needs that read: with `check_finite` off and no clipping,
 * overflow is the caller's responsibility, as non-finite gradients are.
 *
 * Determinism: the same config, seed and gradients give bitwise the same messages on every run;
 * sampling depends only on (seed, tensor id, step), so all workers sample the same positions.
 * Not thread-safe; use one compressor per worker. With `dgc_config::threads` > 1, `compress`
 * spreads the tensors over its own threads (created on the first call and kept; a copy, or an
 * object assigned to, creates its own for its configuration's thread count).
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs.
 */
template <class T, class Backend = cpu_backend>
class dgc_compressor {
  static_assert(detail::is_selectable_v<T>, "dgc_compressor supports float and double");
  using ops = detail::ops<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;

 public:
  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`) for a bad value.
  explicit dgc_compressor(dgc_config cfg, Backend backend = Backend{})
      : cfg_(std::move(cfg)), backend_(backend) {
    if (!(cfg_.momentum >= 0.0 && cfg_.momentum < 1.0))
      throw error(errc::invalid_argument, "momentum must be in [0, 1)");
    if (!(cfg_.clip_norm >= 0.0)) throw error(errc::invalid_argument, "clip_norm must be >= 0");
    if (cfg_.num_workers == 0) throw error(errc::invalid_argument, "num_workers must be >= 1");
    if (cfg_.threads == 0) throw error(errc::invalid_argument, "threads must be >= 1");
    if (cfg_.selection != selection_method::sampled_threshold && cfg_.selection != selection_method::exact_topk)
      throw error(errc::invalid_argument, "selection is not a selection_method");
    if (cfg_.clipping != clip_scope::global_norm && cfg_.clipping != clip_scope::per_tensor)
      throw error(errc::invalid_argument, "clipping is not a clip_scope");
    validate(cfg_.sampling).value();
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
   * `errc::invalid_argument` (a `mode` outside `tensor_mode`).
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    if (mode != tensor_mode::automatic && mode != tensor_mode::compressed && mode != tensor_mode::dense)
      throw error(errc::invalid_argument, "mode is not a tensor_mode");
    for (const auto& t : tensors_)
      if (t.info.name == name) throw error(errc::duplicate_tensor, name);
    tensor_state st;
    st.info.numel = detail::checked_numel(shape);
    st.info.compressed = mode == tensor_mode::automatic ? cfg_.policy.compresses(name, shape)
                                                        : mode == tensor_mode::compressed;
    st.info.name = std::move(name);
    st.info.shape = std::move(shape);
    const std::size_t n = st.info.numel;
    // Every size is checked before anything is registered: the workspace of every thread, the
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
              ws_bytes, ops::template accumulate_and_select_workspace_bytes<T>(backend_, cfg_.sampling, n, k));
        else
          ws_bytes = std::max(ws_bytes, ops::template exact_topk_workspace_bytes<T>(backend_, n, k));
      }
    }
    constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
    if (ws_bytes > size_max / cfg_.threads) throw error(errc::size_overflow, "workspace for all threads");
    // What the tensor can add to a message (8-byte values, 5-byte indices) or to a snapshot (a
    // residual and a momentum section of 8-byte values): at most two headers and 16 bytes each.
    const std::uint64_t worst = 2 * wire::section_header_bytes + 16 * static_cast<std::uint64_t>(n);
    if (worst > size_max - worst_bytes_) throw error(errc::size_overflow, "message or snapshot size of the model");
    worst_bytes_ += static_cast<std::size_t>(worst);
    workspace_bytes_ = ws_bytes;
    if (st.info.compressed) {
      if (cfg_.sender_momentum() != momentum_kind::none) st.u.assign(n, T(0));
      st.v.assign(n, T(0));
      st.indices.assign(cap, 0);
      st.values.assign(cap, T(0));
    } else {
      st.values.assign(n, T(0));
    }
    workspace_.assign(workspace_bytes_ * cfg_.threads, std::byte{0});
    tensors_.push_back(std::move(st));
    order_.push_back(tensors_.size() - 1);
    std::stable_sort(order_.begin(), order_.end(), [this](std::size_t a, std::size_t b) {
      return tensors_[a].info.numel > tensors_[b].info.numel;
    });
    messages_.resize(tensors_.size());
    return tensors_.size() - 1;
  }

  /// Number of registered tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }
  /// The registration record of tensor `id` (unchecked).
  const tensor_info& info(std::size_t id) const noexcept { return tensors_[id].info; }
  /// The configuration.
  const dgc_config& config() const noexcept { return cfg_; }
  /// Steps compressed so far.
  std::size_t step() const noexcept { return step_; }
  /// The current epoch (for `schedule_unit::epoch`).
  std::size_t epoch() const noexcept { return epoch_; }
  /// Sets the epoch the next steps belong to; call at each epoch start.
  void set_epoch(std::size_t epoch) noexcept { epoch_ = epoch; }
  /// Density the next `compress` targets.
  double density() const noexcept { return cfg_.schedule.density(epoch_, step_); }
  /// Bytes of the internal selection workspace.
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }

  /**
   * @brief One DGC step over all registered tensors.
   * @param grads one local gradient per tensor, in registration order, in the backend's memory.
   * @return the step's statistics, or `errc::wrong_tensor_count`, `errc::size_mismatch`,
   *         `errc::non_finite_input` (nothing modified), `errc::state_overflow` (the step would
   *         overflow the momentum or the accumulator; nothing modified), `errc::nan_input` (only
   *         with `check_finite` off and no clipping: the accumulator overflowed to NaN; state is
   *         then unspecified).
   */
  [[nodiscard]] result<dgc_step_stats> compress(span<const span<const T>> grads) {
    if (grads.size() != tensors_.size()) return fail(errc::wrong_tensor_count);
    for (std::size_t t = 0; t < tensors_.size(); ++t)
      if (grads[t].size() != tensors_[t].info.numel) return fail(errc::size_mismatch);

    // Read every gradient once before touching state: norms for clipping, and the check that no
    // value is NaN or infinite (NaN marks a failed check). Without clipping the norms stay 0, so
    // every clip coefficient is exactly 1, and the check alone is a cheaper read; neither runs
    // when neither is wanted.
    // The same read gives each gradient's largest magnitude, or a bound of it (the norm), from
    // which the state overflow guard below works.
    const double local_threshold = local_clip_threshold(cfg_.clip_norm, cfg_.num_workers);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    norms_.assign(tensors_.size(), detail::scaled_norm{});  // no reallocation after the first step
    largest_.assign(tensors_.size(), std::numeric_limits<double>::infinity());  // inf: unknown
    if (local_threshold > 0.0) {
      auto norm_of = [&](std::size_t t, std::size_t) {
        const auto r = ops::l2_norm(backend_, grads[t]);
        norms_[t] = r.finite ? detail::scaled_norm{r.scale, r.root} : detail::scaled_norm{1.0, nan};
        // The norm bounds the largest magnitude; a scaled norm's scale is the largest magnitude.
        largest_[t] = r.scale == 1.0 ? norms_[t].root : r.scale;
      };
      for_each_tensor(norm_of);
    } else if (cfg_.check_finite) {
      auto check = [&](std::size_t t, std::size_t) {
        largest_[t] = ops::largest_magnitude(backend_, grads[t]);
        if (std::isnan(largest_[t])) norms_[t].root = nan;
      };
      for_each_tensor(check);
    }
    for (std::size_t t = 0; t < tensors_.size(); ++t)
      if (std::isnan(norms_[t].root)) return fail(errc::non_finite_input);
    // Summed in tensor order whatever the thread count.
    const double global_coef = detail::clip_coefficient(detail::global_norm(norms_), local_threshold);
    for (auto& st : tensors_) {
      const std::size_t t = static_cast<std::size_t>(&st - tensors_.data());
      st.coef = cfg_.clipping == clip_scope::global_norm ? global_coef
                                                          : detail::clip_coefficient(norms_[t], local_threshold);
    }
    if (const errc e = guard_state_overflow(grads); e != errc::ok) return fail(e);

    dgc_step_stats stats;
    stats.step = step_;
    stats.stage = cfg_.schedule.stage(epoch_, step_);
    stats.density = cfg_.schedule.density_at_stage(stats.stage);
    stats.clip_coefficient = cfg_.clipping == clip_scope::global_norm ? global_coef : 1.0;
    const momentum_kind kind = cfg_.sender_momentum();
    const T m = static_cast<T>(cfg_.momentum);
    const double density = stats.density;

    // Every tensor's step depends only on its own state and gradient, so the tensors can run on
    // any thread in any order with the same result.
    auto step_tensor = [&](std::size_t t, std::size_t thread) {
      tensor_state& st = tensors_[t];
      const std::size_t n = st.info.numel;
      const span<std::byte> ws(workspace_.data() + thread * workspace_bytes_, workspace_bytes_);
      const T c = static_cast<T>(st.coef);
      st.status = errc::ok;
      if (!st.info.compressed) {
        ops::scale_copy(backend_, c, grads[t], span<T>(st.values.data(), n));
        st.kept = n;
        return;
      }
      // 1. Momentum correction into the residual accumulator, 2. selection on the accumulator,
      // 3. the selected entries moved out of it (exact conservation) and 4. momentum factor
      // masking at their positions. For the sampled threshold, one fused pass does all four
      // (the same result as one after the other).
      const span<T> u(st.u.data(), st.u.size());
      const span<T> v(st.v.data(), n);
      const std::size_t k = kept_count(n, density);
      const span<std::uint32_t> idx(st.indices.data(), k);
      const span<T> values(st.values.data(), k);
      const bool masking = cfg_.momentum_masking && kind != momentum_kind::none;
      if (cfg_.selection == selection_method::sampled_threshold) {
        auto r = ops::accumulate_and_select(backend_, kind, m, c, grads[t], u, v, k, cfg_.sampling,
                                            detail::derive_seed(cfg_.seed, t, step_), idx, values,
                                            masking, ws, &st.guide);
        if (!r) {
          st.status = r.error();
          return;
        }
        st.selection = *r;
        st.kept = st.selection.count;
        return;
      }
      ops::momentum_accumulate(backend_, kind, m, c, grads[t], u, v);
      selection_result<T> sel;
      auto r = ops::exact_topk(backend_, span<const T>(v), k, idx, ws, &sel.threshold);
      if (!r) {
        st.status = r.error();
        return;
      }
      sel.count = *r;
      sel.target = k;
      sel.exact = true;
      st.selection = sel;
      st.kept = sel.count;
      ops::gather_and_zero(backend_, v, span<const std::uint32_t>(st.indices.data(), st.kept),
                           span<T>(st.values.data(), st.kept), masking ? u : span<T>());
    };
    for_each_tensor(step_tensor);

    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      tensor_state& st = tensors_[t];
      if (st.status != errc::ok) return fail(st.status);
      st.u_bound = st.next_u_bound;
      st.v_bound = st.next_v_bound;
      const std::size_t n = st.info.numel;
      stats.total_elements += n;
      if (cfg_.clipping == clip_scope::per_tensor)
        stats.clip_coefficient = std::min(stats.clip_coefficient, st.coef);
      if (!st.info.compressed) {
        stats.dense_elements += n;
        continue;
      }
      stats.target_elements += kept_count(n, density);
      stats.kept_elements += st.kept;
    }
    ++step_;
    return stats;
  }

  /// `compress` taking a vector of gradient views.
  [[nodiscard]] result<dgc_step_stats> compress(const std::vector<span<const T>>& grads) {
    return compress(span<const span<const T>>(grads.data(), grads.size()));
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
   * @brief Encodes the last step's message of every tensor into `out` (wire format,
   * docs/wire_format.md); this is what a worker sends. Allocates nothing.
   * @return bytes written, or the errors of `wire::encode` (`errc::output_too_small`,
   *         `errc::value_out_of_range` when a value does not fit fp16/bf16).
   */
  [[nodiscard]] result<std::size_t> encode_message(const wire::encode_options& opt,
                                                   span<std::byte> out) {
    for (std::size_t t = 0; t < tensors_.size(); ++t) messages_[t] = message(t);
    return wire::encode(span<const tensor_message<T>>(messages_.data(), messages_.size()), opt, out);
  }

  /// Tensor `id`'s part of the last step's message (unchecked id).
  tensor_message<T> message(std::size_t id) const noexcept {
    const tensor_state& st = tensors_[id];
    tensor_message<T> m;
    m.tensor = id;
    m.numel = st.info.numel;
    m.dense = !st.info.compressed;
    if (m.dense) {
      m.values = span<const T>(st.values.data(), st.info.numel);
    } else {
      m.indices = span<const std::uint32_t>(st.indices.data(), st.kept);
      m.values = span<const T>(st.values.data(), st.kept);
    }
    return m;
  }

  /// What the selection of compressed tensor `id` achieved in the last step (unchecked id).
  const selection_result<T>& selection(std::size_t id) const noexcept {
    return tensors_[id].selection;
  }

  /// The residual accumulator V of tensor `id` (empty for dense tensors).
  span<const T> residual(std::size_t id) const noexcept {
    return span<const T>(tensors_[id].v.data(), tensors_[id].v.size());
  }
  /// The momentum buffer U of tensor `id` (empty for dense tensors and without correction).
  span<const T> momentum_buffer(std::size_t id) const noexcept {
    return span<const T>(tensors_[id].u.data(), tensors_[id].u.size());
  }

 private:
  friend struct detail::snapshot_access;

  struct tensor_state {
    tensor_info info;
    buffer<T> u;                      // momentum U
    buffer<T> v;                      // residual accumulator V
    buffer<std::uint32_t> indices;    // last step's sent indices (capacity: max k)
    buffer<T> values;                 // last step's sent values (or the whole dense tensor)
    std::size_t kept = 0;
    selection_result<T> selection{};
    detail::step_guide<T> guide{};  // last thresholds: guide the next step's pass, never its result
    double coef = 1.0;      // this step's clip coefficient
    errc status = errc::ok;  // this step's outcome
    // Upper bounds of max |U| and max |V| (see guard_state_overflow), and the bounds the step in
    // progress leaves.
    double u_bound = 0.0, v_bound = 0.0;
    double next_u_bound = 0.0, next_v_bound = 0.0;
  };

  // The overflow rule of `compress`: before any state changes, bound for every compressed tensor
  // the magnitudes this step can leave in U and V, from last step's bounds and the gradient's
  // largest magnitude times its clip coefficient. Where the bound stays below the largest finite T
  // (the common case, a few operations per tensor), the step cannot overflow. Where it does not,
  // the exact magnitudes are computed with the step's own arithmetic, writing nothing; if one is
  // not finite the step is refused with errc::state_overflow and nothing has changed. The new
  // bounds are kept for the next step (exact ones after the exact pass). Without a read of the
  // gradients (check_finite off and no clipping) there is no bound and no guard.
  errc guard_state_overflow(span<const span<const T>> grads) {
    const momentum_kind kind = cfg_.sender_momentum();
    const double m = static_cast<double>(static_cast<T>(cfg_.momentum));
    const double limit = detail::state_limit<T>();
    const bool guarded = local_clip_threshold(cfg_.clip_norm, cfg_.num_workers) > 0.0 || cfg_.check_finite;
    bool exact_needed = false;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      tensor_state& st = tensors_[t];
      st.status = errc::ok;
      if (!st.info.compressed) continue;
      const double g = static_cast<double>(static_cast<T>(st.coef)) * largest_[t];
      double u = 0.0, v = 0.0;
      switch (kind) {
        case momentum_kind::none: v = st.v_bound + g; break;
        case momentum_kind::vanilla: u = m * st.u_bound + g; v = st.v_bound + u; break;
        case momentum_kind::nesterov: u = m * (st.u_bound + g); v = st.v_bound + u + g; break;
      }
      st.next_u_bound = u * detail::bound_slack;
      st.next_v_bound = v * detail::bound_slack;
      if (guarded && !(st.next_u_bound <= limit && st.next_v_bound <= limit)) {
        st.status = errc::state_overflow;  // marks the tensor for the exact pass
        exact_needed = true;
      }
    }
    if (!exact_needed) return errc::ok;
    const T mt = static_cast<T>(cfg_.momentum);
    auto exact = [&](std::size_t t, std::size_t) {
      tensor_state& st = tensors_[t];
      if (st.status != errc::state_overflow) return;
      const auto r = ops::accumulated_magnitudes(backend_, kind, mt, static_cast<T>(st.coef), grads[t],
                                                 span<const T>(st.u.data(), st.u.size()),
                                                 span<const T>(st.v.data(), st.v.size()));
      // The exact pass refuses what comes within the margin of the largest finite value too, so
      // that a build whose scalar arithmetic rounds differently from the vector kernels (a fused
      // multiply-add) cannot let an infinity through.
      if (!r.finite || !(r.u <= limit && r.v <= limit)) return;
      st.status = errc::ok;
      st.next_u_bound = r.u;
      st.next_v_bound = r.v;
    };
    for_each_tensor(exact);
    for (const auto& st : tensors_)
      if (st.status != errc::ok) return st.status;
    return errc::ok;
  }

  // Runs f(t, thread) for every tensor, on cfg_.threads threads, largest tensors first.
  template <class F>
  void for_each_tensor(F& f) {
    if (cfg_.threads <= 1 || tensors_.size() <= 1) {
      for (std::size_t t = 0; t < tensors_.size(); ++t) f(t, std::size_t(0));
      return;
    }
    auto by_size = [&](std::size_t i, std::size_t thread) { f(order_[i], thread); };
    pool_.get(cfg_.threads).run(order_.size(), by_size);
  }

  dgc_config cfg_;
  Backend backend_;
  std::vector<tensor_state> tensors_;
  buffer<std::byte> workspace_;
  std::size_t workspace_bytes_ = 0;
  // Bound of the largest message or snapshot of the registered tensors (see add_tensor).
  std::size_t worst_bytes_ = wire::message_header_bytes + wire::checksum_bytes + wire::section_header_bytes +
                             8 * wire::snapshot_state_words;
  std::vector<detail::scaled_norm> norms_;
  std::vector<double> largest_;  // per tensor: largest |g| or a bound of it (inf: unknown)
  std::vector<tensor_message<T>> messages_;
  std::size_t step_ = 0;
  std::size_t epoch_ = 0;
  std::vector<std::size_t> order_;  // tensor ids, largest first
  detail::lazy_task_pool pool_;
};

/**
 * @brief The receiving side of DGC: sums the messages of N workers and returns the averaged
 * update per tensor.
 *
 * Per step: `begin()`, `add()` every worker's message for every tensor, `finish(N)`, then
 * `w -= lr * update(t)`. `finish` divides by N and, for tensors the senders did not
 * momentum-correct (dense tensors; all tensors when `momentum_correction` is off), applies
 * ordinary momentum with the receiver's own buffer. Every replica that aggregates the same
 * messages computes bitwise the same update.
 *
 * Nothing a sender can put in a message poisons the aggregator: every `add` checks the message
 * completely against the layout first (tensor ids, each tensor exactly once for a whole message,
 * dense or sparse form, sizes, positions, finite values) and is refused with nothing added when
 * one check fails, or when an addition would make a sum overflow to infinity
 * (`errc::state_overflow`: the sums keep bounds of their magnitudes, and only a message that
 * comes near the largest finite value is checked element by element). `finish` likewise refuses
 * (`errc::state_overflow`, nothing modified) an average whose receiver-side momentum would
 * overflow.
 */
template <class T, class Backend = cpu_backend>
class dgc_aggregator {
  using ops = detail::ops<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;

 public:
  /// Takes the tensor layout and momentum settings of `layout` (allocates all buffers).
  explicit dgc_aggregator(const dgc_compressor<T, Backend>& layout, Backend backend = Backend{})
      : backend_(backend),
        momentum_(static_cast<T>(layout.config().momentum)),
        kind_(layout.config().receiver_momentum()) {
    const bool corrected = layout.config().sender_momentum() != momentum_kind::none;
    for (std::size_t t = 0; t < layout.num_tensors(); ++t) {
      tensor_state st;
      st.info = layout.info(t);
      st.sum.assign(st.info.numel, T(0));
      st.receiver_momentum = momentum_ > T(0) && (!st.info.compressed || !corrected);
      if (st.receiver_momentum) st.u.assign(st.info.numel, T(0));
      tensors_.push_back(std::move(st));
    }
    sums_.resize(tensors_.size());
    seen_.assign(tensors_.size(), 0);
    // Room to decode the positions of one message once (see wire::decode_accumulate).
    std::size_t scratch = 0;
    for (const auto& st : tensors_)
      if (st.info.compressed) scratch += kept_count(st.info.numel, layout.config().schedule.max_density());
    index_scratch_.assign(scratch, 0);
  }

  /// Copies layout, sums and momentum.
  dgc_aggregator(const dgc_aggregator&) = default;
  /// Moves everything.
  dgc_aggregator(dgc_aggregator&&) = default;
  /// Copy assignment with the strong guarantee: if copying throws, `*this` is unchanged.
  dgc_aggregator& operator=(const dgc_aggregator& other) {
    if (this != &other) {
      dgc_aggregator copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  /// Move assignment.
  dgc_aggregator& operator=(dgc_aggregator&&) = default;
  ~dgc_aggregator() = default;

  /// Zeroes the sums; call once per step before `add`.
  void begin() {
    for (auto& st : tensors_) {
      ops::fill_zero(backend_, span<T>(st.sum.data(), st.sum.size()));
      st.messages = 0;
      st.bound = 0.0;
    }
  }

  /**
   * @brief Adds one worker's message for one tensor (duplicate indices across workers add up).
   * @return `errc::unknown_tensor`, `errc::layout_mismatch` (numel or dense/sparse form differ
   *         from the layout), `errc::size_mismatch` (value count disagrees with the indices or
   *         the tensor), `errc::index_out_of_range`, `errc::indices_not_increasing` (indices
   *         must be strictly increasing, as on the wire), `errc::non_finite_input` (a NaN or an
   *         infinity among the values), `errc::state_overflow` (a sum would overflow); nothing
   *         is added on error.
   */
  [[nodiscard]] result<void> add(const tensor_message<T>& msg) {
    if (msg.tensor >= tensors_.size()) return fail(errc::unknown_tensor);
    tensor_state& st = tensors_[msg.tensor];
    if (msg.numel != st.info.numel || msg.dense == st.info.compressed)
      return fail(errc::layout_mismatch);
    const span<T> sum(st.sum.data(), st.sum.size());
    span<const std::uint32_t> idx;
    if (msg.dense) {
      if (msg.values.size() != st.info.numel) return fail(errc::size_mismatch);
    } else {
      if (msg.values.size() != msg.indices.size() || msg.indices.size() > st.info.numel)
        return fail(errc::size_mismatch);
      if (!ops::all_below(backend_, msg.indices, st.info.numel))
        return fail(errc::index_out_of_range);
      for (std::size_t j = 1; j < msg.indices.size(); ++j)
        if (msg.indices[j] <= msg.indices[j - 1]) return fail(errc::indices_not_increasing);
      idx = msg.indices;
    }
    const double largest = ops::largest_magnitude(backend_, msg.values);
    if (std::isnan(largest)) return fail(errc::non_finite_input);
    bool check_sums = false;
    accept(st, largest, check_sums);
    if (check_sums && std::isnan(ops::largest_magnitude_of_sum(backend_, span<const T>(sum), idx, msg.values)))
      return fail(errc::state_overflow);
    if (msg.dense)
      ops::add(backend_, msg.values, sum);
    else
      ops::scatter_add(backend_, msg.indices, msg.values, sum);
    commit(st);
    ++st.messages;
    return {};
  }

  /**
   * @brief Adds one worker's encoded step message (from `dgc_compressor::encode_message`): every
   * section is decoded and added into its tensor's sum. The message is checked completely first,
   * against the wire format and against the layout: it must carry every tensor exactly once, in
   * the form the layout gives it (a dense section for a tensor sent dense, a sparse one for a
   * compressed tensor) with the tensor's element count, and no sum may overflow. A message that
   * fails any check adds nothing.
   * @return `errc::unknown_tensor` (a tensor id beyond the layout), `errc::duplicate_tensor`
   *         (a tensor carried twice), `errc::missing_tensor` (a tensor not carried),
   *         `errc::layout_mismatch` (a section of the wrong form or element count, or not a
   *         gradient message), `errc::state_overflow`, and every decoding error of
   *         `wire::decode_accumulate`.
   */
  [[nodiscard]] result<void> add(span<const std::byte> message) {
    for (std::size_t t = 0; t < tensors_.size(); ++t)  // views refreshed: objects may have moved
      sums_[t] = span<T>(tensors_[t].sum.data(), tensors_[t].sum.size());
    std::fill(seen_.begin(), seen_.end(), static_cast<unsigned char>(0));
    layout_rules rules{*this};
    const auto r = wire::decode_accumulate<T>(
        message, span<const span<T>>(sums_.data(), sums_.size()),
        span<std::uint32_t>(index_scratch_.data(), index_scratch_.size()), rules);
    // The accumulators have the layout's sizes: a size error is a section of another numel.
    if (!r && (r.error() == errc::output_too_small || r.error() == errc::size_mismatch))
      return fail(errc::layout_mismatch);
    if (!r) return fail(r.error());
    for (auto& st : tensors_) {
      commit(st);
      ++st.messages;
    }
    return {};
  }

  /**
   * @brief Averages over `num_workers` and applies receiver-side momentum where due.
   * @return `errc::invalid_argument` if `num_workers` is 0 or some tensor did not receive exactly
   *         `num_workers` messages since `begin()`, `errc::state_overflow` if the receiver-side
   *         momentum would overflow; nothing is modified then.
   */
  [[nodiscard]] result<void> finish(std::size_t num_workers) {
    if (num_workers == 0) return fail(errc::invalid_argument);
    for (const auto& st : tensors_)
      if (st.messages != num_workers) return fail(errc::invalid_argument);
    const T inv = T(1) / static_cast<T>(num_workers);
    // Overflow guard as in add: the bound of |U| after the step from the bounds of |U| and of the
    // averaged sum; the exact magnitudes only where it comes near the largest finite value.
    // The bounds then describe the update the sums hold, so that a later add (before the next
    // begin) stays guarded.
    const double m = static_cast<double>(momentum_), limit = detail::state_limit<T>();
    for (auto& st : tensors_) {
      const double a = num_workers != 1 ? st.bound * static_cast<double>(inv) * detail::bound_slack : st.bound;
      st.next_bound = a;
      st.next_u_bound = st.u_bound;
      if (!st.receiver_momentum) continue;
      const double u = kind_ == momentum_kind::nesterov ? m * (st.u_bound + a) : m * st.u_bound + a;
      const double out = kind_ == momentum_kind::nesterov ? u + a : u;
      st.next_u_bound = u * detail::bound_slack;
      st.next_bound = out * detail::bound_slack;
      if (st.next_u_bound <= limit && st.next_bound <= limit) continue;
      const auto r = ops::momentum_apply_magnitudes(backend_, kind_, momentum_, inv, num_workers != 1,
                                                    span<const T>(st.u.data(), st.u.size()),
                                                    span<const T>(st.sum.data(), st.sum.size()));
      if (!r.finite) return fail(errc::state_overflow);
      st.next_u_bound = r.u;
      st.next_bound = r.v;
    }
    for (auto& st : tensors_) {
      const span<T> sum(st.sum.data(), st.sum.size());
      if (num_workers != 1) ops::scale(backend_, inv, sum);
      if (st.receiver_momentum)
        ops::momentum_apply(backend_, kind_, momentum_, span<T>(st.u.data(), st.u.size()), sum);
      st.u_bound = st.next_u_bound;
      st.bound = st.next_bound;
    }
    return {};
  }

  /// The update of tensor `id` after `finish` (unchecked id): apply as `w -= lr * update`.
  span<const T> update(std::size_t id) const noexcept {
    return span<const T>(tensors_[id].sum.data(), tensors_[id].sum.size());
  }
  /// Number of tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }

 private:
  friend struct detail::snapshot_access;

  struct tensor_state {
    tensor_info info;
    buffer<T> sum;
    buffer<T> u;
    bool receiver_momentum = false;
    std::size_t messages = 0;
    double bound = 0.0;       // upper bound of max |sum| since begin()
    double next_bound = 0.0;  // the bound once the add in progress is applied
    double u_bound = 0.0;     // upper bound of max |u|
    double next_u_bound = 0.0;
  };

  // Decides the overflow check of an add of values whose largest magnitude is `largest`: the
  // bound of the sum after it, and whether that bound needs the exact check.
  static void accept(tensor_state& st, double largest, bool& check_sums) noexcept {
    st.next_bound = (st.bound + largest) * detail::bound_slack;
    check_sums = !(st.next_bound <= detail::state_limit<T>());
    // After an exact check, no tighter bound is known than the largest finite value.
    if (check_sums) st.next_bound = static_cast<double>(std::numeric_limits<T>::max());
  }
  static void commit(tensor_state& st) noexcept { st.bound = st.next_bound; }

  // The layout an encoded message must follow (see add(span<const std::byte>)).
  struct layout_rules {
    dgc_aggregator& a;
    errc section(const wire::section_header& s, double largest, bool& check_sums) noexcept {
      // decode_accumulate has checked s.tensor against the number of tensors and numel.
      tensor_state& st = a.tensors_[s.tensor];
      if (a.seen_[s.tensor] != 0) return errc::duplicate_tensor;
      a.seen_[s.tensor] = 1;
      if ((s.indices == wire::index_coding::dense) == st.info.compressed) return errc::layout_mismatch;
      accept(st, largest, check_sums);
      return errc::ok;
    }
    errc complete() const noexcept {
      for (const unsigned char seen : a.seen_)
        if (seen == 0) return errc::missing_tensor;
      return errc::ok;
    }
  };

  Backend backend_;
  T momentum_;
  momentum_kind kind_;
  std::vector<tensor_state> tensors_;
  std::vector<span<T>> sums_;
  std::vector<unsigned char> seen_;  // tensors carried by the message being added
  std::vector<std::uint32_t> index_scratch_;
};

}  // namespace gradcomp
