/// @file comm/mpi.hpp
/// @brief `comm::mpi_exchange`: one step's wire messages of every rank of an MPI communicator,
/// and their aggregation in rank order, the same update on every rank.
///
/// An optional header: it includes `<mpi.h>`, so include it only where MPI is available and link
/// MPI (CMake: `find_package(MPI)`, `MPI::MPI_CXX`); the rest of gradcomp never needs MPI, and
/// `<gradcomp/gradcomp.hpp>` does not include it.
///
/// One step on every rank, with any compressor `c` and an `aggregator` (or `dgc_aggregator`) `agg`
/// built from `c.receiver()`:
/// @code
/// gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD);
/// ...
/// c.compress(grads);
/// const auto n = c.encode_message({}, out);          // refused: ex.allgather_failed(n.error())
/// ex.allgather(out.first(*n)).value();               // every rank's message, in rank order
/// ex.aggregate(agg).value();                         // agg.begin(), add(rank 0 .. N-1), finish(N)
/// // w -= lr * agg.update(t) on every rank: bitwise the same update everywhere
/// @endcode
///
/// Every rank takes part in every collective whatever happened locally, so an error never leaves
/// a rank waiting: a rank without a message for the step (`allgather_failed`) makes every rank's
/// `allgather` return `errc::peer_failed`; a message that any rank's aggregator refuses (damaged
/// bytes, another layout, another compressor's sections) makes every rank's `aggregate` return
/// the refusal of the lowest such rank; `failed_rank()` names that rank on every rank.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../error.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace comm {

namespace detail {

// What each rank announces before the payloads: its message's length and whether it has one.
struct announcement {
  std::uint64_t bytes = 0;
  std::uint32_t status = 0;  // an errc: ok, or why the rank has no message
  std::uint32_t reserved = 0;
};

// MPI_Allgatherv's counts and displacements for the announced lengths; size_overflow when their
// total exceeds what an int counts (MPI's counts are int).
inline errc gather_layout(const std::vector<announcement>& a, std::vector<int>& counts, std::vector<int>& displs) {
  counts.assign(a.size(), 0);
  displs.assign(a.size(), 0);
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < a.size(); ++r) {
    if (a[r].bytes > static_cast<std::uint64_t>(INT_MAX) - total) return errc::size_overflow;
    displs[r] = static_cast<int>(total);
    counts[r] = static_cast<int>(a[r].bytes);
    total += a[r].bytes;
  }
  return errc::ok;
}

}  // namespace detail

/**
 * @brief The messages of one step of every rank of a communicator (an allgather: their lengths
 * with `MPI_Iallgather`, then the bytes with `MPI_Iallgatherv`), and their aggregation in rank
 * order.
 *
 * It works on its own duplicate of the communicator (so its collectives never match the
 * trainer's), with `MPI_ERRORS_RETURN`: a failed MPI call is `errc::comm_error`. Destroy it before
 * `MPI_Finalize`. Every rank must make the same calls in the same order (`allgather` or
 * `allgather_failed`, or `start`/`start_failed` then `wait`; then `aggregate`), as with any
 * collective. Not thread-safe; one exchange in flight at a time.
 */
