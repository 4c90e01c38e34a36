/// @file powersgd/compressor.hpp
/// @brief PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
/// Compression for Distributed Optimization", NeurIPS 2019) on the CPU: `powersgd_config` and
/// `powersgd_compressor`, whose step is two rounds of summing over the workers (an all-reduce
/// each), the way PyTorch's `powerSGD_hook` runs it.
///
/// A compressed tensor is viewed as an n x m matrix M (its first dimension the rows, the product
/// of the others the columns). With error feedback M is the gradient plus the error e the worker
/// kept from its last step. A step:
/// 1. `begin_step(grads)`: Q (m x r: the last step's averaged Q with warm start, otherwise a seeded
///    Gaussian draw, the same on every worker) is orthogonalised and P = M Q; the payload to sum
///    over the workers holds every tensor sent dense, then every P;
/// 2. `reduce_first(sum)`: the dense tensors' sums become their averages; the summed P is
///    orthogonalised and Q = M^T P; the payload to sum holds every Q;
/// 3. `reduce_second(sum)`: Q = the sum / N (the next step's warm start), the update P Q^T, and
///    with error feedback e = M - P Q^T (the worker's own M).
/// `update(id)` is then tensor id's averaged gradient, the same bits on every worker.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/philox.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "arithmetic.hpp"

namespace gradcomp {

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
  /// N, the workers whose payloads each round sums; at least 1.
  std::size_t workers = 1;
};

/**
 * @brief The worker side of PowerSGD for a whole model, on the CPU (see the top of
 * powersgd/compressor.hpp): two rounds of sums over the workers per step.
 *
 * Tensors whose matrix is not worth compressing (PyTorch's rule, `powersgd_config`; vectors
 * always) are summed dense; `tensor_mode::dense` at registration sends one dense, and
 * `tensor_mode::compressed` compresses one the rule would not. Refused calls change nothing: a NaN
 * or an infinity in a gradient or in a sum (`errc::non_finite_input`), an M beyond the range of T
 * (`errc::state_overflow`), a call out of turn (`errc::invalid_argument`: `begin_step` while a
 * step is open, a `reduce_*` without one; a refused `reduce_*` closes the step, which the workers
 * then begin again), sizes that do not match (`errc::wrong_tensor_count`, `errc::size_mismatch`).
 *
 * Unlike PyTorch's hook, which keeps one error for a whole bucket, a tensor sent dense keeps none
 * (its error there is the worker's part minus the mean, which sums to zero over the workers up to
 * rounding); the averages agree with the hook's up to the rounding of float32 products
 * (tests/powersgd/test_powersgd.cpp reproduces the hook's outputs from its own inputs).
 *
 * @tparam T float or double.
 */
