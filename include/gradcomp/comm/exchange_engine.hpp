/// @file comm/exchange_engine.hpp
/// @brief `comm::exchange_engine`: the exchange of a step's messages among ranks, and of dense
/// tensors, written once over a transport (the collectives: MPI's in comm/mpi.hpp, NCCL's in
/// comm/nccl.hpp) and the memory its buffers live in (the host, or a Thrust backend's memory with
/// comm/thrust_memory.hpp), so that every exchange makes the same decisions
/// (comm/exchange_plan.hpp) in the same order.
///
/// Needs no communication library itself; use it through `comm::mpi_exchange` or
/// `comm::nccl_exchange`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../backend_memory.hpp"
#include "../cpu/dgc_kernels.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "exchange_plan.hpp"

namespace gradcomp {
namespace comm {

namespace detail {

// The value types the dense paths move.
enum class value_kind : std::uint8_t { f32, f64 };
template <class T>
constexpr value_kind kind_of() noexcept {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "the dense paths exchange float or double values");
  return std::is_same<T, float>::value ? value_kind::f32 : value_kind::f64;
}
constexpr std::size_t value_size(value_kind k) noexcept { return k == value_kind::f32 ? 4 : 8; }

// Where the exchange's buffers live, and what it does to values there: specialised for the host
// (cpu_backend) below and for thrust_backend<System> in comm/thrust_memory.hpp.
//   bytes: a byte buffer; ensure(memory, n) makes room for n bytes (contents not kept).
//   copy(memory, from, to, n): bytes within that memory.
//   sum_share<T>(memory, in, out, len, ranks): rank_order_sum over a share; the smallest key.
//   all_finite<T>(memory, p, n).
//   reduction_for<Aggregator>: what aggregates into an aggregator (see reduction).
template <class Memory>
struct exchange_memory;

// What a step does with the values it exchanges: an aggregator's sums (`reduce`) or a dense
// tensor of the caller's (`allreduce_sum`). Pointers are in the exchange's memory.
class reduction {
 public:
  virtual ~reduction() = default;
  virtual std::uint64_t elements() const = 0;
  virtual value_kind kind() const = 0;
  // An aggregator: begin; add one message; finish after every message was added, or after the
  // sums were formed by the dense path (`formed`: declared with set_added first).
  virtual bool aggregates() const { return false; }
  virtual void begin() {}
  virtual errc add(const std::byte*, std::uint64_t) { return errc::invalid_argument; }
  // Adds the messages of an allgatherv's buffer (rank r's: counts[r] bytes at displs[r]) in rank
  // order; the failure key of the first one refused, or no_failure. By default one add per
  // message up to the first refused; a reduction may add them all in one go (the later ones
  // then added too: the step fails either way).
  virtual std::uint64_t add_all(const std::byte* gathered, const std::vector<std::uint64_t>& counts,
                                const std::vector<std::uint64_t>& displs) {
    for (std::size_t r = 0; r < counts.size(); ++r) {
      const errc e = add(gathered + displs[r], counts[r]);
      if (e != errc::ok) return failure_key(static_cast<int>(r), e);
    }
    return no_failure;
  }
  virtual errc finish(std::size_t, bool formed) { return (void)formed, errc::ok; }
  // True when this reduction serves `target` (an aggregator's address) of type `tag` still.
  virtual bool serves(const void* target, const void* tag) const { return (void)target, (void)tag, false; }
  // The values, one after the other, out of and back into their place.
  virtual void read(std::byte* out) = 0;
  virtual void write(const std::byte* in) = 0;
  // rank_order_sum over one share; the smallest failure key.
  virtual std::uint64_t sum_share(const std::byte* in, std::byte* out, std::uint64_t len, int ranks) = 0;
  // The failure key of this rank's own values when one is not finite (a tensor's).
  virtual std::uint64_t check_own(int rank) { return (void)rank, no_failure; }
};

template <class Memory, class T>
class typed_reduction : public reduction {
 public:
  explicit typed_reduction(const Memory& memory) : memory_(memory) {}
  value_kind kind() const override { return kind_of<T>(); }
  std::uint64_t sum_share(const std::byte* in, std::byte* out, std::uint64_t len, int ranks) override {
    return exchange_memory<Memory>::template sum_share<T>(memory_, reinterpret_cast<const T*>(in),
                                                          reinterpret_cast<T*>(out), len, ranks);
  }

