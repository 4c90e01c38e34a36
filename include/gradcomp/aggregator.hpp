/// @file aggregator.hpp
/// @brief `aggregator`: the receiving side of every compressor, built from a `receiver_layout`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "cpu/ops.hpp"
#include "detail/assign.hpp"
#include "detail/state_bounds.hpp"
#include "wire/codecs/values.hpp"
#include "momentum_kind.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "span.hpp"
#include "wire/tensor_message.hpp"
#include "wire/accumulate.hpp"
#include "wire/decode.hpp"
#include "detail/rounded.hpp"

namespace gradcomp {

namespace detail {
struct aggregator_snapshot_access;
}  // namespace detail

/**
 * @brief The receiving side of every compressor: sums the messages of N workers and returns the
 * averaged update per tensor.
 *
 * It is built from a `receiver_layout` (every compressor gives its own with `receiver()`, and the
 * constructor from a compressor takes it from there), so it does not depend on the compressor:
 * it aggregates any valid gradient message of the wire format whose sections follow the layout,
 * in any value coding.
 *
 * Per step: `begin()`, `add()` every worker's message for every tensor, `finish(N)`, then
 * `w -= lr * update(t)` (or `w -= update(t)` for compressors whose messages carry the learning
 * rate already, as EF-SignSGD's do). `finish` divides by N and, for the tensors the layout marks
 * (with DGC: those the senders did not momentum-correct), applies ordinary momentum with the
 * receiver's own buffer. Every replica that aggregates the same
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
 *
 * Sums and momentum live in the backend's memory; the sums are added, averaged and updated by
 * backend operations. An encoded message is checked on the host, where its bytes are; on a
 * backend whose memory the host cannot reach, each section is then decoded on the host and
 * copied to the backend, and neither `add(bytes)` nor `finish` waits for the backend, except to
 * check exactly a sum whose bound comes near the largest finite value. `add(message)` of a
 * message in backend memory checks it there and waits for the verdict.
 */
template <class T, class Backend = cpu_backend>
class aggregator {
  using ops = detail::ops<Backend>;
  using space = memory_space_t<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;
  static constexpr bool host_memory = is_host_accessible_v<space>;

 public:
  using value_type = T;         ///< The type of the sums and updates.
  using backend_type = Backend;  ///< The backend they live on.

  /**
   * @brief Allocates the sums (and receiver momentum buffers) of `layout`'s tensors.
   * Throws `gradcomp::error` (`errc::invalid_argument`): a momentum outside [0, 1), a momentum
   * form other than vanilla or Nesterov, a tensor whose `numel` is not the product of its shape,
   * or a `max_kept` above it.
   */
  explicit aggregator(const receiver_layout& layout, Backend backend = Backend{})
      : backend_(backend), momentum_(static_cast<T>(layout.momentum)), kind_(layout.kind) {
    // Checked as `finish` uses it: in T.
    if (!(layout.momentum >= 0.0 && layout.momentum < 1.0 && momentum_ < T(1)))
      throw error(errc::invalid_argument, "receiver momentum must be in [0, 1) in the value type");
    if (kind_ != momentum_kind::vanilla && kind_ != momentum_kind::nesterov)
      throw error(errc::invalid_argument, "receiver momentum form must be vanilla or nesterov");
    std::size_t scratch = 0;
    for (const auto& rt : layout.tensors) {
      if (detail::checked_numel(rt.info.shape) != rt.info.numel || rt.max_kept > rt.info.numel)
        throw error(errc::invalid_argument, rt.info.name);
      tensor_state st;
      st.info = rt.info;
      st.dense = rt.dense;
      st.sum = ops::template allocate<T>(backend_, st.info.numel);
      st.receiver_momentum = momentum_ > T(0) && rt.momentum;
      if (st.receiver_momentum) st.u = ops::template allocate<T>(backend_, st.info.numel);
      // Room to decode the positions of one message once (see wire::decode_accumulate).
      if (!rt.dense) scratch += rt.max_kept;
      tensors_.push_back(std::move(st));
    }
    seen_.assign(tensors_.size(), 0);
    if constexpr (host_memory) {
      sums_.resize(tensors_.size());
      index_scratch_.assign(scratch, 0);
    } else {
      // Room for one section of the largest tensor, on the host and on the backend.
      std::size_t largest = 0;
      for (const auto& st : tensors_) largest = std::max(largest, st.info.numel);
      staged_indices_.assign(largest, 0);
      staged_values_.assign(largest, T(0));
      backend_indices_ = ops::template allocate<std::uint32_t>(backend_, largest);
      backend_values_ = ops::template allocate<T>(backend_, largest);
    }
  }

