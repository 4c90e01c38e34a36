/// @file saef.hpp
/// @brief Step-Ahead Error Feedback with double-way compression (docs/algorithms.md, "Step-Ahead
/// Error Feedback"): `saef_worker` and `saef_server`, the two sides of the training loop, around
/// any compressor of the library.
///
/// Include the compressor's snapshot header (or `<gradcomp/gradcomp.hpp>`) before instantiating
/// `saef_worker::set_residuals`, which saves and restores the compressor's state.
///
/// One step, for workers k = 1..N with weights x (the same on every worker), learning rate eta and
/// momentum beta:
/// 1. each worker takes its gradient g_k at `x - e_k` (step ahead: `saef_worker::lookahead`) or at
///    x (plain error feedback);
/// 2. `saef_worker::step`: `M_k = beta * M_k + g_k`, `u_k = eta * M_k` (the product and the sum
///    each rounded, in this order), and the worker's compressor
///    sends `D_k = C(u_k + e_k)`, keeping `e_k = u_k + e_k - D_k` (its own error feedback);
/// 3. the exchange averages the messages: `D = mean_k D_k` (an `aggregator` of
///    `saef_worker::receiver()`, which has no momentum);
/// 4. `saef_server::step`: a second compressor with its own residual s compresses the average,
///    `D' = C'(D + s)`, `s = D + s - D'`; every rank that runs the same server on the same D gets
///    the same D' (or one root runs it and sends D');
/// 5. every worker applies `x -= D'` (`saef_server::apply`);
/// 6. every p steps (`saef_worker::averaging_due`), the workers average their residuals and each
///    takes the mean (`saef_worker::residuals`, an all-reduce of the caller's, then
///    `saef_worker::set_residuals`).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "compressor.hpp"
#include "detail/bytes.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "snapshot.hpp"
#include "span.hpp"
#include "wire/crc32c.hpp"
#include "wire/decode.hpp"

