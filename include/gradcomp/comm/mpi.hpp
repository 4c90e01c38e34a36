/// @file comm/mpi.hpp
/// @brief `comm::mpi_exchange`: one step's wire messages of every rank of an MPI communicator,
/// aggregated in rank order into the same update on every rank, through a sparse allgather or a
/// dense allreduce, whichever moves fewer bytes; and dense tensors summed across the ranks.
///
/// An optional header: it includes `<mpi.h>`, so include it only where MPI is available and link
/// MPI (CMake: `find_package(MPI)`, `MPI::MPI_CXX`); the rest of gradcomp never needs MPI, and
/// `<gradcomp/gradcomp.hpp>` does not include it.
///
/// One step on every rank, with any compressor `c` and an `aggregator` (or `dgc_aggregator`) `agg`
/// built from `c.receiver()`:
/// @code
/// gradcomp::comm::mpi_exchange ex(MPI_COMM_WORLD);   // exchange_path::automatic
/// ...
/// c.compress(grads);
/// const auto n = c.encode_message({}, out);          // refused: ex.reduce_failed(n.error(), agg)
/// ex.reduce(out.first(*n), agg).value();             // every rank's message, added in rank order
/// // w -= lr * agg.update(t) on every rank: bitwise the same update everywhere
/// @endcode
///
/// `reduce` looks at the lengths every rank announces and takes, for this step, the sparse
/// allgather (every message to every rank, each rank adds them all) or, when the messages
/// together exceed twice the dense update's bytes, the dense allreduce (each rank adds its own
/// message into its sums, the sums are reduced share by share in rank order and gathered): both
/// give bitwise the update of one process adding the messages in rank order
/// (`comm::exchange_path`, docs/scaling.md). `allgather` then `aggregate` is the sparse path by
/// hand, with every message readable (`message(r)`).
///
/// Every rank takes part in every collective whatever happened locally, so an error never leaves
/// a rank waiting: a rank without a message for the step (`reduce_failed`, `allgather_failed`)
/// makes every rank's step return `errc::peer_failed`; a message that any rank's aggregator
/// refuses (damaged bytes, another layout, another compressor's sections) makes every rank return
/// the refusal of the lowest such rank; `failed_rank()` names that rank on every rank.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend_memory.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "exchange_plan.hpp"

namespace gradcomp {
namespace comm {

namespace detail {

template <class T>
MPI_Datatype mpi_type() noexcept {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "the dense paths exchange float or double values");
  return std::is_same<T, float>::value ? MPI_FLOAT : MPI_DOUBLE;
}

// What a step of `mpi_exchange` does with the values it reduces: an aggregator's sums (`reduce`)
// or a dense tensor of the caller's (`allreduce_sum`). The dense values travel as bytes.
class reduction {
 public:
  virtual ~reduction() = default;
  virtual std::uint64_t elements() const = 0;
  virtual std::size_t value_bytes() const = 0;
  virtual MPI_Datatype type() const = 0;
  // An aggregator: begin, add one message / declare the sums added and finish.
  virtual bool aggregates() const = 0;
  virtual void begin() {}
  virtual errc add(span<const std::byte>) { return errc::invalid_argument; }
  virtual errc finish(std::size_t) { return errc::ok; }
  virtual errc set_added(std::size_t) { return errc::ok; }
  // The values, all of them one after the other, out of and back into their place.
  virtual void read(std::byte* out) = 0;
  virtual void write(const std::byte* in) = 0;
  // rank_order_sum over one share (bytes of the value type).
  virtual std::uint64_t sum_share(const std::byte* in, std::byte* out, std::uint64_t len, int ranks) const = 0;
  // The smallest failure key of this rank's own values (non-finite ones), for the library's order.
  virtual std::uint64_t check_own(int rank) const { return (void)rank, no_failure; }
};

template <class T>
class typed_reduction : public reduction {
 public:
  std::size_t value_bytes() const override { return sizeof(T); }
  MPI_Datatype type() const override { return mpi_type<T>(); }
  std::uint64_t sum_share(const std::byte* in, std::byte* out, std::uint64_t len, int ranks) const override {
    return sum_share_in_rank_order(reinterpret_cast<const T*>(in), reinterpret_cast<T*>(out), len, ranks);
  }
};

// An aggregator's sums, staged through the host when its backend's memory is elsewhere.
template <class Aggregator>
class aggregator_reduction final : public typed_reduction<typename Aggregator::value_type> {
  using T = typename Aggregator::value_type;

