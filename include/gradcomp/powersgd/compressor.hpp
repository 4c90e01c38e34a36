/// @file powersgd/compressor.hpp
/// @brief PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
/// Compression for Distributed Optimization", NeurIPS 2019) on any backend: `powersgd_config` and
/// `powersgd_compressor`, whose step is two rounds of averaging over the workers (an all-reduce
/// each), the way PyTorch's `powerSGD_hook` runs it.
///
/// A compressed tensor is viewed as an n x m matrix M (its first dimension the rows, the product
/// of the others the columns). With error feedback M is the gradient plus the error e the worker
/// kept from its last step. A step:
/// 1. `begin_step(grads)`: Q (m x r: the last step's averaged Q with warm start, otherwise a seeded
///    Gaussian draw, the same on every worker) is orthogonalised and P = M Q; the payload to
///    average over the workers holds every tensor sent dense, then every P;
/// 2. `end_round(average)`: the dense tensors' averages are their updates; the averaged P is
///    orthogonalised and Q = M^T P; the payload to average holds every Q;
/// 3. `end_round(average)`: Q = the average (the next step's warm start), the update P Q^T, and
///    with error feedback e = M - P Q^T (the worker's own M).
/// `update(id)` is then tensor id's averaged gradient, the same bits on every worker. Each round
/// travels as a wire message of its own kind (`encode_round`, `round_layout`: any aggregator
/// averages it), which `comm::exchange_rounds` carries through an MPI or NCCL exchange.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../detail/philox.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "../wire/encode.hpp"
#include "../wire/tensor_message.hpp"
#include "arithmetic.hpp"
#include "cpu_ops.hpp"

namespace gradcomp {
namespace detail {
template <wire::snapshot_selection Method, bool Seeded>
struct residual_snapshot_access;
struct powersgd_snapshot_access;
template <class T, class Backend>
struct powersgd_snapshot_trait;
}  // namespace detail

/// Everything that parameterises PowerSGD; the names and defaults follow PyTorch's `PowerSGDState`
/// where it has them.
struct powersgd_config {
  /// r: the rank of each compressed tensor's approximation, at least 1 (a tensor whose matrix has
  /// fewer rows or columns takes that many).
  std::size_t rank = 1;
  /// Steps summed dense before compression begins (PyTorch's `start_powerSGD_iter`, which must be
  /// at least 2 there because of DDP's bucket rebuild; gradcomp has none and takes 0).
  std::size_t start_step = 0;
  /// A tensor is compressed only where `(n + m) r * min_compression_rate < n m`; must be > 0.
  double min_compression_rate = 2.0;
  /// Keep each compressed tensor's error e = M - P Q^T and add it to the next gradient.
  bool error_feedback = true;
  /// Start each step from the last step's averaged Q (else from a new draw every step).
  bool warm_start = true;
  /// Added to each column's norm in the orthogonalisation (PyTorch's `orthogonalization_epsilon`);
  /// finite and >= 0.
  double orthogonalization_epsilon = 0.0;
  /// Keys the draws of Q (every worker must use the same).
  std::uint64_t seed = 0;
};

/**
 * @brief The worker side of PowerSGD for a whole model (see the top of powersgd/compressor.hpp):
 * two rounds of averages over the workers per step, on the CPU or on the Thrust backend
 * (`<gradcomp/thrust.hpp>`), with the same bits on every backend.
 *
 * Tensors whose matrix is not worth compressing (PyTorch's rule, `powersgd_config`; vectors
 * always) are summed dense; `tensor_mode::dense` at registration sends one dense, and
 * `tensor_mode::compressed` compresses one the rule would not. Refused calls change nothing: a NaN
 * or an infinity in a gradient or in a sum (`errc::non_finite_input`), an M beyond the range of T
 * (`errc::state_overflow`), a call out of turn (`errc::invalid_argument`: `begin_step` while a
 * step is open, `end_round` without one; a refused `end_round` closes the step, which the workers
 * then begin again), sizes that do not match (`errc::wrong_tensor_count`, `errc::size_mismatch`).
 *
 * Unlike PyTorch's hook, which keeps one error for a whole bucket, a tensor sent dense keeps none
 * (its error there is the worker's part minus the mean, which sums to zero over the workers up to
 * rounding); the averages agree with the hook's up to the rounding of float32 products
 * (tests/powersgd/test_powersgd.cpp reproduces the hook's outputs from its own inputs).
 *
 * Gradients, payloads, averages and the state live in the backend's memory; the draws of Q are made
 * on the host (they need its `log` and `cos`) and copied there. On a backend whose work runs
 * asynchronously, `begin_step` and `end_round` wait for it where they check values (a NaN, an
 * overflow), and the views they return are ready once the backend's stream gets there (as
 * `encode_round` waits for).
 *
 * @tparam T float or double.
 * @tparam Backend `cpu_backend` or `thrust_backend<System>` (or a separate backend).
 */
template <class T, class Backend = cpu_backend>
class powersgd_compressor {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "powersgd_compressor supports float and double");
  using ops = detail::ops<Backend>;
  using kernels = detail::powersgd_ops<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;

