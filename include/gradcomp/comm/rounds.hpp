/// @file comm/rounds.hpp
/// @brief `comm::exchange_rounds`: one step of a compressor whose step is several rounds of
/// averaging over the workers (`powersgd_compressor`), through an exchange (`comm::mpi_exchange`
/// and the other exchanges on host memory), each round's average bitwise the same on every rank.
///
/// A multi-round compressor `C` of value type `T` has, besides registration:
/// - `begin_step(grads)`: opens a step (round 1), or refuses it with nothing changed;
/// - `rounds()`, `round()`: the open (or next) step's rounds, and the round it awaits (0: none);
/// - `round_layout(k)`, `round_kind(k)`: round k's vectors as an aggregator's layout (every one
///   dense), and the kind of its messages (`wire::message_kind::first_round`, `second_round`);
/// - `max_round_bytes(opt)`, `encode_round(opt, out)`: the open round's payload as a message;
/// - `end_round(average)`: the open round's average over the workers (its layout's vectors in
///   order), which opens the next round or completes the step; `cancel_step()` closes it.
/// Any method of that shape runs through `exchange_rounds` without an edit here.
///
/// One step on every rank:
/// @code
/// gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD);
/// gradcomp::comm::round_buffers<float> buffers;
/// ...
/// gradcomp::comm::exchange_rounds(ex, c, grads, buffers).value();  // the same error on every rank
/// // w -= lr * c.update(t): bitwise the same update everywhere
/// @endcode
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "../aggregator.hpp"
#include "../backend.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "../wire/encode.hpp"
#include "../wire/format.hpp"

namespace gradcomp {
namespace comm {

/**
 * @brief What `exchange_rounds` keeps from one step to the next: an aggregator per round (built
 * again only when the round's layout changes), the message buffer and the averages. One per
 * compressor; not thread-safe.
 * @tparam T the compressor's value type, float or double.
 */
template <class T>
class round_buffers {
 public:
  /// Round k's aggregator (k >= 1) for `layout`, whose messages have kind `kind`.
  aggregator<T>& aggregator_for(std::size_t k, wire::message_kind kind, const receiver_layout& layout) {
    if (rounds_.size() < k) rounds_.resize(k);
    round& r = rounds_[k - 1];
    std::vector<std::size_t> sizes;
    for (const auto& t : layout.tensors) sizes.push_back(t.info.numel);
    if (!r.agg || r.kind != kind || r.sizes != sizes) {
      r.agg = std::make_unique<aggregator<T>>(kind, layout);
      r.kind = kind;
      r.sizes = std::move(sizes);
    }
    return *r.agg;
  }
  /// Room for a message of `bytes` bytes.
  span<std::byte> message(std::size_t bytes) {
    if (message_.size() < bytes) message_.resize(bytes);
    return span<std::byte>(message_.data(), message_.size());
  }
  /// `agg`'s updates, one after the other: the average a round ends with.
  span<const T> average_of(const aggregator<T>& agg) {
    average_.clear();
    for (std::size_t t = 0; t < agg.num_tensors(); ++t) {
      const auto u = agg.update(t);
      average_.insert(average_.end(), u.begin(), u.end());
    }
    return span<const T>(average_.data(), average_.size());
  }

 private:
  struct round {
    std::unique_ptr<aggregator<T>> agg;
    wire::message_kind kind = wire::message_kind::gradients;
    std::vector<std::size_t> sizes;
  };
  std::vector<round> rounds_;
  std::vector<std::byte> message_;
  std::vector<T> average_;
};

/**
 * @brief One step of the multi-round compressor `c` (see the top of comm/rounds.hpp) through
 * `ex`, an exchange on host memory (`comm::mpi_exchange`): `c.begin_step(grads)`, then for each
 * round its message (`c.encode_round(opt, ...)`) reduced by `ex.reduce` into the round's
 * aggregator, whose average ends the round (`c.end_round`). Every rank's average is bitwise the
 * same (the exchange adds the messages in rank order on either of its paths), so every rank's
 * `c` ends the step with the same update.
 *
 * Every rank takes part in every round whatever happened locally: a rank whose step is refused
 * sends no message (`ex.reduce_failed` with its reason), and every rank's step fails with the
 * exchange's error (`errc::peer_failed`, `ex.failed_rank()` naming the rank); a message an
 * aggregator refuses (damaged bytes, another round's kind, another layout) fails the step on
 * every rank likewise. A failed step is closed with nothing changed (`c.cancel_step()`); begin it
 * again on every rank.
 * @return nothing, or the error, the same on every rank but `errc::comm_error`.
 */
template <class Exchange, class C, class T>
[[nodiscard]] result<void> exchange_rounds(Exchange& ex, C& c, span<const span<const T>> grads,
                                           round_buffers<T>& buffers, const wire::encode_options& opt = {}) {
  static_assert(is_host_accessible_v<typename Exchange::memory_space>,
                "exchange_rounds exchanges messages in host memory");
  const auto opened = c.begin_step(grads);
  errc why = opened ? errc::ok : opened.error();
  // A refused step has no open round: it takes part with the next step's layout, which is the
  // one the other ranks opened.
  const std::size_t rounds = c.rounds();
  const std::size_t most = why == errc::ok ? c.max_round_bytes(opt) : 0;  // every round's message fits
  for (std::size_t k = 1; k <= rounds; ++k) {
    aggregator<T>& agg = buffers.aggregator_for(k, C::round_kind(k), c.round_layout(k));
    span<std::byte> out;
    if (why == errc::ok) {
      out = buffers.message(most);
      const auto n = c.encode_round(opt, out);
      if (n) out = out.first(*n);
      else why = n.error();
    }
    if (why != errc::ok) {
      c.cancel_step();
      const auto done = ex.reduce_failed(why, agg);
      return done ? fail(errc::peer_failed) : done;
    }
    if (const auto done = ex.reduce(span<const std::byte>(out.data(), out.size()), agg); !done) {
      c.cancel_step();
      return done;
    }
    const auto next = c.end_round(buffers.average_of(agg));
    if (!next) return fail(next.error());
    if (c.round() == 0) return {};
  }
  c.cancel_step();
  return fail(errc::invalid_argument);  // a compressor that announced fewer rounds than it has
}

}  // namespace comm
}  // namespace gradcomp