namespace gradcomp {

/// The worker side's settings of Step-Ahead Error Feedback.
struct saef_config {
  /// Learning rate eta: `u = eta * M`. Finite and positive; change it per step with
  /// `saef_worker::set_learning_rate`.
  double learning_rate = 0.1;
  /// Momentum beta of the worker's momentum buffer M, in [0, 1).
  double momentum = 0.9;
  /// Residual averaging every this many steps (`saef_worker::averaging_due`); 0: never.
  std::size_t average_every = 0;
};

namespace detail {

// A compressor's value type.
template <class C>
using compressor_value_t = typename C::tensor_view::value_type;

// A compressor's residual: `error_feedback(id)`, or DGC's residual accumulator `residual(id)`.
template <class C, class = void>
struct has_error_feedback : std::false_type {};
template <class C>
struct has_error_feedback<C, std::void_t<decltype(std::declval<const C&>().error_feedback(0))>> : std::true_type {};

template <class C>
auto residual_of(const C& c, std::size_t id) {
  if constexpr (has_error_feedback<C>::value) return c.error_feedback(id);
  else return c.residual(id);
}

// Settings of a compressor that would break the identities: its own momentum (DGC's momentum
// correction) or a learning rate of its own other than 1 (EF-SignSGD's).
template <class C, class = void>
struct has_momentum_correction : std::false_type {};
template <class C>
struct has_momentum_correction<C, std::void_t<decltype(std::declval<const C&>().config().momentum_correction)>>
    : std::true_type {};
template <class C, class = void>
struct has_own_learning_rate : std::false_type {};
template <class C>
struct has_own_learning_rate<C, std::void_t<decltype(std::declval<const C&>().config().learning_rate)>>
    : std::true_type {};

template <class C>
void check_saef_compressor(const C& c) {
  if constexpr (has_momentum_correction<C>::value)
    if (c.config().momentum_correction)
      throw error(errc::invalid_argument, "SAEF compressors take their input as it is: turn momentum correction off");
  if constexpr (has_own_learning_rate<C>::value)
    if (c.config().learning_rate != 1.0)
      throw error(errc::invalid_argument, "SAEF compressors take eta * M as their input: set their learning rate to 1");
}

// The last step's message of tensor t as a dense vector.
template <class T, class C>
void expand_message(C& c, std::size_t t, std::vector<T>& out) {
  const auto m = c.message(t);
  out.assign(c.info(t).numel, T(0));
  if (m.dense) {
    for (std::size_t i = 0; i < m.values.size(); ++i) out[i] = m.values[i];
  } else {
    for (std::size_t j = 0; j < m.indices.size(); ++j) out[m.indices[j]] = m.values[j];
  }
}

// A compressor's snapshot with its residual sections' values replaced by `values[tensor]` (the
// sections keep their coding, fp32 or fp64; the checksum is recomputed): a step counter and
// everything else as they were. errc::size_mismatch for a value vector of another length.
template <class T>
errc replace_residuals(std::vector<std::byte>& snap, const std::vector<span<const T>>& values) {
  const span<const std::byte> msg(snap.data(), snap.size());
  const auto h = wire::peek(msg);
  if (!h) return h.error();
  const std::uint64_t end = h->total_bytes - (h->has_checksum() ? wire::checksum_bytes : 0);
  std::uint64_t offset = wire::message_header_bytes;
  for (std::uint32_t i = 0; i < h->section_count; ++i) {
    const auto s = wire::read_section_header(msg, offset, end);
    if (!s) return s.error();
    if (s->role == wire::section_role::residual) {
      if (s->tensor >= values.size() || values[s->tensor].size() != s->numel) return errc::size_mismatch;
      std::byte* p = snap.data() + s->offset + wire::section_header_bytes + s->index_bytes;
      const span<const T> v = values[s->tensor];
      for (std::size_t j = 0; j < v.size(); ++j) {
        if (s->values == wire::value_coding::fp64) {
          std::uint64_t bits;
          const double x = static_cast<double>(v[j]);
          std::memcpy(&bits, &x, 8);
          store_le<std::uint64_t>(p + 8 * j, bits);
        } else {
          std::uint32_t bits;
          const float x = static_cast<float>(v[j]);
          std::memcpy(&bits, &x, 4);
          store_le<std::uint32_t>(p + 4 * j, bits);
        }
      }
    }
    offset += s->bytes;
  }
  if (h->has_checksum())
    store_le<std::uint32_t>(snap.data() + end, crc32c(span<const std::byte>(snap.data(), static_cast<std::size_t>(end))));
  return errc::ok;
}

}  // namespace detail

/**
 * @brief The worker side of Step-Ahead Error Feedback (Xu, Huo and Huang, "Step-Ahead Error
 * Feedback for Distributed Training with Compressed Gradient", AAAI 2021) around a compressor of
 * the library, on a backend whose memory the host reads (the CPU's).
 *
 * It keeps the worker's momentum buffer M and feeds `u = eta * M` to the compressor, whose own
 * error feedback keeps the residual e (top-k: `dgc_compressor` with momentum correction off;
 * scaled sign: `ef_signsgd_compressor` with learning rate 1; any other compressor with error
 * feedback; one without, such as QSGD, has e = 0). After `step`, `e_new + D == u + e_old` element
 * by element (bitwise for top-k, up to the compressor's rounding for the quantisers), where D is
 * the compressor's message (`compressor().message(id)`, encoded by `encode_message`). With the
 * gradient taken at `x - e_old` (`lookahead`), the step-ahead update `u' = e_old + eta * M` gives
 * the paper's identity `e_new + D == u'`.
 *
 * The compressor stays the caller's (it must outlive the worker); register its tensors first.
 * Not thread-safe; one per worker.
 *
 * @tparam C a compressor (`is_compressor_v<C>`) of float or double on a host-memory backend.
 */
template <class C>
class saef_worker {
  static_assert(is_compressor_v<C>, "saef_worker needs a gradcomp compressor");
  static_assert(is_host_accessible_v<typename C::tensor_view::memory_space>,
                "saef_worker runs on a backend whose memory the host reads");

 public:
  /// The compressor's value type.
  using value_type = detail::compressor_value_t<C>;