class mpi_exchange {
 public:
  /// Works on a duplicate of `comm` (collective over `comm`). Throws `gradcomp::error`
  /// (`errc::comm_error`) if MPI cannot duplicate it.
  explicit mpi_exchange(MPI_Comm comm) {
    if (MPI_Comm_dup(comm, &comm_) != MPI_SUCCESS) throw gradcomp::error(errc::comm_error, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    announced_.resize(static_cast<std::size_t>(size_));
  }
  /// Frees the duplicate communicator; an exchange still in flight is completed first.
  ~mpi_exchange() {
    if (phase_ != phase::idle) (void)wait();
    MPI_Comm_free(&comm_);
  }
  mpi_exchange(const mpi_exchange&) = delete;
  mpi_exchange& operator=(const mpi_exchange&) = delete;

  /// This process's rank in the communicator.
  int rank() const noexcept { return rank_; }
  /// The number of ranks.
  int size() const noexcept { return size_; }
  /// The duplicate communicator the exchange runs on.
  MPI_Comm communicator() const noexcept { return comm_; }

  /// Sends `message` (this rank's encoded step) and receives every rank's: `start` then `wait`.
  [[nodiscard]] result<void> allgather(span<const std::byte> message) {
    start(message);
    return wait();
  }
  /// Takes part in the step without a message (`why`: the reason, such as the refusal of the
  /// rank's step): every rank's exchange returns `errc::peer_failed`.
  [[nodiscard]] result<void> allgather_failed(errc why) {
    start_failed(why);
    return wait();
  }

  /// Starts the allgather of `message`, which must stay valid and unchanged until `wait` returns;
  /// the caller may compute meanwhile (`test` lets MPI progress and posts the second phase as
  /// soon as the lengths are known).
  void start(span<const std::byte> message) { begin(message, errc::ok); }
  /// `start` without a message (see `allgather_failed`).
  void start_failed(errc why) { begin(span<const std::byte>(), why == errc::ok ? errc::peer_failed : why); }

  /// Lets the exchange progress without blocking; true when it is complete (then `wait` returns
  /// at once).
  [[nodiscard]] bool test() {
    for (;;) {
      if (phase_ == phase::idle || phase_ == phase::done) return true;
      int flag = 0;
      if (MPI_Test(&request_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        finish_with(errc::comm_error);
        return true;
      }
      if (flag == 0) return false;
      advance();
    }
  }
  /// Completes the exchange: `errc::peer_failed` when a rank had no message (`failed_rank()`
  /// names the lowest), `errc::size_overflow` when the messages together exceed 2^31 - 1 bytes,
  /// `errc::comm_error` when MPI failed; the same on every rank except for `comm_error`.
  [[nodiscard]] result<void> wait() {
    while (phase_ == phase::announcing || phase_ == phase::gathering) {
      if (MPI_Wait(&request_, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        finish_with(errc::comm_error);
        break;
      }
      advance();
    }
    phase_ = phase::idle;
    if (status_ != errc::ok) return fail(status_);
    return {};
  }

  /// Rank `r`'s message of the last completed exchange (empty if it failed); valid until the next
  /// `start`.
  span<const std::byte> message(int r) const noexcept {
    if (status_ != errc::ok || r < 0 || r >= size_ || counts_.size() != static_cast<std::size_t>(size_)) return {};
    const auto i = static_cast<std::size_t>(r);
    return span<const std::byte>(received_.data() + displs_[i], static_cast<std::size_t>(counts_[i]));
  }
  /// The lowest rank that had no message (after `wait`) or whose message was refused (after
  /// `aggregate`), the same on every rank; -1 when none.
  int failed_rank() const noexcept { return failed_rank_; }

  /// Aggregates the last exchange's messages in rank order: `agg.begin()`, `agg.add(message(r))`
  /// for r = 0 .. size() - 1, then `agg.finish(size())`, so every rank computes bitwise the update
  /// a single process adding the same messages in that order computes. If any rank's aggregator
  /// refuses a message, every rank returns the refusal of the lowest such rank (`failed_rank()`)
  /// without `finish`: apply no update then. Returns the exchange's own error if it failed.
  template <class Aggregator>
  [[nodiscard]] result<void> aggregate(Aggregator& agg) {
    if (status_ != errc::ok) return fail(status_);
    agg.begin();
    // The lowest rank whose message this aggregator refuses, and why; MPI_MINLOC gives every rank
    // the lowest over all ranks (the second int, the error code, travels with it).
    struct {
      int rank;
      int code;
    } mine{size_, 0}, lowest{size_, 0};
    for (int r = 0; r < size_; ++r) {
      const auto added = agg.add(message(r));
      if (!added) {
        mine = {r, static_cast<int>(added.error())};
        break;
      }
    }
    if (MPI_Allreduce(&mine, &lowest, 1, MPI_2INT, MPI_MINLOC, comm_) != MPI_SUCCESS) return fail(errc::comm_error);
    if (lowest.rank < size_) {
      failed_rank_ = lowest.rank;
      return fail(static_cast<errc>(lowest.code));
    }
    return agg.finish(static_cast<std::size_t>(size_));
  }

 private:
  enum class phase { idle, announcing, gathering, done };

  void begin(span<const std::byte> message, errc why) {
    if (phase_ != phase::idle) (void)wait();
    mine_ = message;
    status_ = errc::ok;
    failed_rank_ = -1;
    detail::announcement a;
    a.bytes = message.size();
    a.status = static_cast<std::uint32_t>(why);
    announcement_ = a;
    phase_ = phase::announcing;
    if (MPI_Iallgather(&announcement_, sizeof(detail::announcement), MPI_BYTE, announced_.data(), sizeof(detail::announcement),
                       MPI_BYTE, comm_, &request_) != MPI_SUCCESS)
      finish_with(errc::comm_error);
  }

  // The request of the current phase has completed: decide on the lengths every rank announced
  // (the same decision everywhere), then post the payloads' allgather or finish.
  void advance() {
    if (phase_ == phase::gathering) {
      phase_ = phase::done;
      return;
    }
    for (int r = 0; r < size_; ++r)
      if (announced_[static_cast<std::size_t>(r)].status != static_cast<std::uint32_t>(errc::ok)) {
        failed_rank_ = r;
        finish_with(errc::peer_failed);
        return;
      }
    const errc layout = detail::gather_layout(announced_, counts_, displs_);
    if (layout != errc::ok) {
      finish_with(layout);
      return;
    }
    // Never empty, so that MPI sees valid buffers when every message is.
    received_.resize(static_cast<std::size_t>(displs_.back()) + static_cast<std::size_t>(counts_.back()) + 1);
    phase_ = phase::gathering;
    static const std::byte nothing{};
    const void* send = mine_.empty() ? static_cast<const void*>(&nothing) : static_cast<const void*>(mine_.data());
    if (MPI_Iallgatherv(send, static_cast<int>(mine_.size()), MPI_BYTE, received_.data(), counts_.data(),
                        displs_.data(), MPI_BYTE, comm_, &request_) != MPI_SUCCESS)
      finish_with(errc::comm_error);
  }

  void finish_with(errc e) {
    status_ = e;
    phase_ = phase::done;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  phase phase_ = phase::idle;
  MPI_Request request_ = MPI_REQUEST_NULL;
  span<const std::byte> mine_;
  detail::announcement announcement_;
  std::vector<detail::announcement> announced_;
  std::vector<int> counts_, displs_;
  std::vector<std::byte> received_;
  errc status_ = errc::ok;
  int failed_rank_ = -1;
};

}  // namespace comm
}  // namespace gradcomp