  /**
   * @brief An aggregator of the messages of kind `accepts`: `wire::message_kind::gradients` (as
   * the constructor above), or a round of a multi-round method (`first_round`, `second_round`:
   * the round's layout, every tensor dense, from its compressor), whose messages it averages
   * likewise; a message of another kind is refused (`errc::layout_mismatch`). Throws as above,
   * and `errc::invalid_argument` for another kind, or a round with a sparse tensor.
   */
  aggregator(wire::message_kind accepts, const receiver_layout& layout, Backend backend = Backend{})
      : aggregator(layout, backend) {
    const bool round = wire::is_round(accepts);
    if (!round && accepts != wire::message_kind::gradients)
      throw error(errc::invalid_argument, "an aggregator accepts gradient messages or a round's");
    for (const auto& st : tensors_)
      if (round && !st.dense) throw error(errc::invalid_argument, "a round's tensors are dense");
    accepts_ = accepts;
  }

  /// The layout and receiver settings of `sender` (any compressor: `sender.receiver()`).
  template <class Compressor, class = decltype(std::declval<const Compressor&>().receiver())>
  explicit aggregator(const Compressor& sender, Backend backend = Backend{})
      : aggregator(sender.receiver(), backend) {}

  /// Copies layout, sums and momentum.
  aggregator(const aggregator&) = default;
  /// Moves everything.
  aggregator(aggregator&&) = default;
  /// Copy assignment with the strong guarantee: if copying throws, `*this` is unchanged.
  aggregator& operator=(const aggregator& other) { return detail::copy_assign(*this, other); }
  /// Move assignment.
  aggregator& operator=(aggregator&&) = default;
  ~aggregator() = default;