  /**
   * @brief A worker around `c` (its tensors registered). Throws `gradcomp::error`
   * (`errc::invalid_argument`): a learning rate that is not finite and positive, a momentum
   * outside [0, 1), a DGC compressor with momentum correction, an EF-SignSGD compressor whose
   * learning rate is not 1.
   */
  saef_worker(C& c, saef_config cfg) : c_(&c), cfg_(cfg) {
    detail::check_saef_compressor(c);
    set_learning_rate(cfg_.learning_rate);
    if (!(cfg_.momentum >= 0.0 && cfg_.momentum < 1.0)) throw error(errc::invalid_argument, "momentum must be in [0, 1)");
    for (std::size_t t = 0; t < c.num_tensors(); ++t) {
      m_.emplace_back(c.info(t).numel, value_type(0));
      u_.emplace_back(c.info(t).numel, value_type(0));
    }
    next_m_ = m_;
    next_u_ = u_;
    for (const auto& u : next_u_) views_.emplace_back(u.data(), u.size());
  }

  /// The learning rate of the next steps (finite and positive; throws `errc::invalid_argument`).
  void set_learning_rate(double lr) {
    if (!(std::isfinite(lr) && lr > 0.0)) throw error(errc::invalid_argument, "learning_rate must be finite and > 0");
    cfg_.learning_rate = lr;
  }

  /// The settings.
  const saef_config& config() const noexcept { return cfg_; }
  /// The compressor.
  C& compressor() noexcept { return *c_; }
  /// Steps taken.
  std::size_t steps() const noexcept { return steps_; }

  /// Where to take tensor `id`'s gradient for a step-ahead step: `out = x - e` (`out = x` for a
  /// tensor without a residual). `x` and `out` have the tensor's length (`errc::size_mismatch`)
  /// and may be the same memory.
  [[nodiscard]] result<void> lookahead(std::size_t id, span<const value_type> x, span<value_type> out) const {
    const auto e = detail::residual_of(*c_, id);
    const std::size_t n = c_->info(id).numel;
    if (x.size() != n || out.size() != n) return fail(errc::size_mismatch);
    for (std::size_t i = 0; i < n; ++i) out[i] = e.empty() ? x[i] : static_cast<value_type>(x[i] - e[i]);
    return {};
  }

  /**
   * @brief One step: `M = beta * M + g`, `u = eta * M` (each rounded to the value type), then the
   * compressor's step on u. On a refusal (wrong count or size, a non-finite gradient, an overflow)
   * M, the compressor's state and the step count are unchanged and the error is returned.
   */
  [[nodiscard]] result<void> step(const std::vector<span<const value_type>>& grads) {
    if (grads.size() != m_.size()) return fail(errc::wrong_tensor_count);
    for (std::size_t t = 0; t < m_.size(); ++t)
      if (grads[t].size() != m_[t].size()) return fail(errc::size_mismatch);
    const auto beta = static_cast<value_type>(cfg_.momentum), eta = static_cast<value_type>(cfg_.learning_rate);
    // Into the spare buffers (allocated once), kept only if the compressor takes the step.
    for (std::size_t t = 0; t < m_.size(); ++t) {
      for (std::size_t i = 0; i < m_[t].size(); ++i) {
        const auto m = static_cast<value_type>(beta * m_[t][i]);
        next_m_[t][i] = static_cast<value_type>(m + grads[t][i]);
        next_u_[t][i] = static_cast<value_type>(eta * next_m_[t][i]);
      }
    }
    if (auto r = c_->compress(views_); !r) return r;
    if (auto s = c_->stats(); !s) return fail(s.error());
    std::swap(m_, next_m_);
    std::swap(u_, next_u_);
    views_.clear();
    for (const auto& u : next_u_) views_.emplace_back(u.data(), u.size());
    ++steps_;
    return {};
  }

  /// Tensor `id`'s input to the compressor in the last step, `u = eta * M`.
  span<const value_type> update(std::size_t id) const noexcept { return span<const value_type>(u_[id].data(), u_[id].size()); }
  /// Tensor `id`'s momentum buffer M.
  span<const value_type> momentum_buffer(std::size_t id) const noexcept {
    return span<const value_type>(m_[id].data(), m_[id].size());
  }
  /// Tensor `id`'s residual e (the compressor's; empty for a tensor without one).
  auto residual(std::size_t id) const noexcept { return detail::residual_of(*c_, id); }

  /// Whether the residuals are to be averaged now: `average_every` is not 0 and divides the steps
  /// taken (never before the first step).
  bool averaging_due() const noexcept {
    return cfg_.average_every != 0 && steps_ != 0 && steps_ % cfg_.average_every == 0;
  }

