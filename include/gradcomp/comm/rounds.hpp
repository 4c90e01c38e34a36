/// @file comm/rounds.hpp
/// @brief `comm::exchange_rounds`: one step of a compressor whose step is several rounds of
/// averaging over the workers (`powersgd_compressor`), through an exchange (`comm::mpi_exchange`
/// on host memory; `comm::basic_mpi_exchange` and `comm::nccl_exchange` on a Thrust backend's),
/// each round's average bitwise the same on every rank.
///
/// A multi-round compressor `C` of value type `T` has, besides registration:
/// - `begin_step(grads)`: opens a step (round 1), or refuses it with nothing changed;
/// - `rounds()`, `round()`: the open (or next) step's rounds, and the round it awaits (0: none);
/// - `round_layout(k)`, `round_kind(k)`: round k's vectors as an aggregator's layout (every one
///   dense), and the kind of its messages (`wire::message_kind::first_round`, `second_round`);
/// - `max_round_bytes(opt)`, `encode_round(opt, out)`: the open round's payload as a message, in
///   host memory;
/// - `end_round(averages)`: the open round's average over the workers, one view per vector of its
///   layout in the compressor's memory (an aggregator's updates), which opens the next round or
///   completes the step; `cancel_step()` closes it.
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
/// On a GPU, with `c` a `powersgd_compressor<float, B>` of the CUDA backend `B` and `ex` a
/// `comm::nccl_exchange` on the same stream: `comm::round_buffers<float, B> buffers(c.backend())`
/// and the same call; each round's message (a few kilobytes: the factors) is encoded on the host
/// and copied to the GPU, where NCCL carries it and the aggregator adds it.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../aggregator.hpp"
#include "../backend.hpp"
#include "../backend_memory.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "../wire/encode.hpp"
#include "../wire/format.hpp"

namespace gradcomp {
namespace comm {

/**
 * @brief What `exchange_rounds` keeps from one step to the next: an aggregator per round in the
 * backend's memory (built again only when the round's layout changes), the message buffer (on
 * the host, and a copy in the backend's memory where the host cannot read it) and the views of a
 * round's averages. One per compressor; not thread-safe.
 * @tparam T the compressor's value type, float or double.
 * @tparam Backend the compressor's backend, whose memory the aggregators and averages are in.
 */
template <class T, class Backend = cpu_backend>
class round_buffers {
 public:
  /// A view of `U`s in the backend's memory.
  template <class U>
  using view = backend_span<U, Backend>;

  /// Buffers whose aggregators and copies run on `backend`.
  explicit round_buffers(Backend backend = Backend{}) : backend_(backend) {}

  /// Round k's aggregator (k >= 1) for `layout`, whose messages have kind `kind`.
  aggregator<T, Backend>& aggregator_for(std::size_t k, wire::message_kind kind, const receiver_layout& layout) {
    if (rounds_.size() < k) rounds_.resize(k);
    round& r = rounds_[k - 1];
    std::vector<std::size_t> sizes;
    for (const auto& t : layout.tensors) sizes.push_back(t.info.numel);
    if (!r.agg || r.kind != kind || r.sizes != sizes) {
      r.agg = std::make_unique<aggregator<T, Backend>>(kind, layout, backend_);
      r.kind = kind;
      r.sizes = std::move(sizes);
    }
    return *r.agg;
  }
  /// Room on the host for a message of `bytes` bytes.
  span<std::byte> message(std::size_t bytes) {
    if (message_.size() < bytes) message_.resize(bytes);
    return span<std::byte>(message_.data(), message_.size());
  }
  /// The first `bytes` bytes of `message()` where the backend's exchange reads them: the host's
  /// bytes themselves where the host reads the backend's memory, else a copy in that memory.
  view<const std::byte> staged(std::size_t bytes) {
    if constexpr (is_host_accessible_v<memory_space_t<Backend>>) {
      return view<const std::byte>(message_.data(), bytes);
    } else {
      if (staged_.size() < bytes) staged_ = allocate_buffer<std::byte>(backend_, message_.size());
      const view<std::byte> to = staged_.view().first(bytes);
      (void)copy_to_backend(backend_, span<const std::byte>(message_.data(), bytes), to);
      return readonly(to);
    }
  }
  /// `agg`'s updates, one view per tensor in order, where they are: the average a round ends with.
  span<const view<const T>> averages_of(const aggregator<T, Backend>& agg) {
    averages_.clear();
    for (std::size_t t = 0; t < agg.num_tensors(); ++t) averages_.push_back(agg.update(t));
    return span<const view<const T>>(averages_.data(), averages_.size());
  }

