/// @file compressor.hpp
/// @brief EF-SignSGD (docs/algorithms.md, "EF-SignSGD"): scaled signs with error feedback,
/// `ef_signsgd_compressor`, on the common compressor interface.
///
/// Per tensor and step, with `lr` the learning rate, `g` the gradient and `e` the error kept
/// from the last step: `p = e + lr * g`, send `(||p||_1 / n) * sign(p)` (one binary32 scale and one
/// sign bit per element on the wire: value coding `scaled_sign`), keep `e = p - sent`. The
/// messages carry the learning rate: the receiver applies `w -= update(t)`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../aggregator.hpp"
#include "../backend.hpp"
#include "../cpu/ef_sign_ops.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "../tensor_message.hpp"
#include "../wire/device_section.hpp"
#include "../wire/encode.hpp"
#include "step_plan.hpp"

namespace gradcomp {

namespace detail {
struct ef_signsgd_snapshot_access;
}  // namespace detail

/// Everything that parameterises EF-SignSGD. Gradients are always checked for NaN and infinity:
/// the check shares the step's first read, so it costs nothing measurable.
struct ef_signsgd_config {
  /// The learning rate folded into every message (`p = e + lr * g`); change it per step with
  /// `set_learning_rate`. Must be finite and positive.
  double learning_rate = 0.1;
  /// Threads the CPU backend spreads the tensors over (1: the calling thread only).
  std::size_t threads = 1;
  /// Which tensors are sent as signs; by default every tensor (biases included: one scale each).
  compression_policy policy = [] {
    compression_policy p;
    p.compress_vectors = true;
    return p;
  }();
};

/**
 * @brief The sending side of EF-SignSGD (Karimireddy et al., "Error Feedback Fixes SignSGD and
 * other Gradient Compression Schemes", ICML 2019) for a whole model, on one worker.
 *
 * The same interface as `dgc_compressor`: `add_tensor`, `compress` (issues the step on the
 * backend), `stats()`, `max_message_bytes`, `encode_message`, `message`, `receiver()`. Every
 * compressed tensor is sent dense as `scaled_sign` values: 1 bit per element plus 4 bytes, about
 * 32x smaller than fp32. Tensors the policy leaves out are sent whole (`lr * g`).
 *
 * A step reads every gradient and error once before changing anything: a NaN or an infinity in
 * a gradient refuses it with `errc::non_finite_input`, and a `p` or a scale that overflows refuses
 * it with `errc::state_overflow`; either way nothing is modified and the step counter does not
 * advance. Deterministic: the same inputs give bitwise the same messages on every run and every
 * conforming backend (the L1 norm sums in a fixed order). Not thread-safe; one per worker.
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class ef_signsgd_compressor {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "ef_signsgd_compressor supports float and double");
  using ops = detail::ops<Backend>;
  using kernels = detail::ef_sign_ops<Backend>;
  using space = memory_space_t<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;
  using record = detail::ef_sign_record;
  static constexpr bool host_memory = is_host_accessible_v<space>;

 public:
  /// A gradient in the backend's memory.
  using tensor_view = backend_span<const T, Backend>;

  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`).
  explicit ef_signsgd_compressor(ef_signsgd_config cfg, Backend backend = Backend{})
      : cfg_(std::move(cfg)), backend_(backend) {
    set_learning_rate(cfg_.learning_rate);
    if (cfg_.threads == 0) throw error(errc::invalid_argument, "threads must be >= 1");
    exec_ = ops::make_executor(cfg_.threads);
    step_record_ = ops::template allocate<detail::ef_sign_step_record>(backend_, 1);
  }

  /**
   * @brief Registers a tensor and allocates its error buffer; returns its id. Throws
   * `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`, `errc::invalid_argument`.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    tensor_state st;
    st.info = detail::new_tensor_info(tensors_, std::move(name), std::move(shape), mode, cfg_.policy);
    const std::size_t n = st.info.numel;
    wait();
    if (st.info.compressed) st.e = ops::template allocate<T>(backend_, n);
    st.values = ops::template allocate<T>(backend_, n);
    std::vector<record> host(tensors_.size() + 1);
    if (!tensors_.empty())
      ops::copy_to_host(backend_, readonly(records_.view()), span<record>(host.data(), tensors_.size()));
    ops::synchronize(backend_);
    host.back().numel = n;
    host.back().compressed = st.info.compressed ? 1 : 0;
    auto records = ops::template allocate<record>(backend_, host.size());
    ops::copy_to_backend(backend_, span<const record>(host.data(), host.size()), records.view());
    std::vector<record> staged(host.size());
    std::vector<T> staged_values(host_memory ? 0 : staged_values_.size() + n);
    std::vector<std::size_t> order(tensors_.size() + 1);
    for (std::size_t t = 0; t < order.size(); ++t) order[t] = t;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return (a < tensors_.size() ? tensors_[a].info.numel : n) > (b < tensors_.size() ? tensors_[b].info.numel : n);
    });
    tensors_.reserve(tensors_.size() + 1);
    messages_.reserve(tensors_.size() + 1);
    // Nothing below throws.
    st.staged_offset = staged_values_.size();
    records_ = std::move(records);
    staged_records_ = std::move(staged);
    if (!host_memory) staged_values_ = std::move(staged_values);
    order_ = std::move(order);
    tensors_.push_back(std::move(st));
    messages_.emplace_back();
    return tensors_.size() - 1;
  }

  /// Number of registered tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }
  /// The registration record of tensor `id` (unchecked).
  const tensor_info& info(std::size_t id) const noexcept { return tensors_[id].info; }
  /// The backend value calls without one of their own run on.
  const Backend& backend() const noexcept { return backend_; }
  /// The configuration (its learning rate is the current one).
  const ef_signsgd_config& config() const noexcept { return cfg_; }
  /// Sets the learning rate of the next steps; throws `gradcomp::error` unless finite and > 0.
  void set_learning_rate(double lr) {
    if (!(lr > 0.0 && std::isfinite(lr) && std::isfinite(static_cast<T>(lr)) && static_cast<T>(lr) > T(0)))
      throw error(errc::invalid_argument, "learning_rate must be finite and > 0");
    cfg_.learning_rate = lr;
  }
  /// Steps compressed so far (waits for a step in progress).
  std::size_t step() {
    wait();
    return step_;
  }

  /// Issues one step over all tensors (see `dgc_compressor::compress`); its outcome comes from
  /// `stats()`. @return `errc::wrong_tensor_count`, `errc::size_mismatch` (nothing issued).
  [[nodiscard]] result<void> compress(span<const tensor_view> grads) { return compress(backend_, grads); }
  /// `compress` taking a vector of gradient views.
  [[nodiscard]] result<void> compress(const std::vector<tensor_view>& grads) {
    return compress(backend_, span<const tensor_view>(grads.data(), grads.size()));
  }
  /// `compress` on the execution context `on`.
  [[nodiscard]] result<void> compress(const Backend& on, span<const tensor_view> grads) {
    if (const errc e = detail::check_gradients(tensors_, grads); e != errc::ok) return fail(e);
    wait();
    const T lr = static_cast<T>(cfg_.learning_rate);
    const auto records = records_.view();
    const auto step = step_record_.view();
    const span<const std::size_t> all(order_.data(), order_.size());
    auto measure = [&](std::size_t t, std::size_t) {
      kernels::measure(on, lr, grads[t], readonly(tensors_[t].e.view()), records, t);
    };
    ops::for_each(on, exec_, all, measure);
    kernels::plan(on, records, step);
    auto apply = [&](std::size_t t, std::size_t) {
      kernels::apply(on, lr, grads[t], tensors_[t].e.view(), tensors_[t].values.view(), readonly(records), t,
                     readonly(step));
    };
    ops::for_each(on, exec_, all, apply);
    pending_ = true;
    pending_on_ = on;
    payload_staged_ = false;
    return {};
  }

  /**
   * @brief The outcome and statistics of the last `compress` (waits for it): every compressed
   * element counts as kept (density 1).
   * @return the statistics, or `errc::non_finite_input`, `errc::state_overflow` (nothing
   *         modified), `errc::invalid_argument` before the first `compress`.
   */
  [[nodiscard]] result<step_stats> stats() {
    wait();
    if (last_status_ != errc::ok) return fail(last_status_);
    return last_stats_;
  }