 public:
  explicit aggregator_reduction(Aggregator& agg) : agg_(agg) {
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) elements_ += agg_.update(t).size();
  }
  std::uint64_t elements() const override { return elements_; }
  bool aggregates() const override { return true; }
  void begin() override { agg_.begin(); }
  errc add(span<const std::byte> message) override {
    const auto r = agg_.add(message);
    return r ? errc::ok : r.error();
  }
  errc set_added(std::size_t n) override {
    const auto r = agg_.set_added(n);
    return r ? errc::ok : r.error();
  }
  errc finish(std::size_t n) override {
    const auto r = agg_.finish(n);
    return r ? errc::ok : r.error();
  }
  void read(std::byte* out) override {
    T* p = reinterpret_cast<T*>(out);
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) {
      const auto s = agg_.update(t);
      (void)copy_to_host(agg_.backend(), s, span<T>(p, s.size()));
      p += s.size();
    }
    synchronize(agg_.backend());
  }
  void write(const std::byte* in) override {
    const T* p = reinterpret_cast<const T*>(in);
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) {
      const auto s = agg_.sum(t);
      (void)copy_to_backend(agg_.backend(), span<const T>(p, s.size()), s);
      p += s.size();
    }
  }

 private:
  Aggregator& agg_;
  std::uint64_t elements_ = 0;
};

// A dense tensor of the caller's, summed in place.
template <class T>
class tensor_reduction final : public typed_reduction<T> {
 public:
  explicit tensor_reduction(span<T> data) : data_(data) {}
  std::uint64_t elements() const override { return data_.size(); }
  bool aggregates() const override { return false; }
  void read(std::byte* out) override {
    if (!data_.empty()) std::memcpy(out, data_.data(), data_.size() * sizeof(T));
  }
  void write(const std::byte* in) override {
    if (!data_.empty()) std::memcpy(data_.data(), in, data_.size() * sizeof(T));
  }
  std::uint64_t check_own(int rank) const override {
    for (const T x : data_)
      if (!finite_value(x)) return failure_key(rank, errc::non_finite_input);
    return no_failure;
  }

 private:
  span<T> data_;
};

}  // namespace detail

/**
 * @brief The messages of one step of every rank of a communicator, and their aggregation in rank
 * order into the same update on every rank; dense tensors summed across the ranks.
 *
 * A step is `reduce` (or `start_reduce` ... `wait`): the lengths every rank announces with
 * `MPI_Iallgather`, then, on the path `choose_path` gives for them (`path()`, automatic unless
 * set), either the bytes with `MPI_Iallgatherv` and every message added in rank order, or the
 * dense allreduce: each rank's own message added into its sums, the sums' shares exchanged with
 * `MPI_Ialltoallv`, each share summed in rank order by its rank, and the sums gathered with
 * `MPI_Iallgatherv`. An agreement (`MPI_Iallreduce`) on the lowest refused message ends both.
 * `allgather` then `aggregate` is the sparse path by hand; `allreduce_sum` sums a dense tensor.
 *
 * It works on its own duplicate of the communicator (so its collectives never match the
 * trainer's), with `MPI_ERRORS_RETURN`: a failed MPI call is `errc::comm_error`. Destroy it before
 * `MPI_Finalize`. Every rank must make the same calls in the same order, as with any collective.
 * Not thread-safe; one exchange in flight at a time.
 */
