/// @file saef/worker.hpp
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
///
/// Both sides run on the compressor's backend: M, u and D' live in its memory and the element-wise
/// steps are its kernels (`detail::saef_ops`: the CPU backend's in `saef/cpu_ops.hpp`, the Thrust
/// backend's in `saef/thrust_ops.hpp`), bitwise the same on every backend.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../backend_memory.hpp"
#include "../common/compressor_base.hpp"
#include "../compressor.hpp"
#include "cpu_ops.hpp"
#include "../detail/bytes.hpp"
#include "arithmetic.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../snapshot.hpp"
#include "../span.hpp"
#include "../wire/crc32c.hpp"
#include "../wire/decode.hpp"

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

// A compressor's value type and backend.
template <class C>
using compressor_value_t = typename C::tensor_view::value_type;
template <class C>
using compressor_backend_t = std::decay_t<decltype(std::declval<const C&>().backend())>;

// A compressor's residual: `error_feedback(id)`, DGC's residual accumulator `residual(id)`, or,
// for a compressor without error feedback (QSGD, TernGrad), an empty view: e = 0.
template <class C, class = void>
struct has_error_feedback : std::false_type {};
template <class C>
struct has_error_feedback<C, std::void_t<decltype(std::declval<const C&>().error_feedback(0))>> : std::true_type {};
template <class C, class = void>
struct has_residual : std::false_type {};
template <class C>
struct has_residual<C, std::void_t<decltype(std::declval<const C&>().residual(0))>> : std::true_type {};

template <class C>
auto residual_of(const C& c, std::size_t id) {
  if constexpr (has_error_feedback<C>::value) {
    return c.error_feedback(id);
  } else if constexpr (has_residual<C>::value) {
    return c.residual(id);
  } else {
    (void)c;
    (void)id;
    return backend_span<const compressor_value_t<C>, compressor_backend_t<C>>{};
  }
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
 * the library, on the compressor's backend (the CPU's or the Thrust backend, whose memory may be a
 * GPU's: every span below is in that backend's memory).
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
 * @tparam C a compressor (`is_compressor_v<C>`) of float or double on a backend with SAEF's
 * kernels (`detail::saef_ops`: the CPU backend and the Thrust backend).
 */
template <class C>
class saef_worker {
  static_assert(is_compressor_v<C>, "saef_worker needs a gradcomp compressor");

 public:
  /// The compressor's value type.
  using value_type = detail::compressor_value_t<C>;
  /// The compressor's backend.
  using backend_type = detail::compressor_backend_t<C>;
  /// A view of `value_type`s in the backend's memory (`span<const value_type>` on the CPU).
  using const_view = backend_span<const value_type, backend_type>;
  /// A writable view in the backend's memory.
  using view = backend_span<value_type, backend_type>;

  /**
   * @brief A worker around `c` (its tensors registered). Throws `gradcomp::error`
   * (`errc::invalid_argument`): a learning rate that is not finite and positive, a momentum
   * outside [0, 1), a DGC compressor with momentum correction, an EF-SignSGD compressor whose
   * learning rate is not 1.
   */
  saef_worker(C& c, saef_config cfg) : c_(&c), cfg_(cfg) {
    detail::check_saef_compressor(c);
    set_learning_rate(cfg_.learning_rate);
    // Checked as the steps use it: in the compressor's value type.
    const auto beta = static_cast<value_type>(cfg_.momentum);
    if (!(cfg_.momentum >= 0.0 && beta >= value_type(0) && beta < value_type(1)))
      throw error(errc::invalid_argument, "momentum must be in [0, 1) in the value type");
    for (std::size_t t = 0; t < c.num_tensors(); ++t) {
      const std::size_t n = c.info(t).numel;
      m_.push_back(allocate_buffer<value_type>(c.backend(), n));
      u_.push_back(allocate_buffer<value_type>(c.backend(), n));
      next_m_.push_back(allocate_buffer<value_type>(c.backend(), n));
      next_u_.push_back(allocate_buffer<value_type>(c.backend(), n));
    }
    if constexpr (whole_model) {
      // A work item per element.
      std::vector<std::size_t> numel(c.num_tensors());
      std::vector<detail::model_items> items(numel.size());
      for (std::size_t t = 0; t < numel.size(); ++t) items[t].count[0] = numel[t] = c.info(t).numel;
      const span<const std::size_t> sizes(numel.data(), numel.size());
      const span<const detail::model_items> work(items.data(), items.size());
      models_ = {model_type(sizes, work), model_type(sizes, work)};
    }
  }