template <class T>
class powersgd_compressor {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "powersgd_compressor supports float and double");

 public:
  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`).
  explicit powersgd_compressor(powersgd_config cfg) : cfg_(cfg) {
    if (cfg_.rank == 0) throw error(errc::invalid_argument, "rank must be >= 1");
    if (!(cfg_.min_compression_rate > 0.0) || !std::isfinite(cfg_.min_compression_rate))
      throw error(errc::invalid_argument, "min_compression_rate must be finite and > 0");
    if (!(cfg_.orthogonalization_epsilon >= 0.0) || !std::isfinite(cfg_.orthogonalization_epsilon))
      throw error(errc::invalid_argument, "orthogonalization_epsilon must be finite and >= 0");
    if (cfg_.workers == 0) throw error(errc::invalid_argument, "workers must be >= 1");
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
    t.update.assign(t.info.numel, T(0));
    if (t.info.compressed) {
      t.m.assign(t.info.numel, T(0));
      if (cfg_.error_feedback) t.e.assign(t.info.numel, T(0));
      t.p.assign(t.rows * t.rank, T(0));
      t.q.assign(t.cols * t.rank, T(0));
      t.qo.assign(t.cols * t.rank, T(0));
    }
    tensors_.push_back(std::move(t));
    layout();
    return tensors_.size() - 1;
  }

  /// The configuration.
  const powersgd_config& config() const noexcept { return cfg_; }
  /// Registered tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }
  /// What registration recorded of tensor `id` (unchecked); `compressed` says whether PowerSGD
  /// compresses it.
  const tensor_info& info(std::size_t id) const noexcept { return tensors_[id].info; }
  /// The rank of tensor `id`'s approximation (unchecked; 0 for a tensor sent dense).
  std::size_t rank(std::size_t id) const noexcept { return tensors_[id].info.compressed ? tensors_[id].rank : 0; }
  /// Steps completed.
  std::size_t step() const noexcept { return step_; }
  /// The lengths of the two rounds' payloads of a compressing step (the first also of a dense
  /// one, where it holds every tensor and the second is empty).
  std::size_t first_round_size() const noexcept { return dense_size_ + p_size_; }
  /// See `first_round_size`.
  std::size_t second_round_size() const noexcept { return q_size_; }

  /**
   * @brief Round one of a step: reads every gradient (one per tensor, in registration order) and
   * returns this worker's payload, to be summed element by element over the workers and given
   * to `reduce_first`. The view stays valid until the next call.
   * @return the payload, or `errc::wrong_tensor_count`, `errc::size_mismatch`,
   *         `errc::non_finite_input`, `errc::state_overflow`, `errc::invalid_argument` (a step
   *         is open): nothing changed then.
   */
  [[nodiscard]] result<span<const T>> begin_step(span<const span<const T>> grads) {
    if (round_ != 0) return fail(errc::invalid_argument);
    if (const errc e = detail::check_gradients(tensors_, grads); e != errc::ok) return fail(e);
    for (const auto& g : grads)
      for (const T x : g)
        if (!std::isfinite(x)) return fail(errc::non_finite_input);
    const bool compressing = step_ >= cfg_.start_step;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor& s = tensors_[t];
      if (!compressing || !s.info.compressed || s.e.empty()) continue;
      for (std::size_t i = 0; i < s.info.numel; ++i)
        if (!std::isfinite(static_cast<T>(grads[t][i] + s.e[i]))) return fail(errc::state_overflow);
    }
    compressing_ = compressing;
    payload_.assign(compressing ? first_round_size() : total_size_, T(0));
    std::size_t at = 0;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      tensor& s = tensors_[t];
      if (compressing && s.info.compressed) continue;
      for (std::size_t i = 0; i < s.info.numel; ++i) payload_[at + i] = grads[t][i];
      at += s.info.numel;
    }
    for (std::size_t t = 0; t < tensors_.size() && compressing; ++t) {
      tensor& s = tensors_[t];
      if (!s.info.compressed) continue;
      for (std::size_t i = 0; i < s.info.numel; ++i)
        s.m[i] = s.e.empty() ? grads[t][i] : static_cast<T>(grads[t][i] + s.e[i]);
      if (s.q_set || (cfg_.warm_start && s.q_warm)) s.qo = s.q;
      else draw_q(t, s.qo);
      detail::powersgd_orthogonalize(span<T>(s.qo.data(), s.qo.size()), s.cols, s.rank, cfg_.orthogonalization_epsilon);
      detail::powersgd_project(span<const T>(s.m.data(), s.m.size()), s.rows, s.cols,
                               span<const T>(s.qo.data(), s.qo.size()), s.rank,
                               span<T>(payload_.data() + at, s.p.size()));
      at += s.p.size();
    }
    round_ = 1;
    return span<const T>(payload_.data(), payload_.size());
  }

  /**
   * @brief Round two: `sum` is the element-wise sum of every worker's first payload. The tensors
   * sent dense get their averages; returns this worker's second payload (every Q), to be summed
   * and given to `reduce_second`, or an empty view where the step is complete (no tensor
   * compressed, or a step before `start_step`).
   * @return the payload, or `errc::size_mismatch`, `errc::non_finite_input`,
   *         `errc::invalid_argument` (no step open), which close the step with nothing changed.
   */
  [[nodiscard]] result<span<const T>> reduce_first(span<const T> sum) {
    if (round_ != 1) return fail(errc::invalid_argument);
    round_ = 0;
    if (sum.size() != payload_.size()) return fail(errc::size_mismatch);
    for (const T x : sum)
      if (!std::isfinite(x)) return fail(errc::non_finite_input);
    std::size_t at = 0;
    for (tensor& s : tensors_) {
      if (compressing_ && s.info.compressed) continue;
      for (std::size_t i = 0; i < s.info.numel; ++i) s.update[i] = average(sum[at + i]);
      at += s.info.numel;
    }
    if (!compressing_ || q_size_ == 0) return finish();
    payload_.assign(q_size_, T(0));
    std::size_t out = 0;
    for (tensor& s : tensors_) {
      if (!s.info.compressed) continue;
      for (std::size_t k = 0; k < s.p.size(); ++k) s.p[k] = sum[at + k];
      at += s.p.size();
      detail::powersgd_orthogonalize(span<T>(s.p.data(), s.p.size()), s.rows, s.rank, cfg_.orthogonalization_epsilon);
      detail::powersgd_project_back(span<const T>(s.m.data(), s.m.size()), s.rows, s.cols,
                                    span<const T>(s.p.data(), s.p.size()), s.rank,
                                    span<T>(payload_.data() + out, s.q.size()), scratch_);
      out += s.q.size();
    }
    round_ = 2;
    return span<const T>(payload_.data(), payload_.size());
  }

  /**
   * @brief The end of a compressing step: `sum` is the element-wise sum of every worker's second
   * payload. Each compressed tensor's update becomes P Q^T with Q = sum / N, and its error
   * (with error feedback) M - P Q^T.
   * @return `errc::size_mismatch`, `errc::non_finite_input`, `errc::invalid_argument` (not in
   *         round two), which close the step with nothing changed.
   */
  [[nodiscard]] result<void> reduce_second(span<const T> sum) {
    if (round_ != 2) return fail(errc::invalid_argument);
    round_ = 0;
    if (sum.size() != q_size_) return fail(errc::size_mismatch);
    for (const T x : sum)
      if (!std::isfinite(x)) return fail(errc::non_finite_input);
    std::size_t at = 0;
    for (tensor& s : tensors_) {
      if (!s.info.compressed) continue;
      for (std::size_t k = 0; k < s.q.size(); ++k) s.q[k] = average(sum[at + k]);
      at += s.q.size();
      s.q_warm = true;
      s.q_set = false;
      detail::powersgd_rebuild(span<const T>(s.p.data(), s.p.size()), span<const T>(s.q.data(), s.q.size()), s.rows,
                               s.cols, s.rank, span<T>(s.update.data(), s.update.size()),
                               span<const T>(s.m.data(), s.m.size()), span<T>(s.e.data(), s.e.size()));
    }
    (void)finish();
    return {};
  }

  /// Tensor `id`'s averaged gradient from the last completed step (unchecked id).
  span<const T> update(std::size_t id) const noexcept {
    return {tensors_[id].update.data(), tensors_[id].update.size()};
  }
  /// Tensor `id`'s error e (unchecked id; empty for a tensor sent dense or without error feedback).
  span<const T> error_feedback(std::size_t id) const noexcept { return {tensors_[id].e.data(), tensors_[id].e.size()}; }
  /// Tensor `id`'s Q (unchecked id; m x r, row-major): after a step, the averaged Q the next one
  /// starts from with warm start.
  span<const T> q(std::size_t id) const noexcept { return {tensors_[id].q.data(), tensors_[id].q.size()}; }

  /**
   * @brief Sets the Q (m x r, row-major, not yet orthogonalised) that compressed tensor `id`'s next
   * compressing step starts from, instead of its draw or its warm start (to follow another
   * implementation's draws, or to restore a saved state).
   * @return `errc::unknown_tensor`, `errc::invalid_argument` (a tensor sent dense, or a step open),
   *         `errc::size_mismatch`, `errc::non_finite_input`.
   */
  [[nodiscard]] result<void> set_q(std::size_t id, span<const T> q) {
    if (id >= tensors_.size()) return fail(errc::unknown_tensor);
    tensor& s = tensors_[id];
    if (!s.info.compressed || round_ != 0) return fail(errc::invalid_argument);
    if (q.size() != s.q.size()) return fail(errc::size_mismatch);
    for (const T x : q)
      if (!std::isfinite(x)) return fail(errc::non_finite_input);
    for (std::size_t k = 0; k < q.size(); ++k) s.q[k] = q[k];
    s.q_set = true;
    return {};
  }

 private:
  struct tensor {
    tensor_info info;
    std::size_t rows = 0, cols = 0, rank = 0;
    std::vector<T> m;       // this step's matrix: the gradient plus e
    std::vector<T> e;       // the error (compressed tensors, with error feedback)
    std::vector<T> p;       // n x r
    std::vector<T> q;       // m x r: the last step's average, or set_q's
    std::vector<T> qo;      // this step's Q, orthogonalised
    std::vector<T> update;  // the last step's average
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
        p_size_ += s.p.size();
        q_size_ += s.q.size();
      }
    }
  }

  // Q's draw for tensor t at this step: standard normal values keyed by (seed, step, tensor).
  void draw_q(std::size_t t, std::vector<T>& q) const {
    const auto tensor = static_cast<std::uint32_t>(t);
    for (std::size_t k = 0; k < q.size(); ++k) {
      const auto i = static_cast<std::uint32_t>(2 * k);
      const double u1 = detail::uniform_of_draw(detail::element_draw(cfg_.seed, step_, tensor, i));
      const double u2 = detail::uniform_of_draw(detail::element_draw(cfg_.seed, step_, tensor, i + 1));
      q[k] = static_cast<T>(detail::powersgd_normal(u1, u2));
    }
  }

  T average(T sum) const noexcept { return static_cast<T>(sum / static_cast<T>(cfg_.workers)); }

  result<span<const T>> finish() {
    ++step_;
    round_ = 0;
    return span<const T>();
  }

  powersgd_config cfg_;
  std::vector<tensor> tensors_;
  std::vector<T> payload_;
  std::vector<double> scratch_;
  std::size_t dense_size_ = 0, p_size_ = 0, q_size_ = 0, total_size_ = 0;
  std::size_t step_ = 0;
  int round_ = 0;  // the round a step awaits (0: none open)
  bool compressing_ = false;
};

}  // namespace gradcomp
