/// @file comm/thrust_memory.hpp
/// @brief The exchanges with their buffers in a Thrust backend's memory: messages and dense
/// tensors stay there, and an `aggregator` on that backend adds every message where it is
/// (`wire::device_accumulator`), without the host reading a byte of it.
///
/// What `comm::nccl_exchange` runs on the GPU (the CUDA system); with a host system (OpenMP, C++)
/// and `comm::basic_mpi_exchange` the same code runs under MPI on the CPU, which is how gradcomp's
/// tests cover it. This header includes Thrust; the umbrella header does not include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include <thrust/copy.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/logical.h>
#include <thrust/transform_reduce.h>

#include "../backend_memory.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "../thrust/system_backend.hpp"
#include "../thrust/system_memory.hpp"
#include "../thrust/wire_decode.hpp"
#include "exchange_engine.hpp"
#include "exchange_plan.hpp"

namespace gradcomp {
namespace comm {
namespace detail {

template <class T>
struct finite_op {
  GRADCOMP_HD bool operator()(T x) const { return finite_value(x); }
};

// An aggregator on thrust_backend<System> whose messages are in that backend's memory: each is
// decoded and added there by a device_accumulator over the aggregator's sums (every check of the
// host decoder, every tensor in the form the layout gives it, no sum may overflow), its verdict
// read back. The sums are
// then declared (aggregator::set_added) before finish.
template <class Aggregator, class System>
class device_aggregator_reduction final : public typed_reduction<thrust_backend<System>, typename Aggregator::value_type> {
  using T = typename Aggregator::value_type;
  using backend = thrust_backend<System>;
  using space = thrust_space<System>;
  static_assert(std::is_same<typename Aggregator::backend_type, backend>::value,
                "an exchange in a Thrust backend's memory aggregates into an aggregator on that backend");

 public:
  // The most decoder workspace add_all sets up for the ranks' messages at once (bytes).
  static constexpr std::uint64_t default_workspace_budget = std::uint64_t(256) << 20;

  device_aggregator_reduction(Aggregator& agg, const backend& on,
                              std::uint64_t workspace_budget = default_workspace_budget)
      : typed_reduction<backend, T>(on),
        agg_(agg),
        outcome_(gradcomp::allocate_buffer<std::uint64_t>(on, 2)),
        workspace_budget_(workspace_budget) {
    for (std::size_t t = 0; t < agg_.num_tensors(); ++t) {
      sums_.push_back(agg_.sum(t));
      forms_.push_back(agg_.dense(t) ? 1 : 0);
      elements_ += sums_.back().size();
    }
  }
  std::uint64_t elements() const override { return elements_; }
  bool aggregates() const override { return true; }
  bool serves(const void* target, const void* tag) const override {
    if (target != static_cast<const void*>(&agg_) || tag != type_tag<Aggregator>()) return false;
    for (std::size_t t = 0; t < sums_.size(); ++t)
      if (agg_.sum(t).data() != sums_[t].data()) return false;
    return true;
  }
  void begin() override { agg_.begin(); }
  errc add(const std::byte* message, std::uint64_t bytes) override {
    if (const errc e = ensure(bytes, 1); e != errc::ok) return e;
    const auto issued =
        accumulator_->accumulate(this->memory_, span<const std::byte, space>(message, static_cast<std::size_t>(bytes)),
                                 outcome_.view());
    if (!issued) return issued.error();
    std::uint64_t verdict[2] = {0, 0};
    (void)gradcomp::copy_to_host(this->memory_, readonly(outcome_.view()), span<std::uint64_t>(verdict, 2));
    gradcomp::synchronize(this->memory_);
    return static_cast<errc>(verdict[0]);
  }
  // Every rank's message in one accumulate_all call (a fixed number of launches, whatever the
  // ranks) and one read of the verdicts; the sums and verdicts are those of add in rank order.
  // The decoder's workspace is 8 bytes per byte of each message it takes at once: where the
  // ranks' messages would need more than the budget, they go in groups of consecutive
  // ranks, one call each (calls in rank order add up as one).
  std::uint64_t add_all(const std::byte* gathered, const std::vector<std::uint64_t>& counts,
                        const std::vector<std::uint64_t>& displs) override {
    // The ranks before the first whose message no decoder takes (add's workspace_too_small there,
    // once the ranks before it are added).
    const std::size_t all = counts.size();
    std::size_t n = 0;
    while (n < all && counts[n] <= wire::device_accumulator<T, backend>::capacity_limit) ++n;
    const std::uint64_t beyond = n < all ? failure_key(static_cast<int>(n), errc::workspace_too_small) : no_failure;
    if (n == 0) return beyond;
    std::uint64_t longest = 0, total = 0;
    for (std::size_t r = 0; r < n; ++r) {
      longest = std::max(longest, counts[r]);
      total = std::max(total, displs[r] + counts[r]);
    }
    const std::uint64_t group = std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(n, workspace_budget_ / (8 * (std::max<std::uint64_t>(longest, 4096) + 1))));
    if (const errc e = ensure(longest, group); e != errc::ok) return failure_key(0, e);
    // Where each message is and how long: one upload; the verdicts: one read per group.
    std::vector<std::uint64_t> layout(displs.begin(), displs.begin() + static_cast<std::ptrdiff_t>(n));
    layout.insert(layout.end(), counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(n));
    if (layout_.size() < 2 * n) layout_ = gradcomp::allocate_buffer<std::uint64_t>(this->memory_, 2 * n);
    if (outcome_.size() < 2 * n) outcome_ = gradcomp::allocate_buffer<std::uint64_t>(this->memory_, 2 * n);
    if (!gradcomp::copy_to_backend(this->memory_, span<const std::uint64_t>(layout.data(), layout.size()),
                                   layout_.view().first(2 * n)))
      return failure_key(0, errc::device_error);
    const auto where = readonly(layout_.view());
    const span<const std::byte, space> bytes(gathered, static_cast<std::size_t>(total));
    std::vector<std::uint64_t> verdicts(2 * n);
    for (std::size_t first = 0; first < n; first += group) {
      const std::size_t m = static_cast<std::size_t>(std::min<std::uint64_t>(group, n - first));
      const auto issued = accumulator_->accumulate_all(this->memory_, bytes, where.subspan(first, m),
                                                       where.subspan(n + first, m), outcome_.view().subspan(2 * first, 2 * m));
      if (!issued) return failure_key(static_cast<int>(first), issued.error());
      (void)gradcomp::copy_to_host(this->memory_, readonly(outcome_.view()).subspan(2 * first, 2 * m),
                                   span<std::uint64_t>(verdicts.data() + 2 * first, 2 * m));
      gradcomp::synchronize(this->memory_);
      for (std::size_t r = first; r < first + m; ++r)
        if (verdicts[2 * r] != 0) return failure_key(static_cast<int>(r), static_cast<errc>(verdicts[2 * r]));
    }
    return beyond;
  }
  errc finish(std::size_t n, bool) override {
    // The sums were formed by the accumulator (or the dense path), not by aggregator::add.
    if (const auto r = agg_.set_added(n); !r) return r.error();
    const auto r = agg_.finish(n);
    return r ? errc::ok : r.error();
  }
  void read(std::byte* out) override {
    T* p = reinterpret_cast<T*>(out);
    for (const auto& s : sums_) {
      copy_values(s.data(), p, s.size());
      p += s.size();
    }
  }
  void write(const std::byte* in) override {
    const T* p = reinterpret_cast<const T*>(in);
    for (const auto& s : sums_) {
      copy_values(p, s.data(), s.size());
      p += s.size();
    }
  }