  /// The learning rate of the next steps: finite and positive in the compressor's value type, as
  /// the steps use it (throws `errc::invalid_argument`; 1e39 or 1e-50 for float, say).
  void set_learning_rate(double lr) {
    const auto eta = static_cast<value_type>(lr);
    if (!(std::isfinite(lr) && lr > 0.0 && std::isfinite(eta) && eta > value_type(0)))
      throw error(errc::invalid_argument, "learning_rate must be finite and > 0 in the value type");
    cfg_.learning_rate = lr;
  }

  /// The settings.
  const saef_config& config() const noexcept { return cfg_; }
  /// The compressor.
  C& compressor() noexcept { return *c_; }
  /// Steps taken.
  std::size_t steps() const noexcept { return steps_; }

  /// Where to take tensor `id`'s gradient for a step-ahead step: `out = x - e` (`out = x` for a
  /// tensor without a residual), issued on the backend. `x` and `out` have the tensor's length
  /// (`errc::size_mismatch`) and may be the same memory; an `id` at or past the tensor count is
  /// `errc::unknown_tensor`.
  [[nodiscard]] result<void> lookahead(std::size_t id, const_view x, view out) const {
    if (id >= m_.size()) return fail(errc::unknown_tensor);
    const std::size_t n = c_->info(id).numel;
    if (x.size() != n || out.size() != n) return fail(errc::size_mismatch);
    kernels::difference(c_->backend(), x, detail::residual_of(*c_, id), out);
    return {};
  }

  /**
   * @brief One step: `M = beta * M + g`, `u = eta * M` (each rounded to the value type), then the
   * compressor's step on u. On a refusal (wrong count or size, a non-finite gradient, an overflow)
   * M, the compressor's state and the step count are unchanged and the error is returned.
   */
  [[nodiscard]] result<void> step(const std::vector<const_view>& grads) {
    if (grads.size() != m_.size()) return fail(errc::wrong_tensor_count);
    for (std::size_t t = 0; t < m_.size(); ++t)
      if (grads[t].size() != m_[t].size()) return fail(errc::size_mismatch);
    const auto beta = static_cast<value_type>(cfg_.momentum), eta = static_cast<value_type>(cfg_.learning_rate);
    // Into the spare buffers (allocated once), kept only if the compressor takes the step.
    if constexpr (whole_model) {
      // Every tensor in one launch. M and the spare buffers trade places at every step that goes
      // through: a table for each, so each is uploaded once (thrust/model_table.hpp).
      auto& table = models_[steps_ % 2];
      table.bind(c_->backend(), [&](std::size_t t, detail::model_tensor<value_type>& x) {
        x.g = grads[t].data();
        x.e = m_[t].view().data();
        x.values = next_u_[t].view().data();
        x.aux[0] = next_m_[t].view().data();
      });
      kernels::momentum(c_->backend(), beta, eta, static_cast<const model_type&>(table));
    } else {
      for (std::size_t t = 0; t < m_.size(); ++t)
        kernels::momentum(c_->backend(), beta, eta, readonly(m_[t].view()), grads[t], next_m_[t].view(),
                          next_u_[t].view());
    }
    // The views of this object's own buffers, made here: a copy of the worker must not keep the
    // original's (their storage is reused from step to step, so nothing is allocated).
    views_.clear();
    for (const auto& u : next_u_) views_.push_back(u.view());
    if (auto r = c_->compress(views_); !r) return r;
    if (auto s = c_->stats(); !s) return fail(s.error());
    std::swap(m_, next_m_);
    std::swap(u_, next_u_);
    ++steps_;
    return {};
  }

  /// Tensor `id`'s input to the compressor in the last step, `u = eta * M` (`id` unchecked: below
  /// the tensor count, as for every view accessor here).
  const_view update(std::size_t id) const noexcept { return readonly(u_[id].view()); }
  /// Tensor `id`'s momentum buffer M (`id` unchecked).
  const_view momentum_buffer(std::size_t id) const noexcept { return readonly(m_[id].view()); }
  /// Tensor `id`'s residual e (the compressor's; empty for a tensor without one; `id` unchecked).
  auto residual(std::size_t id) const noexcept { return detail::residual_of(*c_, id); }

  /// Whether the residuals are to be averaged now: `average_every` is not 0 and divides the steps
  /// taken (never before the first step).
  bool averaging_due() const noexcept {
    return cfg_.average_every != 0 && steps_ != 0 && steps_ % cfg_.average_every == 0;
  }