  /// An upper bound of `encode_message`'s output with options `opt` (exact for this compressor).
  std::size_t max_message_bytes(const wire::encode_options& opt = {}) const noexcept {
    std::uint64_t total = wire::message_overhead_bytes(opt);
    wire::encode_options signs = opt;
    signs.dense_values = wire::value_coding::scaled_sign;
    for (const auto& st : tensors_)
      total += *wire::max_section_bytes(st.info.numel, st.info.numel, true, st.info.compressed ? signs : opt);
    return static_cast<std::size_t>(total);
  }

  /**
   * @brief Encodes the last step (compressed tensors as `scaled_sign`, the others in
   * `opt.dense_values`); waits for the step. @return bytes written, the step's refusal, or the
   * errors of `wire::encode`.
   */
  [[nodiscard]] result<std::size_t> encode_message(const wire::encode_options& opt, span<std::byte> out) {
    wait(true);
    if (last_status_ != errc::ok) return fail(last_status_);
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      tensor_message<T> m;
      m.tensor = t;
      m.numel = tensors_[t].info.numel;
      m.dense = true;
      if constexpr (host_memory)
        m.values = readonly(tensors_[t].values.view());
      else
        m.values = span<const T>(staged_values_.data() + tensors_[t].staged_offset, m.numel);
      m.coding = tensors_[t].info.compressed ? wire::value_coding::scaled_sign : wire::value_coding::unspecified;
      messages_[t] = m;
    }
    return wire::encode(span<const tensor_message<T>>(messages_.data(), messages_.size()), opt, out);
  }

  /// Tensor `id`'s part of the last step's message, in the backend's memory (waits for the step).
  tensor_message<T, space> message(std::size_t id) {
    wait();
    tensor_message<T, space> m;
    m.tensor = id;
    m.numel = tensors_[id].info.numel;
    m.dense = true;
    m.values = readonly(tensors_[id].values.view());
    m.coding = tensors_[id].info.compressed ? wire::value_coding::scaled_sign : wire::value_coding::unspecified;
    return m;
  }

  /**
   * @brief The last step's message as views of the backend's memory, for an encoder that runs
   * there (`wire::device_encoder`, `<gradcomp/thrust/wire_encode.hpp>`): every tensor dense, a
   * compressed one's values as `scaled_sign`, and the step's verdict (a refused step's refusal).
   * Waits for nothing: the views always hold the data of the step issued last, in the stream's
   * order, so the encoder is set up once and issued after each `compress`.
   */
  wire::device_message<T, space> device_message() const {
    wire::device_message<T, space> m;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      wire::device_section<T, space> s;
      s.tensor = static_cast<std::uint32_t>(t);
      s.numel = static_cast<std::uint32_t>(tensors_[t].info.numel);
      s.dense = true;
      s.values = readonly(tensors_[t].values.view());
      s.coding = tensors_[t].info.compressed ? wire::value_coding::scaled_sign : wire::value_coding::unspecified;
      m.sections.push_back(s);
    }
    m.verdict = &step_record_.view().data()->status;
    return m;
  }

  /// The error buffer e of tensor `id`, in the backend's memory (empty for tensors sent whole).
  backend_span<const T, Backend> error_feedback(std::size_t id) const noexcept { return tensors_[id].e.view(); }

  /// What the receiving side needs: every tensor as a dense section, no receiver momentum (the
  /// messages carry `lr`: apply `w -= update(t)`).
  receiver_layout receiver() const {
    receiver_layout r;
    for (const auto& st : tensors_) r.tensors.push_back({st.info, true, false, 0});
    return r;
  }

 private:
  friend struct detail::ef_signsgd_snapshot_access;

  struct tensor_state {
    tensor_info info;
    buffer<T> e;       // error feedback (compressed tensors)
    buffer<T> values;  // last step's message values
    std::size_t staged_offset = 0;
  };

  // Waits for the step in progress and takes its outcome; with `payload`, a backend whose memory
  // the host cannot read also copies the message values in the same synchronisation.
  void wait(bool payload = false) {
    detail::ef_sign_step_record verdict;
    if constexpr (host_memory) {
      (void)payload;
      if (!pending_) return;
      ops::synchronize(pending_on_);
      verdict = step_record_.view()[0];
    } else {
      payload = payload && !payload_staged_;
      if (!pending_ && !payload) return;
      const Backend on = pending_ ? pending_on_ : backend_;
      if (pending_) {
        ops::copy_to_host(on, readonly(records_.view()), span<record>(staged_records_.data(), staged_records_.size()));
        ops::copy_to_host(on, readonly(step_record_.view()), span<detail::ef_sign_step_record>(&verdict, 1));
      }
      if (payload)
        for (const auto& st : tensors_)
          ops::copy_to_host(on, readonly(st.values.view()), span<T>(staged_values_.data() + st.staged_offset, st.info.numel));
      ops::synchronize(on);
      if (payload) payload_staged_ = true;
      if (!pending_) return;
    }
    pending_ = false;
    last_status_ = static_cast<errc>(verdict.status);
    if (last_status_ != errc::ok) return;
    step_stats s;
    s.step = step_;
    s.density = 1.0;
    for (const auto& st : tensors_) {
      s.total_elements += st.info.numel;
      if (st.info.compressed) {
        s.target_elements += st.info.numel;
        s.kept_elements += st.info.numel;
      } else {
        s.dense_elements += st.info.numel;
      }
    }
    last_stats_ = s;
    ++step_;
  }

  ef_signsgd_config cfg_;
  Backend backend_;
  typename ops::executor exec_;
  std::vector<tensor_state> tensors_;
  buffer<record> records_;
  buffer<detail::ef_sign_step_record> step_record_;
  std::vector<tensor_message<T>> messages_;
  std::vector<std::size_t> order_;  // tensor ids, largest first
  std::size_t step_ = 0;
  bool pending_ = false;
  Backend pending_on_{};
  errc last_status_ = errc::invalid_argument;  // no step yet
  step_stats last_stats_{};
  std::vector<record> staged_records_;
  std::vector<T> staged_values_;
  bool payload_staged_ = false;
};

}  // namespace gradcomp