 public:
  /// The element type.
  using value_type = T;
  /// The backend.
  using backend_type = Backend;
  /// Where gradients, payloads and the state live.
  using memory_space = memory_space_t<Backend>;
  /// A view of `U`s in that memory.
  template <class U>
  using view = span<U, memory_space>;
  /// How `save_snapshot` and `restore_snapshot` reach the state (powersgd/snapshot.hpp).
  using snapshot_trait = detail::powersgd_snapshot_trait<T, Backend>;

  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`).
  explicit powersgd_compressor(powersgd_config cfg, Backend backend = Backend{}) : cfg_(cfg), backend_(backend) {
    if (cfg_.rank == 0) throw error(errc::invalid_argument, "rank must be >= 1");
    if (!(cfg_.min_compression_rate > 0.0) || !std::isfinite(cfg_.min_compression_rate))
      throw error(errc::invalid_argument, "min_compression_rate must be finite and > 0");
    if (!(cfg_.orthogonalization_epsilon >= 0.0) || !std::isfinite(cfg_.orthogonalization_epsilon))
      throw error(errc::invalid_argument, "orthogonalization_epsilon must be finite and >= 0");
  }

  /**
   * @brief Registers a tensor of shape `shape` and allocates its buffers; returns its id. Throws
   * `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`, `errc::invalid_argument`
   * (also while a step is open).
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    if (round_ != 0) throw error(errc::invalid_argument, "add_tensor while a step is open");
    tensor t;
    t.info = detail::new_tensor_info(tensors_, std::move(name), std::move(shape), mode,
                                     compression_policy::every_tensor());
    t.rows = t.info.shape.empty() ? 1 : t.info.shape[0];
    t.cols = t.rows == 0 ? 0 : t.info.numel / t.rows;
    t.rank = std::min(std::min(t.rows, t.cols), cfg_.rank);
    const bool worth = static_cast<double>(t.rows + t.cols) * static_cast<double>(t.rank) * cfg_.min_compression_rate <
                       static_cast<double>(t.rows) * static_cast<double>(t.cols);
    t.info.compressed = t.rank != 0 && (mode == tensor_mode::compressed || (mode == tensor_mode::automatic && worth));
    t.update = zeros(t.info.numel);
    if (t.info.compressed) {
      t.m = zeros(t.info.numel);
      if (cfg_.error_feedback) t.e = zeros(t.info.numel);
      t.p = zeros(t.rows * t.rank);
      t.q = zeros(t.cols * t.rank);
      t.qo = zeros(t.cols * t.rank);
    }
    tensors_.push_back(std::move(t));
    layout();
    return tensors_.size() - 1;
  }

  /// The configuration.
  const powersgd_config& config() const noexcept { return cfg_; }
  /// The backend.
  const Backend& backend() const noexcept { return backend_; }
  /// Registered tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }
  /// What registration recorded of tensor `id` (unchecked); `compressed` says whether PowerSGD
  /// compresses it.
  const tensor_info& info(std::size_t id) const noexcept { return tensors_[id].info; }
  /// The rank of tensor `id`'s approximation (unchecked; 0 for a tensor sent dense).
  std::size_t rank(std::size_t id) const noexcept { return tensors_[id].info.compressed ? tensors_[id].rank : 0; }
  /// Steps completed.
  std::size_t step() const noexcept { return step_; }
  /// The rounds of the open step, or of the next one when none is open: 2 where it compresses a
  /// tensor, else 1 (a step before `start_step`, or no tensor worth compressing).
  std::size_t rounds() const noexcept { return compresses(step_open()) && q_size_ != 0 ? 2 : 1; }
  /// The round the open step awaits the average of (1 or 2), 0 when none is open.
  std::size_t round() const noexcept { return static_cast<std::size_t>(round_); }
  /// The payload length of round `k` (1 or 2) of the open step, or of the next one.
  std::size_t round_size(std::size_t k) const noexcept {
    if (k == 1) return compresses(step_open()) ? dense_size_ + p_size_ : total_size_;
    return k == 2 && rounds() == 2 ? q_size_ : 0;
  }

  /**
   * @brief Round `k` (1 or 2) of the open step, or of the next one, as an aggregator's layout: a
   * dense tensor per vector its payload holds, in payload order (round 1: every tensor sent
   * dense as itself, then each compressed tensor's P, named `name/P`, n x r; round 2: each Q,
   * `name/Q`, m x r), no receiver momentum. An `aggregator(wire::message_kind, layout)` of
   * `round_kind(k)` averages the workers' `encode_round` messages into what `end_round` takes.
   * Empty for a round the step does not have.
   */
  receiver_layout round_layout(std::size_t k) const {
    receiver_layout r;
    for_each_round_vector(k, step_open(), [&](const tensor& s, char factor) {
      r.tensors.push_back({factor == 0   ? dense_info(s.info)
                           : factor == 'P' ? factor_info(s, "/P", s.rows)
                                           : factor_info(s, "/Q", s.cols),
                           true, false, 0});
    });
    return r;
  }
  /// The message kind of round `k`: `first_round` or `second_round`.
  static wire::message_kind round_kind(std::size_t k) noexcept {
    return k == 2 ? wire::message_kind::second_round : wire::message_kind::first_round;
  }

  /**
   * @brief Round one of a step: reads every gradient (one per tensor, in registration order) and
   * returns this worker's payload, to be averaged element by element over the workers and given
   * to `end_round`. The view stays valid until the next call.
   * @return the payload, or `errc::wrong_tensor_count`, `errc::size_mismatch`,
   *         `errc::non_finite_input`, `errc::state_overflow`, `errc::invalid_argument` (a step
   *         is open): nothing changed then.
   */
  [[nodiscard]] result<view<const T>> begin_step(span<const view<const T>> grads) {
    if (round_ != 0) return fail(errc::invalid_argument);
    if (const errc e = detail::check_gradients(tensors_, grads); e != errc::ok) return fail(e);
    const bool compressing = compresses(false);
    const view<T> out = payload_buffer(0, compressing ? dense_size_ + p_size_ : total_size_);
    if (compressing) draw_cold_qs();
    bind(compressing, grads.data(), out.data());
    // Every gradient finite, then (g + e, written nowhere) every sum: one pass each way.
    const std::uint32_t bad = kernels::check(backend_, table_, detail::powersgd_check::step);
    if ((bad & detail::powersgd_bad_gradient) != 0) return fail(errc::non_finite_input);
    if ((bad & detail::powersgd_bad_sum) != 0) return fail(errc::state_overflow);
    compressing_ = compressing;
    kernels::send_dense(backend_, table_);
    if (compressing) kernels::project(backend_, table_, cfg_.orthogonalization_epsilon);
    round_ = 1;
    return payload();
  }

  /// The open round's payload (empty when none is open), valid until the next call.
  view<const T> payload() const noexcept {
    return round_ == 0 ? view<const T>() : readonly(payloads_[round_ - 1].view()).first(payload_size_[round_ - 1]);
  }

  /// The largest `encode_round` message of any round of the open or the next step, in `opt`'s
  /// dense value coding.
  std::size_t max_round_bytes(const wire::encode_options& opt = {}) const {
    std::size_t most = 0;
    for (std::size_t k = 1; k <= rounds(); ++k) {
      const auto sections = round_sections(k, nullptr);
      most = std::max(most, wire::max_encoded_bytes(span<const tensor_message<T>>(sections.data(), sections.size()),
                                                    opt)
                                .value());
    }
    return most;
  }

  /**
   * @brief The open round's payload as a message of kind `round_kind(round())`: one dense section
   * per vector of `round_layout(round())`, its values in `opt.dense_values` (fp32 or fp64 keep
   * them exact). Other workers' aggregators average it.
   * @return the bytes written, `errc::invalid_argument` (no round open), `errc::output_too_small`.
   */
  [[nodiscard]] result<std::size_t> encode_round(const wire::encode_options& opt, span<std::byte> out) const {
    if (round_ == 0) return fail(errc::invalid_argument);
    const T* values = nullptr;
    const view<const T> pl = payload();
    if constexpr (is_host_accessible_v<memory_space>) {
      ops::synchronize(backend_);
      values = pl.data();
    } else {
      host_payload_.resize(pl.size());
      ops::copy_to_host(backend_, pl, span<T>(host_payload_.data(), host_payload_.size()));
      ops::synchronize(backend_);
      values = host_payload_.data();
    }
    const auto sections = round_sections(round(), values);
    return wire::encode_round(round_kind(round()), span<const tensor_message<T>>(sections.data(), sections.size()), opt,
                              out);
  }

  /**
   * @brief Ends the open round with `average`, the element-wise average over the workers of their
   * payloads of this round (an aggregator of `round_layout(round())`: its tensors' updates in
   * order). After round 1 the tensors sent dense take their averages as their updates and,
   * where the step compresses, returns this worker's payload of round 2 (every Q); after round 2
   * (or a step of one round) the step is complete and the view is empty.
   * @return the next payload or an empty view, or `errc::size_mismatch`, `errc::non_finite_input`,
   *         `errc::invalid_argument` (no round open), which close the step with nothing changed.
   */
  [[nodiscard]] result<view<const T>> end_round(view<const T> average) {
    if (round_ == 0) return fail(errc::invalid_argument);
    if (average.size() != payload_size_[round_ - 1]) {
      round_ = 0;
      return fail(errc::size_mismatch);
    }
    pieces_.clear();
    std::size_t at = 0;
    for_each_round_vector(static_cast<std::size_t>(round_), true, [&](const tensor& s, char factor) {
      pieces_.push_back(average.subspan(at, vector_size(s, factor)));
      at += pieces_.back().size();
    });
    return end_round(span<const view<const T>>(pieces_.data(), pieces_.size()));
  }

  /**
   * @brief `end_round` with the average as one view per vector of `round_layout(round())`, in
   * order: an aggregator's `update(t)` for each of its tensors, read where they are (no copy into
   * one buffer, in any backend's memory).
   * @return as `end_round(average)`; `errc::size_mismatch` also for another number of views.
   */
  [[nodiscard]] result<view<const T>> end_round(span<const view<const T>> averages) {
    if (round_ == 0) return fail(errc::invalid_argument);
    const int k = round_;
    std::size_t i = 0;
    bool sizes = true;
    for_each_round_vector(static_cast<std::size_t>(k), true, [&](const tensor& s, char factor) {
      sizes = sizes && i < averages.size() && averages[i].size() == vector_size(s, factor);
      ++i;
    });
    round_ = 0;
    if (!sizes || i != averages.size()) return fail(errc::size_mismatch);
    // Round 2's payload, where round 1 leads to one, is in place before the averages are read.
    T* out2 = k == 1 && compressing_ && q_size_ != 0 ? payload_buffer(1, q_size_).data() : nullptr;
    bind(averages.data(), out2, k);
    if (kernels::check(backend_, table_, k == 1 ? detail::powersgd_check::round1 : detail::powersgd_check::round2) != 0)
      return fail(errc::non_finite_input);
    return k == 1 ? end_first() : end_second();
  }

  /// Closes the open step with nothing changed (its exchange failed); the workers then begin the
  /// step again.
  void cancel_step() noexcept { round_ = 0; }

  /// Tensor `id`'s averaged gradient from the last completed step (unchecked id).
  view<const T> update(std::size_t id) const noexcept { return tensors_[id].update.view(); }
  /// Tensor `id`'s error e (unchecked id; empty for a tensor sent dense or without error feedback).
  view<const T> error_feedback(std::size_t id) const noexcept { return tensors_[id].e.view(); }
  /// Tensor `id`'s Q (unchecked id; m x r, row-major): after a step, the averaged Q the next one
  /// starts from with warm start.
  view<const T> q(std::size_t id) const noexcept { return tensors_[id].q.view(); }

  /**
   * @brief Sets the Q (m x r, row-major, not yet orthogonalised, in host memory) that compressed
   * tensor `id`'s next compressing step starts from, instead of its draw or its warm start (to
   * follow another implementation's draws, or to restore a saved state).
   * @return `errc::unknown_tensor`, `errc::invalid_argument` (a tensor sent dense, or a step open),
   *         `errc::size_mismatch`, `errc::non_finite_input`.
   */
  [[nodiscard]] result<void> set_q(std::size_t id, span<const T> q) {
    if (id >= tensors_.size()) return fail(errc::unknown_tensor);
    tensor& s = tensors_[id];
    if (!s.info.compressed || round_ != 0) return fail(errc::invalid_argument);
    if (q.size() != s.q.view().size()) return fail(errc::size_mismatch);
    for (const T x : q)
      if (!std::isfinite(x)) return fail(errc::non_finite_input);
    ops::copy_to_backend(backend_, q, s.q.view());
    ops::synchronize(backend_);
    s.q_set = true;
    return {};
  }

 private:
  friend struct detail::powersgd_snapshot_access;
  friend struct detail::residual_snapshot_access<wire::snapshot_selection::powersgd, true>;

  struct tensor {
    tensor_info info;
    std::size_t rows = 0, cols = 0, rank = 0;
    buffer<T> m;       // this step's matrix: the gradient plus e
    buffer<T> e;       // the error (compressed tensors, with error feedback)
    buffer<T> p;       // n x r
    buffer<T> q;       // m x r: the last step's average, or set_q's
    buffer<T> qo;      // this step's Q, orthogonalised (read by begin_step only; a snapshot's staging)
    buffer<T> update;  // the last step's average
    bool q_warm = false;    // q holds the last step's averaged Q
    bool q_set = false;     // q holds set_q's
  };

  void layout() {
    dense_size_ = p_size_ = q_size_ = total_size_ = 0;
    for (const tensor& s : tensors_) {
      total_size_ += s.info.numel;
      if (!s.info.compressed) {
        dense_size_ += s.info.numel;
      } else {
        p_size_ += s.p.view().size();
        q_size_ += s.q.view().size();
      }
    }
  }

  buffer<T> zeros(std::size_t n) {
    buffer<T> b = ops::template allocate<T>(backend_, n);
    ops::fill_zero(backend_, b.view());
    return b;
  }
  // Round k's payload buffer (0: round 1), n long: a buffer per round, so that an average given
  // in the other round's buffer (a lone worker's own payload) is never overwritten while read.
  view<T> payload_buffer(std::size_t k, std::size_t n) {
    if (payloads_[k].view().size() < n) payloads_[k] = ops::template allocate<T>(backend_, n);
    payload_size_[k] = n;
    return payloads_[k].view().first(n);
  }

  // Q's draw for tensor t at step `step`, appended to q: standard normal values keyed by (seed,
  // step, tensor).
  void draw_q(std::size_t t, std::size_t step, std::vector<T>& q) const {
    const auto tensor = static_cast<std::uint32_t>(t);
    const std::size_t n = tensors_[t].q.view().size();
    for (std::size_t k = 0; k < n; ++k) {
      const auto i = static_cast<std::uint32_t>(2 * k);
      const double u1 = detail::uniform_of_draw(detail::element_draw(cfg_.seed, step, tensor, i));
      const double u2 = detail::uniform_of_draw(detail::element_draw(cfg_.seed, step, tensor, i + 1));
      q.push_back(static_cast<T>(detail::powersgd_normal(u1, u2)));
    }
  }

  // Whether compressed tensor s's next Q starts from its q (set_q's, or the warm start) rather
  // than from a draw.
  bool starts_warm(const tensor& s) const noexcept { return s.q_set || (cfg_.warm_start && s.q_warm); }

  // Compressed tensor t's Q of its next compressing step, before orthogonalisation, into `q` (the
  // backend's memory): set_q's or the warm start, else the draw of that step, made on the host
  // (what a snapshot saves).
  void start_q(std::size_t t, view<T> q) {
    const tensor& s = tensors_[t];
    if (starts_warm(s)) {
      kernels::copy(backend_, readonly(s.q.view()), q);
      return;
    }
    drawn_.clear();
    draw_q(t, std::max(step_, cfg_.start_step), drawn_);
    ops::copy_to_backend(backend_, span<const T>(drawn_.data(), drawn_.size()), q);
    ops::synchronize(backend_);  // drawn_ is the host's again
  }

  // The draws of this step's Qs that do not start warm, made on the host (the bits of every
  // backend) and uploaded at once into drawn_buffer_, in registration order.
  void draw_cold_qs() {
    drawn_.clear();
    for (std::size_t t = 0; t < tensors_.size(); ++t)
      if (tensors_[t].info.compressed && !starts_warm(tensors_[t]))
        draw_q(t, std::max(step_, cfg_.start_step), drawn_);
    if (drawn_.empty()) return;
    if (drawn_buffer_.view().size() < drawn_.size())
      drawn_buffer_ = ops::template allocate<T>(backend_, drawn_.size());
    ops::copy_to_backend(backend_, span<const T>(drawn_.data(), drawn_.size()),
                         drawn_buffer_.view().first(drawn_.size()));
    ops::synchronize(backend_);  // drawn_ is the host's again
  }

  static T* data_or_null(buffer<T>& b) noexcept { return b.view().empty() ? nullptr : b.view().data(); }
  // Entry t's buffers: tensor t's own (a copied compressor binds its copies).
  static void set_buffers(detail::powersgd_entry<T>& x, tensor& s) noexcept {
    x.e = data_or_null(s.e);
    x.m = data_or_null(s.m);
    x.qo = data_or_null(s.qo);
    x.q = data_or_null(s.q);
    x.p = data_or_null(s.p);
    x.update = data_or_null(s.update);
  }

  // The step's table (powersgd/model.hpp) as begin_step needs it: every tensor's gradient, buffers,
  // place in round 1's payload at `out1` (the tensors sent dense first, then every P), where its Q
  // starts (drawn_buffer_ holds the cold ones in order), and its items in each space.
  void bind(bool compressing, const view<const T>* grads, T* out1) {
    namespace d = detail;
    entries_.resize(tensors_.size());
    std::uint64_t first[d::powersgd_spaces] = {};
    std::size_t dense_at = 0, p_at = compressing ? dense_size_ : total_size_, drawn_at = 0;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      tensor& s = tensors_[t];
      d::powersgd_entry<T>& x = entries_[t];
      const bool c = compressing && s.info.compressed;
      set_buffers(x, s);
      x.g = grads[t].data();
      x.numel = s.info.numel;
      x.rows = s.rows;
      x.cols = s.cols;
      x.rank = s.rank;
      x.compressed = c ? 1 : 0;
      x.q_from = nullptr;
      if (c) {
        x.q_from = starts_warm(s) ? x.q : drawn_buffer_.view().data() + drawn_at;
        if (!starts_warm(s)) drawn_at += s.cols * s.rank;
        x.out1 = out1 + p_at;
        p_at += s.rows * s.rank;
      } else {
        x.out1 = out1 + dense_at;
        dense_at += s.info.numel;
      }
      const std::size_t groups = d::powersgd_column_groups(s.rank);
      x.items[d::powersgd_elements] = s.info.numel;
      x.items[d::powersgd_dense] = c ? 0 : s.info.numel;
      x.items[d::powersgd_matrix] = c ? s.info.numel : 0;
      x.items[d::powersgd_p_items] = c ? s.rows * groups : 0;
      x.items[d::powersgd_q_items] = c ? s.cols * groups : 0;
      x.items[d::powersgd_p] = c ? s.rows * s.rank : 0;
      x.items[d::powersgd_q] = c ? s.cols * s.rank : 0;
      x.items[d::powersgd_round1] = c ? s.rows * s.rank : s.info.numel;
      x.items[d::powersgd_matrices] = c ? 1 : 0;
      for (std::size_t k = 0; k < d::powersgd_spaces; ++k) {
        x.first[k] = first[k];
        first[k] += x.items[k];
      }
    }
    kernels::bind(backend_, table_, span<const d::powersgd_entry<T>>(entries_.data(), entries_.size()));
  }

  // The table as round k's end needs it: every tensor's average of round k (the views in the order
  // of round_layout(k)) and, after round 1, its place in round 2's payload at `out2` (null: none).
  void bind(const view<const T>* averages, T* out2, int k) {
    std::size_t i = 0, q_at = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t t = 0; t < tensors_.size(); ++t) {
        detail::powersgd_entry<T>& x = entries_[t];
        if ((pass == 1) != (x.compressed != 0)) continue;
        set_buffers(x, tensors_[t]);
        if (k == 1) {
          x.avg1 = averages[i++].data();
          if (x.compressed != 0 && out2 != nullptr) {
            x.out2 = out2 + q_at;
            q_at += x.cols * x.rank;
          }
        } else if (x.compressed != 0) {
          x.avg2 = averages[i++].data();
        }
      }
    kernels::bind(backend_, table_, span<const detail::powersgd_entry<T>>(entries_.data(), entries_.size()));
  }

  // Whether the open step (open: true) or the next one compresses.
  bool compresses(bool open) const noexcept { return open ? compressing_ : step_ >= cfg_.start_step; }
  bool step_open() const noexcept { return round_ != 0; }

  static tensor_info dense_info(tensor_info info) {
    info.compressed = false;
    return info;
  }
  // The info of a compressed tensor's P (rows: n) or Q (rows: m), rows x r.
  // Calls f(tensor, factor) for each vector of round k's layout, in order, of the open step (open)
  // or the next: factor 0 for a tensor sent dense as itself, 'P' or 'Q' for a compressed tensor's
  // factor.
  template <class F>
  void for_each_round_vector(std::size_t k, bool open, F&& f) const {
    const bool compressing = compresses(open);
    if (k == 0 || k > (compressing && q_size_ != 0 ? 2u : 1u)) return;
    for (int pass = 0; pass < 2 && k == 1; ++pass)
      for (const tensor& s : tensors_)
        if ((pass == 0) != (compressing && s.info.compressed)) f(s, pass == 0 ? char(0) : 'P');
    for (const tensor& s : tensors_)
      if (k == 2 && s.info.compressed) f(s, 'Q');
  }
  static std::size_t vector_size(const tensor& s, char factor) noexcept {
    return factor == 0 ? s.info.numel : (factor == 'P' ? s.rows : s.cols) * s.rank;
  }

  static tensor_info factor_info(const tensor& s, const char* suffix, std::size_t rows) {
    tensor_info info;
    info.name = s.info.name + suffix;
    info.shape = {rows, s.rank};
    info.numel = rows * s.rank;
    return info;
  }

  // Round k's sections over a payload at `values` (null: sizes only), one per layout tensor.
  std::vector<tensor_message<T>> round_sections(std::size_t k, const T* values) const {
    const receiver_layout layout = round_layout(k);
    std::vector<tensor_message<T>> out(layout.tensors.size());
    std::size_t at = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::size_t n = layout.tensors[i].info.numel;
      out[i].tensor = i;
      out[i].numel = n;
      out[i].dense = true;
      out[i].values = span<const T>(values == nullptr ? nullptr : values + at, values == nullptr ? 0 : n);
      at += n;
    }
    return out;
  }

  // Round 1's averages (bound and checked): the dense tensors' updates, and where the step
  // compresses, round 2's payload.
  result<view<const T>> end_first() {
    kernels::take_dense(backend_, table_);
    if (!compressing_ || q_size_ == 0) return finish();
    kernels::project_back(backend_, table_, cfg_.orthogonalization_epsilon);
    round_ = 2;
    return payload();
  }

  // Round 2's averages (bound and checked): every Q, the updates and the errors.
  result<view<const T>> end_second() {
    kernels::rebuild(backend_, table_);
    for (tensor& s : tensors_) {
      if (!s.info.compressed) continue;
      s.q_warm = true;
      s.q_set = false;
    }
    return finish();
  }

  result<view<const T>> finish() {
    ++step_;
    round_ = 0;
    return view<const T>();
  }

  powersgd_config cfg_;
  Backend backend_;
  std::vector<tensor> tensors_;
  buffer<T> payloads_[2];
  std::size_t payload_size_[2] = {0, 0};
  std::vector<T> drawn_;                 // the host's draws of the step's cold Qs
  buffer<T> drawn_buffer_;               // the same in the backend's memory
  std::vector<detail::powersgd_entry<T>> entries_;  // the step's table, on the host
  typename kernels::template table<T> table_;       // the same as the kernels keep it
  mutable std::vector<T> host_payload_;  // encode_round's copy, where the host cannot read the backend's memory
  std::vector<view<const T>> pieces_;    // end_round's average, split by its layout
  std::size_t dense_size_ = 0, p_size_ = 0, q_size_ = 0, total_size_ = 0;
  std::size_t step_ = 0;
  int round_ = 0;  // the round a step awaits (0: none open)
  bool compressing_ = false;
};

}  // namespace gradcomp