  /**
   * @brief Replaces the residuals with `mean` (one vector per tensor, the tensor's length; those
   * of tensors without a residual are not read and may be empty), through the compressor's
   * snapshot, so every check of a restore applies (on a device backend, `mean` is copied to the
   * host and the host waits: do it every few steps, as the averaging is). @return
   * `errc::wrong_tensor_count`, `errc::size_mismatch`, `errc::non_finite_input` (nothing
   * changed), or a restore's error.
   */
  [[nodiscard]] result<void> set_residuals(const std::vector<const_view>& mean) {
    if (mean.size() != m_.size()) return fail(errc::wrong_tensor_count);
    std::vector<std::vector<value_type>> host(mean.size());
    std::vector<span<const value_type>> views;
    for (std::size_t t = 0; t < mean.size(); ++t) {
      host[t].resize(mean[t].size());
      if (auto r = copy_to_host(c_->backend(), mean[t], span<value_type>(host[t].data(), host[t].size())); !r) return r;
      views.emplace_back(host[t].data(), host[t].size());
    }
    synchronize(c_->backend());
    for (const auto& v : host)
      for (const value_type x : v)
        if (!std::isfinite(x)) return fail(errc::non_finite_input);
    auto snap = save_snapshot(*c_);
    if (const errc e = detail::replace_residuals<value_type>(snap, views); e != errc::ok) return fail(e);
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
  using kernels = detail::saef_ops<backend_type>;
  using buffer = backend_buffer<value_type, backend_type>;
  // Whether the backend's kernels take every tensor at once (a table of them, `model`).
  static constexpr bool whole_model = detail::model_of<kernels, value_type>::whole;
  using model_type = typename detail::model_of<kernels, value_type>::type;

  C* c_;
  saef_config cfg_;
  std::vector<buffer> m_, u_;
  std::vector<buffer> next_m_, next_u_;  // the next step's, then swapped in
  std::vector<const_view> views_;        // of next_u_, made by each step
  std::size_t steps_ = 0;
  // With whole-model kernels: the tables of the two parities of steps_ (each binds M, the next M
  // and the next u of its parity).
  std::array<model_type, 2> models_{};
};

/**
 * @brief The server side of Step-Ahead Error Feedback's double-way compression around a compressor
 * of the library with its own residual s: `D' = C(D + s)`, `s = D + s - D'` for the workers'
 * averaged message D; D' is what every worker applies.
 *
 * Every rank may run its own (the same compressor and configuration on the same D give the same D'
 * bitwise), or one root runs it and sends `compressor().encode_message`. `s_new + D' == s_old + D`
 * element by element (bitwise for top-k). Same requirements on the compressor as `saef_worker`;
 * every span is in the backend's memory.
 */
template <class C>
class saef_server {
  static_assert(is_compressor_v<C>, "saef_server needs a gradcomp compressor");

 public:
  using value_type = typename saef_worker<C>::value_type;      ///< As `saef_worker`'s.
  using backend_type = typename saef_worker<C>::backend_type;  ///< As `saef_worker`'s.
  using const_view = typename saef_worker<C>::const_view;      ///< As `saef_worker`'s.
  using view = typename saef_worker<C>::view;                  ///< As `saef_worker`'s.

  /// A server around `c` (its tensors registered, those of the workers). Throws as `saef_worker`.
  explicit saef_server(C& c) : c_(&c) {
    detail::check_saef_compressor(c);
    for (std::size_t t = 0; t < c.num_tensors(); ++t)
      out_.push_back(allocate_buffer<value_type>(c.backend(), c.info(t).numel));
  }

  /// The compressor.
  C& compressor() noexcept { return *c_; }

  /// Compresses the averaged update `mean` (one vector per tensor); on a refusal nothing changes
  /// and the error is returned.
  [[nodiscard]] result<void> step(const std::vector<const_view>& mean) {
    if (auto r = c_->compress(mean); !r) return r;
    if (auto s = c_->stats(); !s) return fail(s.error());
    for (std::size_t t = 0; t < out_.size(); ++t) {
      const auto m = c_->message(t);
      kernels::expand(c_->backend(), m.dense ? decltype(m.indices){} : m.indices, m.values, out_[t].view());
    }
    return {};
  }

  /// Tensor `id`'s D' of the last step, dense (zeros before the first; `id` unchecked: below the
  /// tensor count, as for every view accessor here).
  const_view update(std::size_t id) const noexcept { return readonly(out_[id].view()); }
  /// Tensor `id`'s residual s (the compressor's; empty for a tensor without one; `id` unchecked).
  auto residual(std::size_t id) const noexcept { return detail::residual_of(*c_, id); }

  /// `x -= D'` for tensor `id`, issued on the backend (`errc::size_mismatch` for another length,
  /// `errc::unknown_tensor` for an `id` at or past the tensor count).
  [[nodiscard]] result<void> apply(std::size_t id, view x) const {
    if (id >= out_.size()) return fail(errc::unknown_tensor);
    if (x.size() != out_[id].size()) return fail(errc::size_mismatch);
    kernels::difference(c_->backend(), readonly(x), readonly(out_[id].view()), x);
    return {};
  }

 private:
  using kernels = detail::saef_ops<backend_type>;

  C* c_;
  std::vector<backend_buffer<value_type, backend_type>> out_;
};

}  // namespace gradcomp