  /// Zeroes the sums; call once per step before `add`.
  void begin() {
    for (auto& st : tensors_) {
      ops::fill_zero(backend_, st.sum.view());
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
   *         is added on error. A message whose producer wrote its payload
   *         (`tensor_message::payload`, `isgq_compressor`'s) is checked as a decoder checks it
   *         (`errc::invalid_argument` for a payload in a coding that takes none,
   *         `errc::malformed_payload` and the payload errors of `wire::validate`), decoded on
   *         the host and added as a dense message.
   */
  [[nodiscard]] result<void> add(const tensor_message<T, space>& msg) {
    if (!msg.payload.empty()) return add_payload(msg);
    if (msg.tensor >= tensors_.size()) return fail(errc::unknown_tensor);
    tensor_state& st = tensors_[msg.tensor];
    if (msg.numel != st.info.numel || msg.dense != st.dense)
      return fail(errc::layout_mismatch);
    const span<T, space> sum = st.sum.view();
    span<const std::uint32_t, space> idx;
    if (msg.dense) {
      if (msg.values.size() != st.info.numel) return fail(errc::size_mismatch);
    } else {
      if (msg.values.size() != msg.indices.size() || msg.indices.size() > st.info.numel)
        return fail(errc::size_mismatch);
      if (const errc e = ops::check_positions(backend_, msg.indices, st.info.numel); e != errc::ok) return fail(e);
      idx = msg.indices;
    }
    const double largest = ops::largest_magnitude(backend_, msg.values);
    if (std::isnan(largest)) return fail(errc::non_finite_input);
    bool check_sums = false;
    accept(st, largest, check_sums);
    if (check_sums && std::isnan(ops::largest_magnitude_of_sum(backend_, readonly(sum), idx, msg.values)))
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
   * @brief Adds one worker's encoded step message (from a compressor's `encode_message`): every
   * section is decoded and added into its tensor's sum. The message is checked completely first,
   * against the wire format and against the layout: it must carry every tensor exactly once, in
   * the form the layout gives it (`receiver_tensor::dense`) with the tensor's element count, and no
   * sum may overflow. A message that fails any check adds nothing.
   * @return `errc::unknown_tensor` (a tensor id beyond the layout), `errc::duplicate_tensor`
   *         (a tensor carried twice), `errc::missing_tensor` (a tensor not carried),
   *         `errc::layout_mismatch` (a section of the wrong form or element count, or a message
   *         of another kind than `message_kind()`), `errc::state_overflow`, and every decoding error of
   *         `wire::decode_accumulate`.
   */
  [[nodiscard]] result<void> add(span<const std::byte> message) {
    std::fill(seen_.begin(), seen_.end(), static_cast<unsigned char>(0));
    layout_rules rules{*this};
    const errc e = add_checked(message, rules);
    // The accumulators have the layout's sizes: a size error is a section of another numel.
    if (e == errc::output_too_small || e == errc::size_mismatch) return fail(errc::layout_mismatch);
    if (e != errc::ok) return fail(e);
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
      const double u = kind_ == momentum_kind::nesterov ? detail::rounded(m * (st.u_bound + a))
                                                          : detail::rounded(m * st.u_bound) + a;
      const double out = kind_ == momentum_kind::nesterov ? u + a : u;
      st.next_u_bound = u * detail::bound_slack;
      st.next_bound = out * detail::bound_slack;
      if (st.next_u_bound <= limit && st.next_bound <= limit) continue;
      const auto r = ops::momentum_apply_magnitudes(backend_, kind_, momentum_, inv, num_workers != 1,
                                                    readonly(st.u.view()), readonly(st.sum.view()));
      if (!r.finite) return fail(errc::state_overflow);
      st.next_u_bound = r.u;
      st.next_bound = r.v;
    }
    for (auto& st : tensors_) {
      const span<T, space> sum = st.sum.view();
      if (num_workers != 1) ops::scale(backend_, inv, sum);
      if (st.receiver_momentum) ops::momentum_apply(backend_, kind_, momentum_, st.u.view(), sum);
      st.u_bound = st.next_u_bound;
      st.bound = st.next_bound;
    }
    return {};
  }

  /**
   * @brief Tensor `id`'s sum since `begin()` (unchecked id), in the backend's memory and
   * writable: for an exchange that forms the sum of every worker's messages itself, element by
   * element (the dense path of `comm::mpi_exchange`), and then declares it with `set_added`.
   */
  backend_span<T, Backend> sum(std::size_t id) noexcept { return tensors_[id].sum.view(); }

  /**
   * @brief Declares that every sum now holds the messages of `workers` workers, formed by the
   * caller through `sum()` instead of `add`, so that `finish(workers)` may follow. The sums are
   * checked exactly (waiting for the backend) and become the bounds that guard later additions
   * and the receiver-side momentum.
   * @return `errc::state_overflow` if a sum is not finite, `errc::invalid_argument` if `workers`
   *         is 0; nothing is declared then (a following `finish(workers)` is refused).
   */
  [[nodiscard]] result<void> set_added(std::size_t workers) {
    if (workers == 0) return fail(errc::invalid_argument);
    for (auto& st : tensors_) {
      st.next_bound = ops::largest_magnitude(backend_, readonly(st.sum.view()));
      if (std::isnan(st.next_bound)) return fail(errc::state_overflow);
    }
    for (auto& st : tensors_) {
      commit(st);
      st.messages = workers;
    }
    return {};
  }

  /// True when senders send tensor `id` (unchecked) dense, false when sparse: the form `add`
  /// requires of its sections.
  bool dense(std::size_t id) const noexcept { return tensors_[id].dense; }

  /// The backend the sums live on.
  const Backend& backend() const noexcept { return backend_; }
  /// The kind of message `add` accepts.
  wire::message_kind message_kind() const noexcept { return accepts_; }

  /// The update of tensor `id` after `finish` (unchecked id), in the backend's memory: apply as
  /// `w -= lr * update`.
  backend_span<const T, Backend> update(std::size_t id) const noexcept { return readonly(tensors_[id].sum.view()); }
  /// Number of tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }

 private:
  friend struct detail::aggregator_snapshot_access;

  struct tensor_state {
    tensor_info info;
    bool dense = false;  // the form senders send it in
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

  // A message with a producer's payload: checked, decoded on the host, added as a dense message.
  result<void> add_payload(const tensor_message<T, space>& msg) {
    if (msg.tensor >= tensors_.size()) return fail(errc::unknown_tensor);
    if (!msg.dense || !msg.values.empty() || !msg.indices.empty() || !detail::is_payload_coding(msg.coding))
      return fail(errc::invalid_argument);
    const tensor_state& st = tensors_[msg.tensor];
    if (msg.numel != st.info.numel || !st.dense) return fail(errc::layout_mismatch);
    const std::byte* p = msg.payload.data();
    if (!detail::value_payload_fits(msg.coding, p, msg.payload.size(), msg.numel)) return fail(errc::malformed_payload);
    if (const errc e = detail::check_values<T>(p, msg.coding, msg.numel); e != errc::ok) return fail(e);
    decoded_.resize(msg.numel);
    detail::decode_values<T>(p, msg.coding, msg.numel, decoded_.data());
    tensor_message<T, space> dense = msg;
    dense.payload = {};
    dense.coding = wire::value_coding::unspecified;
    if constexpr (host_memory) {
      dense.values = span<const T>(decoded_.data(), decoded_.size());
    } else {
      ops::copy_to_backend(backend_, span<const T>(decoded_.data(), msg.numel), backend_values_.view().first(msg.numel));
      dense.values = readonly(backend_values_.view()).first(msg.numel);
    }
    return add(dense);
  }

  // Checks `message` completely against the format and the layout, then adds every section into
  // its sum: in place where the host can write the sums, else decoded on the host and added on
  // the backend.
  template <class Rules>
  errc add_checked(span<const std::byte> message, Rules& rules) {
    if constexpr (host_memory) {
      for (std::size_t t = 0; t < tensors_.size(); ++t)  // views refreshed: objects may have moved
        sums_[t] = tensors_[t].sum.view();
      const auto r = wire::decode_accumulate<T>(message, span<const span<T>>(sums_.data(), sums_.size()),
                                                span<std::uint32_t>(index_scratch_.data(), index_scratch_.size()),
                                                rules);
      return r ? errc::ok : r.error();
    } else {
      const auto h = wire::detail::check_accumulate<T>(
          message, tensors_.size(), [&](std::uint32_t t) { return tensors_[t].info.numel; },
          [](std::uint32_t) -> const T* { return nullptr; }, span<std::uint32_t>(),
          rules, [&](const wire::section_header& s) {
            const auto staged = stage(message, s);
            return !std::isnan(ops::largest_magnitude_of_sum(backend_, readonly(tensors_[s.tensor].sum.view()),
                                                             staged.indices, staged.values));
          });
      if (!h) return h.error();
      (void)wire::for_each_section(message, [&](const wire::section_header& s) {
        const auto staged = stage(message, s);
        const span<T, space> sum = tensors_[s.tensor].sum.view();
        if (s.indices == wire::index_coding::dense)
          ops::add(backend_, staged.values, sum);
        else
          ops::scatter_add(backend_, staged.indices, staged.values, sum);
      });
      return errc::ok;
    }
  }

  // One checked section of a message, decoded on the host and copied into backend memory (the
  // copy reads the host staging before it returns, so the next section may reuse it).
  struct staged_section {
    span<const std::uint32_t, space> indices;  // empty for a dense section
    span<const T, space> values;
  };
  staged_section stage(span<const std::byte> message, const wire::section_header& s) {
    const std::byte* payload = wire::detail::value_payload(message, s);
    detail::decode_values<T>(payload, s.values, s.kept, staged_values_.data());
    staged_section out;
    out.values = readonly(backend_values_.view()).first(s.kept);
    ops::copy_to_backend(backend_, span<const T>(staged_values_.data(), s.kept), backend_values_.view().first(s.kept));
    if (s.indices != wire::index_coding::dense) {
      std::uint32_t* idx = staged_indices_.data();
      (void)wire::detail::for_each_index(message, s, [idx](std::uint32_t j, std::uint32_t i) { idx[j] = i; });
      ops::copy_to_backend(backend_, span<const std::uint32_t>(idx, s.kept), backend_indices_.view().first(s.kept));
      out.indices = readonly(backend_indices_.view()).first(s.kept);
    }
    return out;
  }

  // The layout an encoded message must follow (see add(span<const std::byte>)).
  struct layout_rules {
    aggregator& a;
    errc section(const wire::section_header& s, double largest, bool& check_sums) noexcept {
      // decode_accumulate has checked s.tensor against the number of tensors and numel.
      tensor_state& st = a.tensors_[s.tensor];
      if (a.seen_[s.tensor] != 0) return errc::duplicate_tensor;
      a.seen_[s.tensor] = 1;
      if ((s.indices == wire::index_coding::dense) != st.dense) return errc::layout_mismatch;
      accept(st, largest, check_sums);
      return errc::ok;
    }
    errc complete() const noexcept {
      for (const unsigned char seen : a.seen_)
        if (seen == 0) return errc::missing_tensor;
      return errc::ok;
    }
    wire::message_kind kind() const noexcept { return a.accepts_; }
  };

  Backend backend_;
  T momentum_;
  momentum_kind kind_;
  wire::message_kind accepts_ = wire::message_kind::gradients;
  std::vector<tensor_state> tensors_;
  std::vector<unsigned char> seen_;  // tensors carried by the message being added
  // Host-accessible memory: views of the sums, and room to decode the positions of a message once.
  std::vector<span<T>> sums_;
  std::vector<std::uint32_t> index_scratch_;
  // Other memory: one section staged on the host, then copied to the backend.
  std::vector<std::uint32_t> staged_indices_;
  std::vector<T> staged_values_;
  std::vector<T> decoded_;  // a producer's payload, decoded (add_payload)
  buffer<std::uint32_t> backend_indices_;
  buffer<T> backend_values_;
};

}  // namespace gradcomp
