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
#include "detail/state_bounds.hpp"
#include "dgc/momentum_kind.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "span.hpp"
#include "tensor_message.hpp"
#include "wire/accumulate.hpp"
#include "wire/decode.hpp"

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
 */
template <class T, class Backend = cpu_backend>
class aggregator {
  // The checks of every add are decided on the host, in place: the aggregator needs memory the
  // host can read.
  static_assert(is_host_accessible_v<memory_space_t<Backend>>,
                "aggregator needs a backend whose memory the host can read");
  using ops = detail::ops<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;

 public:
  /**
   * @brief Allocates the sums (and receiver momentum buffers) of `layout`'s tensors.
   * Throws `gradcomp::error` (`errc::invalid_argument`): a momentum outside [0, 1), a momentum
   * form other than vanilla or Nesterov, a tensor whose `numel` is not the product of its shape,
   * or a `max_kept` above it.
   */
  explicit aggregator(const receiver_layout& layout, Backend backend = Backend{})
      : backend_(backend), momentum_(static_cast<T>(layout.momentum)), kind_(layout.kind) {
    if (!(layout.momentum >= 0.0 && layout.momentum < 1.0))
      throw error(errc::invalid_argument, "receiver momentum must be in [0, 1)");
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
    sums_.resize(tensors_.size());
    seen_.assign(tensors_.size(), 0);
    index_scratch_.assign(scratch, 0);
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
  aggregator& operator=(const aggregator& other) {
    if (this != &other) {
      aggregator copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  /// Move assignment.
  aggregator& operator=(aggregator&&) = default;
  ~aggregator() = default;

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
    if (msg.numel != st.info.numel || msg.dense != st.dense)
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
   * @brief Adds one worker's encoded step message (from a compressor's `encode_message`): every
   * section is decoded and added into its tensor's sum. The message is checked completely first,
   * against the wire format and against the layout: it must carry every tensor exactly once, in
   * the form the layout gives it (`receiver_tensor::dense`) with the tensor's element count, and no sum may overflow. A message that
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