  /**
   * @brief Replaces the residuals with `mean` (one vector per tensor, the tensor's length; those
   * of tensors without a residual are not read and may be empty), through the compressor's
   * snapshot, so every check of a restore applies. @return `errc::wrong_tensor_count`,
   * `errc::size_mismatch`, `errc::non_finite_input` (nothing changed), or a restore's error.
   */
  [[nodiscard]] result<void> set_residuals(const std::vector<span<const value_type>>& mean) {
    if (mean.size() != m_.size()) return fail(errc::wrong_tensor_count);
    for (const auto& v : mean)
      for (const value_type x : v)
        if (!std::isfinite(x)) return fail(errc::non_finite_input);
    auto snap = save_snapshot(*c_);
    if (const errc e = detail::replace_residuals<value_type>(snap, mean); e != errc::ok) return fail(e);
    return restore_snapshot(*c_, span<const std::byte>(snap.data(), snap.size()));
  }

  /// What the exchange needs to average the workers' messages: the compressor's layout without
  /// receiver momentum (the workers keep theirs).
  receiver_layout receiver() const {
    receiver_layout r = c_->receiver();
    r.momentum = 0.0;
    for (auto& t : r.tensors) t.momentum = false;
    return r;
  }

 private:
  C* c_;
  saef_config cfg_;
  std::vector<std::vector<value_type>> m_, u_;
  std::vector<std::vector<value_type>> next_m_, next_u_;  // the next step's, then swapped in
  std::vector<span<const value_type>> views_;             // of next_u_
  std::size_t steps_ = 0;
};

/**
 * @brief The server side of Step-Ahead Error Feedback's double-way compression around a compressor
 * of the library with its own residual s: `D' = C(D + s)`, `s = D + s - D'` for the workers'
 * averaged message D; D' is what every worker applies.
 *
 * Every rank may run its own (the same compressor and configuration on the same D give the same D'
 * bitwise), or one root runs it and sends `compressor().encode_message`. `s_new + D' == s_old + D`
 * element by element (bitwise for top-k). Same requirements on the compressor as `saef_worker`.
 */
template <class C>
class saef_server {
  static_assert(is_compressor_v<C>, "saef_server needs a gradcomp compressor");
  static_assert(is_host_accessible_v<typename C::tensor_view::memory_space>,
                "saef_server runs on a backend whose memory the host reads");

 public:
  /// The compressor's value type.
  using value_type = detail::compressor_value_t<C>;

  /// A server around `c` (its tensors registered, those of the workers). Throws as `saef_worker`.
  explicit saef_server(C& c) : c_(&c) {
    detail::check_saef_compressor(c);
    for (std::size_t t = 0; t < c.num_tensors(); ++t) out_.emplace_back(c.info(t).numel, value_type(0));
  }

  /// The compressor.
  C& compressor() noexcept { return *c_; }

  /// Compresses the averaged update `mean` (one vector per tensor); on a refusal nothing changes
  /// and the error is returned.
  [[nodiscard]] result<void> step(const std::vector<span<const value_type>>& mean) {
    if (auto r = c_->compress(mean); !r) return r;
    if (auto s = c_->stats(); !s) return fail(s.error());
    for (std::size_t t = 0; t < out_.size(); ++t) detail::expand_message(*c_, t, out_[t]);
    return {};
  }

  /// Tensor `id`'s D' of the last step, dense (zeros before the first).
  span<const value_type> update(std::size_t id) const noexcept {
    return span<const value_type>(out_[id].data(), out_[id].size());
  }
  /// Tensor `id`'s residual s (the compressor's; empty for a tensor without one).
  auto residual(std::size_t id) const noexcept { return detail::residual_of(*c_, id); }

  /// `x -= D'` for tensor `id` (`errc::size_mismatch` for another length).
  [[nodiscard]] result<void> apply(std::size_t id, span<value_type> x) const {
    if (x.size() != out_[id].size()) return fail(errc::size_mismatch);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<value_type>(x[i] - out_[id][i]);
    return {};
  }

 private:
  C* c_;
  std::vector<std::vector<value_type>> out_;
};

}  // namespace gradcomp