class mpi_exchange {
 public:
  /// Works on a duplicate of `comm` (collective over `comm`); `reduce` takes the path `path`
  /// gives (`choose_path`). Throws `gradcomp::error` (`errc::comm_error`) if MPI cannot duplicate
  /// the communicator.
  explicit mpi_exchange(MPI_Comm comm, exchange_path path = exchange_path::automatic) : path_(path) {
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
  /// How `reduce` moves a step's messages; every rank must use the same.
  exchange_path path() const noexcept { return path_; }
  /// Sets how the following steps' messages move (on every rank alike).
  void set_path(exchange_path p) noexcept { path_ = p; }
  /// The path the last step took: `allgather` or `allreduce` (`allgather` before any step).
  exchange_path last_path() const noexcept { return last_path_; }

  /**
   * @brief One whole step: sends `message` (this rank's encoded step), receives every rank's, and
   * aggregates them in rank order into `agg` (an `aggregator`, on any backend): `agg.begin()`,
   * every rank's message added, `agg.finish(size())`. Every rank's `agg` holds bitwise the update
   * one process adding the same messages in rank order computes, on either path.
   * @return `errc::peer_failed` (a rank had no message; `failed_rank()`), `errc::layout_mismatch`
   *         (the ranks' aggregators have different element counts), the refusal of the lowest
   *         rank whose message an aggregator refused (`failed_rank()`; on the dense path also
   *         `errc::state_overflow` where a sum leaves the finite range after that rank's
   *         message), `errc::size_overflow` (more than MPI counts), `errc::comm_error`. The same
   *         on every rank but `comm_error`; `finish` is not called then: apply no update.
   */
  template <class Aggregator>
  [[nodiscard]] result<void> reduce(span<const std::byte> message, Aggregator& agg) {
    start_reduce(message, agg);
    return wait();
  }
  /// Takes part in the step without a message (`why`: the reason, such as the refusal of the
  /// rank's step): every rank's `reduce` returns `errc::peer_failed`.
  template <class Aggregator>
  [[nodiscard]] result<void> reduce_failed(errc why, Aggregator& agg) {
    start_reduce_failed(why, agg);
    return wait();
  }
  /// Starts `reduce`; `message` and `agg` must stay valid, and neither be used, until `wait`
  /// returns. `test` lets the exchange progress: the aggregation runs in the calls that find its
  /// data arrived.
  template <class Aggregator>
  void start_reduce(span<const std::byte> message, Aggregator& agg) {
    begin(message, errc::ok, std::make_unique<detail::aggregator_reduction<Aggregator>>(agg), mode::reduce);
  }
  /// `start_reduce` without a message (see `reduce_failed`).
  template <class Aggregator>
  void start_reduce_failed(errc why, Aggregator& agg) {
    begin(span<const std::byte>(), why == errc::ok ? errc::peer_failed : why,
          std::make_unique<detail::aggregator_reduction<Aggregator>>(agg), mode::reduce);
  }

  /**
   * @brief Replaces `data` (the same length on every rank) with the sum of every rank's `data`,
   * added in `order`: `dense_order::rank_order` (a reduce-scatter by `MPI_Ialltoallv` and
   * `MPI_Iallgatherv`, each share summed in rank order: bitwise one process adding the ranks'
   * tensors in rank order) or `dense_order::library` (`MPI_Iallreduce`). For dense tensors sent
   * outside the compressed messages, and for a trainer's own dense rounds.
   * @return `errc::non_finite_input` (a rank's `data` holds a NaN or an infinity; with rank order
   *         `failed_rank()` is the lowest such rank), `errc::state_overflow` (a sum is not
   *         finite; with rank order `failed_rank()` is the rank after whose values it left the
   *         range, else -1), `errc::layout_mismatch` (the lengths differ; `failed_rank()`),
   *         `errc::size_overflow`, `errc::comm_error`; `data` is unchanged then.
   */
  template <class T>
  [[nodiscard]] result<void> allreduce_sum(span<T> data, dense_order order = dense_order::rank_order) {
    start_allreduce_sum(data, order);
    return wait();
  }
  /// Starts `allreduce_sum`; `data` must stay valid, and unused, until `wait` returns.
  template <class T>
  void start_allreduce_sum(span<T> data, dense_order order = dense_order::rank_order) {
    begin(span<const std::byte>(), errc::ok, std::make_unique<detail::tensor_reduction<T>>(data),
          order == dense_order::rank_order ? mode::allreduce : mode::library_allreduce);
  }

  /// Sends `message` (this rank's encoded step) and receives every rank's: `start` then `wait`.
  /// The sparse path by hand: read the messages with `message(r)`, add them with `aggregate`.
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
  void start(span<const std::byte> message) { begin(message, errc::ok, nullptr, mode::allgather); }
  /// `start` without a message (see `allgather_failed`).
  void start_failed(errc why) {
    begin(span<const std::byte>(), why == errc::ok ? errc::peer_failed : why, nullptr, mode::allgather);
  }

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
  /// Completes the exchange in flight and returns its outcome (see `reduce`, `allreduce_sum`,
  /// `allgather`): for an allgather `errc::peer_failed` when a rank had no message
  /// (`failed_rank()` names the lowest), `errc::size_overflow` when the messages together exceed
  /// 2^31 - 1 bytes, `errc::comm_error` when MPI failed; the same on every rank except for
  /// `comm_error`.
  [[nodiscard]] result<void> wait() {
    while (phase_ != phase::idle && phase_ != phase::done) {
      if (MPI_Wait(&request_, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        finish_with(errc::comm_error);
        break;
      }
      advance();
    }
    phase_ = phase::idle;
    work_.reset();
    if (status_ != errc::ok) return fail(status_);
    return {};
  }

  /// Rank `r`'s message of the last completed allgather (empty if it failed, and after a step
  /// that took the dense path); valid until the next `start`.
  span<const std::byte> message(int r) const noexcept {
    if (status_ != errc::ok || r < 0 || r >= size_ || counts_.size() != static_cast<std::size_t>(size_)) return {};
    const auto i = static_cast<std::size_t>(r);
    return span<const std::byte>(received_.data() + displs_[i], static_cast<std::size_t>(counts_[i]));
  }
  /// The lowest rank that had no message, whose message was refused or that made a sum leave the
  /// finite range, the same on every rank; -1 when none (or not known).
  int failed_rank() const noexcept { return failed_rank_; }

  /// Aggregates the last allgather's messages in rank order: `agg.begin()`, `agg.add(message(r))`
  /// for r = 0 .. size() - 1, then `agg.finish(size())`, so every rank computes bitwise the update
  /// a single process adding the same messages in that order computes. If any rank's aggregator
  /// refuses a message, every rank returns the refusal of the lowest such rank (`failed_rank()`)
  /// without `finish`: apply no update then. Returns the exchange's own error if it failed.
  template <class Aggregator>
  [[nodiscard]] result<void> aggregate(Aggregator& agg) {
    if (status_ != errc::ok) return fail(status_);
    if (counts_.size() != static_cast<std::size_t>(size_)) return fail(errc::invalid_argument);
    detail::aggregator_reduction<Aggregator> target(agg);
    const std::uint64_t key = add_in_rank_order(target);
    std::uint64_t lowest = key;
    if (MPI_Allreduce(&key, &lowest, 1, MPI_UINT64_T, MPI_MIN, comm_) != MPI_SUCCESS) return fail(errc::comm_error);
    if (lowest != detail::no_failure) {
      failed_rank_ = detail::failure_rank(lowest);
      return fail(detail::failure_code(lowest));
    }
    return agg.finish(static_cast<std::size_t>(size_));
  }

 private:
  enum class mode { allgather, reduce, allreduce, library_allreduce };
  // announcing -> gathering -> agreeing (allgather of a reduce step), or
  // announcing -> scattering -> agreeing -> collecting (the dense path), or
  // announcing -> summing -> agreeing (the library's allreduce).
  enum class phase { idle, announcing, gathering, scattering, summing, agreeing, collecting, done };

  void begin(span<const std::byte> message, errc why, std::unique_ptr<detail::reduction> work, mode m) {
    if (phase_ != phase::idle) (void)wait();
    mine_ = message;
    work_ = std::move(work);
    mode_ = m;
    status_ = errc::ok;
    failed_rank_ = -1;
    counts_.clear();
    last_path_ = m == mode::allgather ? exchange_path::allgather : exchange_path::allreduce;
    detail::announcement a;
    a.bytes = message.size();
    a.elements = work_ ? work_->elements() : 0;
    a.status = static_cast<std::uint32_t>(why);
    announcement_ = a;
    phase_ = phase::announcing;
    post(MPI_Iallgather(&announcement_, sizeof(detail::announcement), MPI_BYTE, announced_.data(),
                        sizeof(detail::announcement), MPI_BYTE, comm_, &request_));
  }

  // The request of the current phase has completed: take the next step, the same on every rank.
  void advance() {
    switch (phase_) {
      case phase::announcing: return announced();
      case phase::gathering:
        if (mode_ == mode::allgather) {
          phase_ = phase::done;
          return;
        }
        return agree(add_in_rank_order(*work_));
      case phase::scattering: {
        const std::uint64_t len = share_len(rank_);
        const std::size_t vb = work_->value_bytes();
        const std::uint64_t key =
            work_->sum_share(shares_.data(), sums_.data() + detail::share_begin(elements_, size_, rank_) * vb, len, size_);
        return agree(key < own_key_ ? key : own_key_);
      }
      case phase::summing: {
        std::uint64_t key = own_key_;
        if (!all_finite(sums_) && own_key_ == detail::no_failure) key = detail::failure_key(size_, errc::state_overflow);
        return agree(key);
      }
      case phase::agreeing: return agreed();
      case phase::collecting:
        work_->write(sums_.data());
        phase_ = phase::done;
        if (work_->aggregates()) {
          errc e = work_->set_added(static_cast<std::size_t>(size_));
          if (e == errc::ok) e = work_->finish(static_cast<std::size_t>(size_));
          status_ = e;
        }
        return;
      default: return;
    }
  }

  // Every rank's announcement is in: fail, or post the payloads on the step's path.
  void announced() {
    const errc verdict = detail::check_announcements(announced_, failed_rank_);
    if (verdict != errc::ok) return finish_with(verdict);
    elements_ = announced_[0].elements;
    if (mode_ == mode::reduce) {
      std::uint64_t total = 0;
      (void)detail::total_bytes(announced_, ~std::uint64_t(0), total);
      const std::uint64_t dense = elements_ <= ~std::uint64_t(0) / work_->value_bytes() ? elements_ * work_->value_bytes()
                                                                                       : ~std::uint64_t(0);
      last_path_ = choose_path(path_, total, dense, size_);
      if (last_path_ == exchange_path::allreduce && path_ == exchange_path::automatic && !dense_fits())
        last_path_ = exchange_path::allgather;  // more elements than MPI counts: the allgather then
    }
    if (mode_ == mode::allgather || (mode_ == mode::reduce && last_path_ == exchange_path::allgather))
      return gather_messages();
    if (!dense_fits()) return finish_with(errc::size_overflow);
    const std::size_t vb = work_->value_bytes();
    sums_.assign(static_cast<std::size_t>(elements_ * vb) + 1, std::byte{});  // never empty
    own_key_ = detail::no_failure;
    if (mode_ == mode::reduce) {
      work_->begin();
      const errc e = work_->add(mine_);
      if (e != errc::ok) own_key_ = detail::failure_key(rank_, e);
    } else {
      own_key_ = work_->check_own(rank_);
    }
    work_->read(sums_.data());
    if (mode_ == mode::library_allreduce) {
      phase_ = phase::summing;
      return post(MPI_Iallreduce(MPI_IN_PLACE, sums_.data(), static_cast<int>(elements_), work_->type(), MPI_SUM, comm_,
                                 &request_));
    }
    // Rank s sums share s: every rank sends it its piece of the share, and receives the pieces
    // of its own share, rank after rank.
    const std::uint64_t mine = share_len(rank_);
    shares_.assign(static_cast<std::size_t>(mine * static_cast<std::uint64_t>(size_) * vb) + 1, std::byte{});
    send_counts_.resize(static_cast<std::size_t>(size_));
    send_displs_.resize(static_cast<std::size_t>(size_));
    recv_counts_.resize(static_cast<std::size_t>(size_));
    recv_displs_.resize(static_cast<std::size_t>(size_));
    for (int s = 0; s < size_; ++s) {
      const auto i = static_cast<std::size_t>(s);
      send_counts_[i] = static_cast<int>(share_len(s));
      send_displs_[i] = static_cast<int>(detail::share_begin(elements_, size_, s));
      recv_counts_[i] = static_cast<int>(mine);
      recv_displs_[i] = static_cast<int>(mine * static_cast<std::uint64_t>(s));
    }
    phase_ = phase::scattering;
    post(MPI_Ialltoallv(sums_.data(), send_counts_.data(), send_displs_.data(), work_->type(), shares_.data(),
                        recv_counts_.data(), recv_displs_.data(), work_->type(), comm_, &request_));
  }

  void gather_messages() {
    const errc layout = detail::gather_layout(announced_, counts_, displs_);
    if (layout != errc::ok) {
      counts_.clear();
      return finish_with(layout);
    }
    // Never empty, so that MPI sees valid buffers when every message is.
    received_.resize(static_cast<std::size_t>(displs_.back()) + static_cast<std::size_t>(counts_.back()) + 1);
    phase_ = phase::gathering;
    static const std::byte nothing{};
    const void* send = mine_.empty() ? static_cast<const void*>(&nothing) : static_cast<const void*>(mine_.data());
    post(MPI_Iallgatherv(send, static_cast<int>(mine_.size()), MPI_BYTE, received_.data(), counts_.data(),
                         displs_.data(), MPI_BYTE, comm_, &request_));
  }

  // Posts the agreement on the lowest failure (`key`: this rank's).
  void agree(std::uint64_t key) {
    key_ = key;
    phase_ = phase::agreeing;
    post(MPI_Iallreduce(&key_, &agreed_key_, 1, MPI_UINT64_T, MPI_MIN, comm_, &request_));
  }

  void agreed() {
    if (agreed_key_ != detail::no_failure) {
      const int r = detail::failure_rank(agreed_key_);
      failed_rank_ = r < size_ ? r : -1;
      return finish_with(detail::failure_code(agreed_key_));
    }
    if (last_path_ == exchange_path::allgather) {  // a reduce step's messages are all added
      phase_ = phase::done;
      status_ = work_->finish(static_cast<std::size_t>(size_));
      return;
    }
    if (mode_ == mode::library_allreduce) {
      work_->write(sums_.data());
      phase_ = phase::done;
      return;
    }
    // Every share's sums, where the share starts (the counts and displacements of the scatter's
    // sends); this rank's are in place already.
    phase_ = phase::collecting;
    post(MPI_Iallgatherv(MPI_IN_PLACE, 0, work_->type(), sums_.data(), send_counts_.data(), send_displs_.data(),
                         work_->type(), comm_, &request_));
  }

  // Adds the last allgather's messages in rank order into `target` (begun); the failure key of
  // the first it refuses.
  std::uint64_t add_in_rank_order(detail::reduction& target) {
    target.begin();
    for (int r = 0; r < size_; ++r) {
      const errc e = target.add(message(r));
      if (e != errc::ok) return detail::failure_key(r, e);
    }
    return detail::no_failure;
  }

  std::uint64_t share_len(int r) const noexcept {
    return detail::share_begin(elements_, size_, r + 1) - detail::share_begin(elements_, size_, r);
  }
  // MPI counts elements in int: the dense path needs every count and displacement to fit.
  bool dense_fits() const noexcept {
    return elements_ + static_cast<std::uint64_t>(size_) <= static_cast<std::uint64_t>(INT_MAX);
  }
  // No value of `values` (elements_ of the work's type) is NaN or infinite: summed as the only
  // rank's share, in place.
  bool all_finite(std::vector<std::byte>& values) const {
    return work_->sum_share(values.data(), values.data(), elements_, 1) == detail::no_failure;
  }

  void post(int rc) {
    if (rc != MPI_SUCCESS) finish_with(errc::comm_error);
  }
  void finish_with(errc e) {
    status_ = e;
    phase_ = phase::done;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  exchange_path path_ = exchange_path::automatic;
  exchange_path last_path_ = exchange_path::allgather;
  mode mode_ = mode::allgather;
  phase phase_ = phase::idle;
  MPI_Request request_ = MPI_REQUEST_NULL;
  span<const std::byte> mine_;
  std::unique_ptr<detail::reduction> work_;
  detail::announcement announcement_;
  std::vector<detail::announcement> announced_;
  std::vector<int> counts_, displs_;
  std::vector<std::byte> received_;
  // The dense path: every value (this rank's, then the sums), this rank's share's pieces.
  std::uint64_t elements_ = 0;
  std::vector<std::byte> sums_, shares_;
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;
  std::uint64_t own_key_ = detail::no_failure, key_ = detail::no_failure, agreed_key_ = detail::no_failure;
  errc status_ = errc::ok;
  int failed_rank_ = -1;
};

}  // namespace comm
}  // namespace gradcomp