 protected:
  Memory memory_;
};

// A dense tensor of the caller's, in the exchange's memory, summed in place.
template <class Memory, class T>
class tensor_reduction final : public typed_reduction<Memory, T> {
  using mem = exchange_memory<Memory>;

 public:
  tensor_reduction(const Memory& memory, T* data, std::uint64_t n) : typed_reduction<Memory, T>(memory), data_(data), n_(n) {}
  std::uint64_t elements() const override { return n_; }
  void read(std::byte* out) override {
    mem::copy(this->memory_, reinterpret_cast<const std::byte*>(data_), out, n_ * sizeof(T));
  }
  void write(const std::byte* in) override {
    mem::copy(this->memory_, in, reinterpret_cast<std::byte*>(data_), n_ * sizeof(T));
  }
  std::uint64_t check_own(int rank) override {
    return mem::template all_finite<T>(this->memory_, data_, n_) ? no_failure : failure_key(rank, errc::non_finite_input);
  }

 private:
  T* data_;
  std::uint64_t n_;
};

// The address of a function of each type: a tag naming the type without RTTI.
template <class A>
void type_tag_function() {}
template <class A>
const void* type_tag() noexcept {
  return reinterpret_cast<const void*>(&type_tag_function<A>);
}

// An aggregator's sums through the host: messages and values in host memory, the sums in the
// aggregator's backend (copied through the host when that is elsewhere).
template <class Aggregator>
class host_aggregator_reduction final : public typed_reduction<cpu_backend, typename Aggregator::value_type> {
  using T = typename Aggregator::value_type;

 public:
  host_aggregator_reduction(Aggregator& agg, const cpu_backend&)
      : typed_reduction<cpu_backend, T>(cpu_backend{}), agg_(agg) {
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) elements_ += agg_.update(t).size();
  }
  std::uint64_t elements() const override { return elements_; }
  bool aggregates() const override { return true; }
  bool serves(const void* target, const void* tag) const override {
    return target == static_cast<const void*>(&agg_) && tag == type_tag<Aggregator>();
  }
  void begin() override { agg_.begin(); }
  errc add(const std::byte* message, std::uint64_t bytes) override {
    const auto r = agg_.add(span<const std::byte>(message, static_cast<std::size_t>(bytes)));
    return r ? errc::ok : r.error();
  }
  errc finish(std::size_t n, bool formed) override {
    if (formed)
      if (const auto r = agg_.set_added(n); !r) return r.error();
    const auto r = agg_.finish(n);
    return r ? errc::ok : r.error();
  }
  void read(std::byte* out) override {
    T* p = reinterpret_cast<T*>(out);
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) {
      const auto s = agg_.update(t);
      (void)gradcomp::copy_to_host(agg_.backend(), s, span<T>(p, s.size()));
      p += s.size();
    }
    gradcomp::synchronize(agg_.backend());
  }
  void write(const std::byte* in) override {
    const T* p = reinterpret_cast<const T*>(in);
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) {
      const auto s = agg_.sum(t);
      (void)gradcomp::copy_to_backend(agg_.backend(), span<const T>(p, s.size()), s);
      p += s.size();
    }
  }

 private:
  Aggregator& agg_;
  std::uint64_t elements_ = 0;
};

template <>
struct exchange_memory<cpu_backend> {
  class bytes {
   public:
    void ensure(const cpu_backend&, std::size_t n) {
      if (v_.size() < n) v_.resize(n);
    }
    std::byte* data() noexcept { return v_.data(); }
    const std::byte* data() const noexcept { return v_.data(); }