 private:
  // A decoder for `messages` messages of up to `bytes` each, with room to grow: a workspace is
  // set up rarely, not every step.
  errc ensure(std::uint64_t bytes, std::uint64_t messages) {
    if (accumulator_ && accumulator_->max_message_bytes() >= bytes && accumulator_->max_messages() >= messages)
      return errc::ok;
    const std::uint64_t limit = wire::device_accumulator<T, backend>::capacity_limit;
    if (bytes > limit) return errc::workspace_too_small;
    const std::uint64_t have = accumulator_ ? accumulator_->max_message_bytes() : 0;
    const std::uint64_t want = std::min(limit, std::max<std::uint64_t>({bytes, 2 * have, 4096}));
    const std::uint64_t count = messages;  // not more: the workspace grows with the bytes
    wire::device_accumulate_options opt;
    opt.check_sums = true;
    opt.every_tensor = true;
    opt.kind = agg_.message_kind();
    accumulator_.reset();
    accumulator_ = std::make_unique<wire::device_accumulator<T, backend>>(
        this->memory_, span<const span<T, space>>(sums_.data(), sums_.size()), want, opt,
        span<const std::uint8_t>(forms_.data(), forms_.size()), count);
    return errc::ok;
  }

  void copy_values(const T* from, T* to, std::size_t n) const {
    if (n != 0) thrust::copy_n(gradcomp::detail::thrust_impl::exec<System>(this->memory_.stream), from, n, to);
  }

  Aggregator& agg_;
  std::vector<span<T, space>> sums_;
  std::vector<std::uint8_t> forms_;  // 1: the layout's dense tensors
  std::uint64_t elements_ = 0;
  backend_buffer<std::uint64_t, backend> outcome_;
  backend_buffer<std::uint64_t, backend> layout_;  // each message's offset, then each one's length
  std::uint64_t workspace_budget_;
  std::unique_ptr<wire::device_accumulator<T, backend>> accumulator_;
};

// Buffers and values in thrust_backend<System>'s memory, worked on by System's algorithms on the
// backend's stream.
template <class System>
struct exchange_memory<thrust_backend<System>> {
  using backend = thrust_backend<System>;
  class bytes {
   public:
    void ensure(const backend& on, std::size_t n) {
      if (buffer_.size() < n) buffer_ = gradcomp::allocate_buffer<std::byte>(on, n);
    }
    std::byte* data() noexcept { return buffer_.view().data(); }
    const std::byte* data() const noexcept { return buffer_.view().data(); }

   private:
    backend_buffer<std::byte, backend> buffer_;
  };
  static void copy(const backend& on, const std::byte* from, std::byte* to, std::size_t n) {
    if (n == 0 || from == to) return;
    const auto* f = reinterpret_cast<const unsigned char*>(from);
    thrust::copy_n(gradcomp::detail::thrust_impl::exec<System>(on.stream), f, n, reinterpret_cast<unsigned char*>(to));
  }
  template <class T>
  static std::uint64_t sum_share(const backend& on, const T* in, T* out, std::uint64_t len, int ranks) {
    if (len == 0) return no_failure;
    const thrust::counting_iterator<std::uint64_t> first(0);
    return thrust::transform_reduce(gradcomp::detail::thrust_impl::exec<System>(on.stream), first, first + len,
                                    rank_order_sum<T>{in, out, len, ranks}, no_failure, thrust::minimum<std::uint64_t>());
  }
  template <class T>
  static bool all_finite(const backend& on, const T* p, std::uint64_t n) {
    return n == 0 || thrust::all_of(gradcomp::detail::thrust_impl::exec<System>(on.stream), p, p + n, finite_op<T>{});
  }
  template <class Aggregator>
  using reduction_for = device_aggregator_reduction<Aggregator, System>;
};

}  // namespace detail
}  // namespace comm
}  // namespace gradcomp