 private:
  struct round {
    std::unique_ptr<aggregator<T, Backend>> agg;
    wire::message_kind kind = wire::message_kind::gradients;
    std::vector<std::size_t> sizes;
  };
  Backend backend_;
  std::vector<round> rounds_;
  std::vector<std::byte> message_;
  backend_buffer<std::byte, Backend> staged_;
  std::vector<view<const T>> averages_;
};

/**
 * @brief One step of the multi-round compressor `c` (see the top of comm/rounds.hpp) through
 * `ex`, an exchange in the memory of `c`'s backend: `c.begin_step(grads)`, then for each round
 * its message (`c.encode_round(opt, ...)`, copied into the backend's memory where the host cannot
 * read it) reduced by `ex.reduce` into the round's aggregator, whose updates end the round
 * (`c.end_round`). Every rank's average is bitwise the same (the exchange adds the messages in
 * rank order on either of its paths), so every rank's `c` ends the step with the same update.
 *
 * Every rank takes part in every round whatever happened locally: a rank whose step is refused
 * sends no message (`ex.reduce_failed` with its reason), and every rank's step fails with the
 * exchange's error (`errc::peer_failed`, `ex.failed_rank()` naming the rank); a message an
 * aggregator refuses (damaged bytes, another round's kind, another layout) fails the step on
 * every rank likewise. A failed step is closed with nothing changed (`c.cancel_step()`); begin it
 * again on every rank.
 * @return nothing, or the error, the same on every rank but `errc::comm_error`.
 */
template <class Exchange, class C, class T, class Backend>
[[nodiscard]] result<void> exchange_rounds(Exchange& ex, C& c, span<const backend_span<const T, Backend>> grads,
                                           round_buffers<T, Backend>& buffers, const wire::encode_options& opt = {}) {
  static_assert(std::is_same<typename Exchange::memory_space, memory_space_t<Backend>>::value,
                "exchange_rounds: the exchange carries messages in the memory of the compressor's backend");
  const auto opened = c.begin_step(grads);
  errc why = opened ? errc::ok : opened.error();
  // A refused step has no open round: it takes part with the next step's layout, which is the
  // one the other ranks opened.
  const std::size_t rounds = c.rounds();
  const std::size_t most = why == errc::ok ? c.max_round_bytes(opt) : 0;  // every round's message fits
  for (std::size_t k = 1; k <= rounds; ++k) {
    aggregator<T, Backend>& agg = buffers.aggregator_for(k, C::round_kind(k), c.round_layout(k));
    std::size_t bytes = 0;
    if (why == errc::ok) {
      const auto n = c.encode_round(opt, buffers.message(most));
      if (n) bytes = *n;
      else why = n.error();
    }
    if (why != errc::ok) {
      c.cancel_step();
      const auto done = ex.reduce_failed(why, agg);
      return done ? fail(errc::peer_failed) : done;
    }
    if (const auto done = ex.reduce(buffers.staged(bytes), agg); !done) {
      c.cancel_step();
      return done;
    }
    const auto next = c.end_round(buffers.averages_of(agg));
    if (!next) return fail(next.error());
    if (c.round() == 0) return {};
  }
  c.cancel_step();
  return fail(errc::invalid_argument);  // a compressor that announced fewer rounds than it has
}

}  // namespace comm
}  // namespace gradcomp