   private:
    std::vector<std::byte> v_;
  };
  static void copy(const cpu_backend&, const std::byte* from, std::byte* to, std::size_t n) {
    if (n != 0 && from != to) std::memmove(to, from, n);
  }
  template <class T>
  static std::uint64_t sum_share(const cpu_backend&, const T* in, T* out, std::uint64_t len, int ranks) {
    return sum_share_in_rank_order(in, out, len, ranks);
  }
  template <class T>
  static bool all_finite(const cpu_backend&, const T* p, std::uint64_t n) {
    return gradcomp::detail::cpu::all_finite(span<const T>(p, static_cast<std::size_t>(n)));
  }
  template <class Aggregator>
  using reduction_for = host_aggregator_reduction<Aggregator>;
};

}  // namespace detail

/**
 * @brief A step's messages of every rank, and their aggregation in rank order, over `Transport`
 * (the collectives) with buffers in `Memory` (`cpu_backend`: the host; or a `thrust_backend`).
 *
 * The common part of `comm::mpi_exchange` and `comm::nccl_exchange`; see `comm::mpi_exchange` for
 * what each call does. `Transport` posts one collective at a time on pointers of `Memory`'s
 * memory (the announcements and the agreement on host memory) and reports its completion:
 * `rank()`, `size()`, `count_limit()` (the largest count or displacement of one collective),
 * `announce`, `allgatherv` (bytes), `alltoallv` and `allgatherv_in_place` (values),
 * `allreduce_sum`, `allreduce_min` (one `uint64_t`), `test()` (1 complete, 0 not yet, -1
 * failed), `wait()` (false: failed); each post returns false when it failed.
 */
template <class Transport, class Memory = cpu_backend>
class exchange_engine {
  using mem = detail::exchange_memory<Memory>;
  using reduction = detail::reduction;
  using announcement = detail::announcement;
  static constexpr std::uint64_t no_failure = detail::no_failure;

 public:
  using memory_space = memory_space_t<Memory>;  ///< Where messages and dense tensors live.

  /// An exchange on `transport`, its buffers in `memory`'s memory.
  exchange_engine(Transport transport, exchange_path path, Memory memory = Memory{})
      : net_(std::move(transport)), memory_(memory), path_(path) {
    rank_ = net_.rank();
    size_ = net_.size();
    announced_.resize(static_cast<std::size_t>(size_));
  }
  /// Completes an exchange still in flight.
  ~exchange_engine() {
    if (phase_ != phase::idle) (void)wait();
  }
  exchange_engine(const exchange_engine&) = delete;
  exchange_engine& operator=(const exchange_engine&) = delete;

  /// This process's rank.
  int rank() const noexcept { return rank_; }
  /// The number of ranks.
  int size() const noexcept { return size_; }
  /// How `reduce` moves a step's messages; every rank must use the same.
  exchange_path path() const noexcept { return path_; }
  /// Sets how the following steps' messages move (on every rank alike).
  void set_path(exchange_path p) noexcept { path_ = p; }
  /// How `reduce`'s dense path adds the ranks' sums: `dense_order::rank_order` (the default:
  /// bitwise the allgather path's update) or `dense_order::library` (the transport's allreduce:
  /// faster, its bits the library's; a sum that leaves the finite range is then refused with
  /// `failed_rank()` -1). Every rank must use the same.
  dense_order dense_path_order() const noexcept { return dense_order_; }
  /// Sets how the following steps' dense paths add (on every rank alike).
  void set_dense_path_order(dense_order order) noexcept { dense_order_ = order; }
  /// The path the last step took: `allgather` or `allreduce` (`allgather` before any step).
  exchange_path last_path() const noexcept { return last_path_; }

  /**
   * @brief One whole step: sends `message` (this rank's encoded step), and aggregates every
   * rank's message in rank order into `agg` (an `aggregator`): `agg.begin()`, every rank's
   * message added, `agg.finish(size())`, on the path `choose_path` gives for the announced
   * lengths (`last_path()` says which). Every rank's `agg` then holds bitwise the update one
   * process adding the same messages in rank order computes, on either path.
   * @return `errc::peer_failed` (a rank had no message; `failed_rank()`), `errc::layout_mismatch`
   *         (the ranks' aggregators have different element counts; `failed_rank()`), the
   *         refusal of the lowest rank whose message an aggregator refused or after whose message
   *         a sum left the finite range (`errc::state_overflow`), with `failed_rank()`,
   *         `errc::size_overflow` (more than the transport counts), `errc::comm_error`. The same
   *         on every rank but `comm_error`; `agg` is not finished then: apply no update.
   */
  template <class Aggregator>
  [[nodiscard]] result<void> reduce(span<const std::byte, memory_space> message, Aggregator& agg) {
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
  /// Starts `reduce`; `message` and `agg` must stay valid, and unused, until `wait` returns.
  /// `test` lets the exchange progress; the aggregation runs in the call that finds its data in.
  template <class Aggregator>
  void start_reduce(span<const std::byte, memory_space> message, Aggregator& agg) {
    settle();
    begin(message, errc::ok, &target_for(agg), mode::reduce);
  }
  /// `start_reduce` without a message (see `reduce_failed`).
  template <class Aggregator>
  void start_reduce_failed(errc why, Aggregator& agg) {
    settle();
    begin(span<const std::byte, memory_space>(), why == errc::ok ? errc::peer_failed : why, &target_for(agg),
          mode::reduce);
  }

  /**
   * @brief Replaces `data` (the same length on every rank) with the sum of every rank's `data`,
   * added in `order`: `dense_order::rank_order` (a reduce-scatter and an allgather, each share
   * summed in rank order: bitwise one process adding the ranks' tensors in rank order) or
   * `dense_order::library` (the transport's own allreduce). For dense tensors sent outside the
   * compressed messages, and for a trainer's own dense rounds.
   * @return `errc::non_finite_input` (a rank's `data` holds a NaN or an infinity;
   *         `failed_rank()` is the lowest such rank), `errc::state_overflow` (a sum is not
   *         finite; with rank order `failed_rank()` is the rank after whose values it left the
   *         range, else -1), `errc::layout_mismatch` (the lengths differ; `failed_rank()`),
   *         `errc::size_overflow`, `errc::comm_error`; `data` is unchanged then.
   */
  template <class T>
  [[nodiscard]] result<void> allreduce_sum(span<T, memory_space> data, dense_order order = dense_order::rank_order) {
    start_allreduce_sum(data, order);
    return wait();
  }
  /// Starts `allreduce_sum`; `data` must stay valid, and unused, until `wait` returns.
  template <class T>
  void start_allreduce_sum(span<T, memory_space> data, dense_order order = dense_order::rank_order) {
    settle();
    tensor_ = std::make_unique<detail::tensor_reduction<Memory, T>>(memory_, data.data(), data.size());
    begin(span<const std::byte, memory_space>(), errc::ok, tensor_.get(),
          order == dense_order::rank_order ? mode::allreduce : mode::library_allreduce);
  }

  /// Sends `message` and receives every rank's (`message(r)`): `start` then `wait`. The
  /// allgather path by hand: add the messages with `aggregate`.
  [[nodiscard]] result<void> allgather(span<const std::byte, memory_space> message) {
    start(message);
    return wait();
  }
  /// Takes part in the allgather without a message: every rank's returns `errc::peer_failed`
  /// (`failed_rank()` names the lowest rank without one).
  [[nodiscard]] result<void> allgather_failed(errc why) {
    start_failed(why);
    return wait();
  }
  /// Starts the allgather of `message`, which must stay valid and unchanged until `wait`
  /// returns; the caller may compute meanwhile (`test` lets the transport progress and posts the
  /// next phase as soon as the previous one is complete).
  void start(span<const std::byte, memory_space> message) { begin(message, errc::ok, nullptr, mode::allgather); }
  /// `start` without a message.
  void start_failed(errc why) {
    begin(span<const std::byte, memory_space>(), why == errc::ok ? errc::peer_failed : why, nullptr, mode::allgather);
  }

  /// Lets the exchange progress without blocking; true when it is complete (then `wait`
  /// returns at once).
  [[nodiscard]] bool test() {
    for (;;) {
      if (phase_ == phase::idle || phase_ == phase::done) return true;
      const int state = net_.test();
      if (state < 0) {
        finish_with(errc::comm_error);
        return true;
      }
      if (state == 0) return false;
      advance();
    }
  }
  /// Completes the exchange in flight and returns its outcome (see `reduce`, `allreduce_sum`;
  /// an allgather: `errc::peer_failed`, `errc::size_overflow` when the messages together exceed
  /// what the transport counts, `errc::comm_error`), the same on every rank but `comm_error`.
  [[nodiscard]] result<void> wait() {
    while (phase_ != phase::idle && phase_ != phase::done) {
      if (!net_.wait()) {
        finish_with(errc::comm_error);
        break;
      }
      advance();
    }
    phase_ = phase::idle;
    work_ = nullptr;
    if (status_ != errc::ok) return fail(status_);
    return {};
  }

  /// Rank `r`'s message of the last completed allgather (empty if it failed, and after a step
  /// that took the dense path); valid until the next exchange starts.
  span<const std::byte, memory_space> message(int r) const noexcept {
    if (status_ != errc::ok || r < 0 || r >= size_ || counts_.size() != static_cast<std::size_t>(size_)) return {};
    const auto i = static_cast<std::size_t>(r);
    return span<const std::byte, memory_space>(received_.data() + displs_[i], static_cast<std::size_t>(counts_[i]));
  }
  /// The lowest rank that had no message, whose message was refused, or that made a sum leave
  /// the finite range, the same on every rank; -1 when none (or not known).
  int failed_rank() const noexcept { return failed_rank_; }

  /// Aggregates the last allgather's messages in rank order: `agg.begin()`, every `message(r)`
  /// added for r = 0 .. size() - 1, then `agg.finish(size())`. If any rank's aggregator refuses a
  /// message, every rank returns the refusal of the lowest such rank (`failed_rank()`) without
  /// `finish`: apply no update then. Returns the exchange's own error if it failed, and
  /// `errc::invalid_argument` when the last exchange was not a completed allgather.
  template <class Aggregator>
  [[nodiscard]] result<void> aggregate(Aggregator& agg) {
    if (status_ != errc::ok) return fail(status_);
    if (phase_ != phase::idle || counts_.size() != static_cast<std::size_t>(size_)) return fail(errc::invalid_argument);
    reduction& target = target_for(agg);
    key_ = add_in_rank_order(target);
    if (!net_.allreduce_min(&key_, &agreed_key_) || !net_.wait()) return fail(errc::comm_error);
    if (agreed_key_ != no_failure) {
      failed_rank_ = detail::failure_rank(agreed_key_);
      return fail(detail::failure_code(agreed_key_));
    }
    if (const errc e = target.finish(static_cast<std::size_t>(size_), false); e != errc::ok) return fail(e);
    return {};
  }

 protected:
  /// The transport.
  Transport& transport() noexcept { return net_; }
  /// The transport.
  const Transport& transport() const noexcept { return net_; }
  /// The memory backend.
  const Memory& memory() const noexcept { return memory_; }

 private:
  enum class mode { allgather, reduce, allreduce, library_allreduce };
  // announcing -> gathering [-> agreeing] (the allgather; agreeing for a reduce step), or
  // announcing -> scattering -> agreeing -> collecting (the dense path), or
  // announcing -> summing -> agreeing (the library's allreduce, of a tensor or of a dense path).
  enum class phase { idle, announcing, gathering, scattering, summing, agreeing, collecting, done };

  // The reduction that aggregates into `agg`: the one of the last steps when it serves `agg`.
  template <class Aggregator>
  reduction& target_for(Aggregator& agg) {
    if (!aggregation_ || !aggregation_->serves(&agg, detail::type_tag<Aggregator>()))
      aggregation_ = std::make_unique<typename mem::template reduction_for<Aggregator>>(agg, memory_);
    return *aggregation_;
  }

  // Completes an exchange still in flight (whose outcome the caller did not ask for), before
  // what it uses is replaced.
  void settle() {
    if (phase_ != phase::idle) (void)wait();
  }

  void begin(span<const std::byte, memory_space> message, errc why, reduction* work, mode m) {
    settle();
    mine_ = message;
    work_ = work;
    mode_ = m;
    status_ = errc::ok;
    failed_rank_ = -1;
    counts_.clear();
    last_path_ = m == mode::allgather ? exchange_path::allgather : exchange_path::allreduce;
    announcement a;
    a.bytes = message.size();
    a.elements = work_ != nullptr ? work_->elements() : 0;
    a.status = static_cast<std::uint32_t>(why);
    announcement_ = a;
    phase_ = phase::announcing;
    post(net_.announce(announcement_, announced_.data()));
  }

  // The collective of the current phase has completed: the next step, the same on every rank.
  void advance() {
    switch (phase_) {
      case phase::announcing: return announced();
      case phase::gathering:
        if (mode_ == mode::allgather) return finish_with(errc::ok);
        return agree(add_in_rank_order(*work_));
      case phase::scattering: {
        const std::uint64_t key = work_->sum_share(shares_.data(), sums_.data() + share_at(rank_) * value_bytes(),
                                                   share_len(rank_), size_);
        return agree(key < own_key_ ? key : own_key_);
      }
      case phase::summing: {
        std::uint64_t key = own_key_;
        if (key == no_failure && work_->sum_share(sums_.data(), sums_.data(), elements_, 1) != no_failure)
          key = detail::failure_key(size_, errc::state_overflow);  // a sum left the range: which rank, unknown
        return agree(key);
      }
      case phase::agreeing: return agreed();
      case phase::collecting:
        work_->write(sums_.data());
        return finish_with(work_->aggregates() ? work_->finish(static_cast<std::size_t>(size_), true) : errc::ok);
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
      const std::uint64_t most = ~std::uint64_t(0) / value_bytes();
      const std::uint64_t dense = elements_ <= most ? elements_ * value_bytes() : ~std::uint64_t(0);
      last_path_ = choose_path(path_, total, dense, size_);
      if (last_path_ == exchange_path::allreduce && path_ == exchange_path::automatic && !dense_fits())
        last_path_ = exchange_path::allgather;  // more values than one collective counts
    }
    if (mode_ == mode::allgather || (mode_ == mode::reduce && last_path_ == exchange_path::allgather))
      return gather_messages();
    if (!dense_fits()) return finish_with(errc::size_overflow);
    sums_.ensure(memory_, static_cast<std::size_t>(elements_ * value_bytes()) + 1);  // never empty
    own_key_ = no_failure;
    if (mode_ == mode::reduce) {
      work_->begin();
      const errc e = work_->add(mine_.data(), mine_.size());
      if (e != errc::ok) own_key_ = detail::failure_key(rank_, e);
    } else {
      own_key_ = work_->check_own(rank_);
    }
    work_->read(sums_.data());
    if (library_sum()) {
      phase_ = phase::summing;
      return post(net_.allreduce_sum(sums_.data(), elements_, work_->kind()));
    }
    // Rank s sums share s: every rank sends it its piece of the share, and receives the pieces
    // of its own share, rank after rank.
    const std::uint64_t mine = share_len(rank_);
    shares_.ensure(memory_, static_cast<std::size_t>(mine * static_cast<std::uint64_t>(size_) * value_bytes()) + 1);
    share_counts_.resize(static_cast<std::size_t>(size_));
    share_displs_.resize(static_cast<std::size_t>(size_));
    piece_counts_.assign(static_cast<std::size_t>(size_), mine);
    piece_displs_.resize(static_cast<std::size_t>(size_));
    for (int s = 0; s < size_; ++s) {
      const auto i = static_cast<std::size_t>(s);
      share_counts_[i] = share_len(s);
      share_displs_[i] = share_at(s);
      piece_displs_[i] = mine * static_cast<std::uint64_t>(s);
    }
    phase_ = phase::scattering;
    post(net_.alltoallv(sums_.data(), shares_.data(), work_->kind(), share_counts_, share_displs_, piece_counts_,
                        piece_displs_));
  }

  void gather_messages() {
    if (const errc e = detail::gather_layout(announced_, net_.count_limit(), counts_, displs_); e != errc::ok)
      return finish_with(e);
    const std::uint64_t total = displs_.back() + counts_.back();
    received_.ensure(memory_, static_cast<std::size_t>(total) + 1);  // never empty: valid buffers for the transport
    phase_ = phase::gathering;
    post(net_.allgatherv(mine_.data(), mine_.size(), received_.data(), counts_, displs_));
  }

  // Posts the agreement on the lowest failure (`key`: this rank's).
  void agree(std::uint64_t key) {
    key_ = key;
    phase_ = phase::agreeing;
    post(net_.allreduce_min(&key_, &agreed_key_));
  }

  void agreed() {
    if (agreed_key_ != no_failure) {
      const int r = detail::failure_rank(agreed_key_);
      failed_rank_ = r < size_ ? r : -1;
      return finish_with(detail::failure_code(agreed_key_));
    }
    if (mode_ == mode::reduce && last_path_ == exchange_path::allgather)  // every message added
      return finish_with(work_->finish(static_cast<std::size_t>(size_), false));
    if (library_sum()) {
      work_->write(sums_.data());
      return finish_with(work_->aggregates() ? work_->finish(static_cast<std::size_t>(size_), true) : errc::ok);
    }
    // Every share's sums where the share starts; this rank's are in place already.
    phase_ = phase::collecting;
    post(net_.allgatherv_in_place(sums_.data(), work_->kind(), share_counts_, share_displs_));
  }

  // Adds the last allgather's messages in rank order into `target`; the failure key of the
  // first it refuses.
  std::uint64_t add_in_rank_order(reduction& target) {
    target.begin();
    return target.add_all(received_.data(), counts_, displs_);
  }

  // The dense values are summed by the transport's allreduce (in its order), not share by share.
  bool library_sum() const noexcept {
    return mode_ == mode::library_allreduce || (mode_ == mode::reduce && dense_order_ == dense_order::library);
  }
  std::size_t value_bytes() const noexcept { return detail::value_size(work_->kind()); }
  std::uint64_t share_at(int r) const noexcept { return detail::share_begin(elements_, size_, r); }
  std::uint64_t share_len(int r) const noexcept { return share_at(r + 1) - share_at(r); }
  // Every count and displacement of the dense path within what one collective counts.
  bool dense_fits() const noexcept {
    const std::uint64_t limit = net_.count_limit();
    return elements_ <= limit && static_cast<std::uint64_t>(size_) <= limit - elements_;
  }

  void post(bool posted) {
    if (!posted) finish_with(errc::comm_error);
  }
  void finish_with(errc e) {
    status_ = e;
    phase_ = phase::done;
  }

  Transport net_;
  Memory memory_;
  int rank_ = 0;
  int size_ = 0;
  exchange_path path_ = exchange_path::automatic;
  dense_order dense_order_ = dense_order::rank_order;
  exchange_path last_path_ = exchange_path::allgather;
  mode mode_ = mode::allgather;
  phase phase_ = phase::idle;
  span<const std::byte, memory_space> mine_;
  reduction* work_ = nullptr;
  std::unique_ptr<reduction> aggregation_;  // kept from step to step for the same aggregator
  std::unique_ptr<reduction> tensor_;
  announcement announcement_;
  std::vector<announcement> announced_;
  std::vector<std::uint64_t> counts_, displs_;
  typename mem::bytes received_;
  // The dense path: every value (this rank's, then the sums), this rank's share's pieces.
  std::uint64_t elements_ = 0;
  typename mem::bytes sums_, shares_;
  std::vector<std::uint64_t> share_counts_, share_displs_, piece_counts_, piece_displs_;
  std::uint64_t own_key_ = no_failure, key_ = no_failure, agreed_key_ = no_failure;
  errc status_ = errc::ok;
  int failed_rank_ = -1;
};

}  // namespace comm
}  // namespace gradcomp
