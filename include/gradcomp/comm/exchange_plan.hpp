/// @file comm/exchange_plan.hpp
/// @brief What every exchange of gradcomp (`comm::mpi_exchange`, `comm::nccl_exchange`) decides
/// the same way, whatever carries the bytes: the announcement each rank makes before a step, the
/// verdict on the announcements, the choice between the sparse allgather and the dense
/// allreduce, the shares of a dense reduction, its summation in rank order, and the agreement on
/// the lowest failing rank.
///
/// Needs no communication library; the exchanges include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "../config.hpp"
#include "../error.hpp"

namespace gradcomp {
namespace comm {

/**
 * @brief How a step's messages travel between the ranks.
 *
 * The sparse allgather sends every rank's message to every rank: each receives the sum of the
 * others' lengths, which grows with the rank count. The dense allreduce sends each rank's decoded
 * contribution, reduced piece by piece (a reduce-scatter, then an allgather of the sums): each
 * rank receives 2 (N - 1) / N times the dense gradient's bytes, whatever N. Both add the
 * messages in rank order, so both give bitwise the same update (docs/scaling.md).
 */
enum class exchange_path : std::uint8_t {
  automatic,  ///< Per step, the one that moves fewer bytes (`choose_path`).
  allgather,  ///< Always the sparse allgather.
  allreduce   ///< Always the dense allreduce.
};

/// The order in which a dense allreduce adds the ranks' values.
enum class dense_order : std::uint8_t {
  rank_order,  ///< ((x_0 + x_1) + x_2) + ..., bitwise what one process adding them in rank order gets.
  library      ///< The communication library's own allreduce: fastest, its bits depend on the library.
};

/**
 * @brief The path of a step whose messages together have `message_bytes` bytes, among `ranks`
 * ranks whose dense update has `dense_bytes` bytes: the allreduce when `path` says so, or when
 * `path` is automatic and there are several ranks and the messages together exceed twice the
 * dense bytes (each rank then receives more through the allgather, (N - 1) / N of the messages'
 * total on average, than the allreduce's 2 (N - 1) / N of the dense bytes).
 */
constexpr exchange_path choose_path(exchange_path path, std::uint64_t message_bytes, std::uint64_t dense_bytes,
                                    int ranks) noexcept {
  if (path != exchange_path::automatic) return path;
  const bool dense = ranks > 1 && dense_bytes <= std::numeric_limits<std::uint64_t>::max() / 2 &&
                     message_bytes > 2 * dense_bytes;
  return dense ? exchange_path::allreduce : exchange_path::allgather;
}

namespace detail {

// What each rank announces before a step's payloads.
struct announcement {
  std::uint64_t bytes = 0;     // its message's length
  std::uint64_t elements = 0;  // the elements of its aggregator's sums (a reduction; 0 for a plain allgather)
  std::uint32_t status = 0;    // an errc: ok, or why the rank has no message
  std::uint32_t reserved = 0;
};

// The verdict on every rank's announcement, the same on every rank: the lowest rank without a
// message (peer_failed), else the lowest rank whose element count differs from rank 0's
// (layout_mismatch).
inline errc check_announcements(const std::vector<announcement>& a, int& failed_rank) {
  failed_rank = -1;
  for (std::size_t r = 0; r < a.size(); ++r)
    if (a[r].status != static_cast<std::uint32_t>(errc::ok)) {
      failed_rank = static_cast<int>(r);
      return errc::peer_failed;
    }
  for (std::size_t r = 1; r < a.size(); ++r)
    if (a[r].elements != a[0].elements) {
      failed_rank = static_cast<int>(r);
      return errc::layout_mismatch;
    }
  return errc::ok;
}

// The sum of the announced lengths; size_overflow beyond `limit`.
inline errc total_bytes(const std::vector<announcement>& a, std::uint64_t limit, std::uint64_t& total) {
  total = 0;
  for (const auto& x : a) {
    if (x.bytes > limit - total) return errc::size_overflow;
    total += x.bytes;
  }
  return errc::ok;
}

// Counts and displacements of an allgather of the announced lengths; size_overflow when their
// total exceeds `limit` (what one collective of the transport counts), nothing written then.
inline errc gather_layout(const std::vector<announcement>& a, std::uint64_t limit, std::vector<std::uint64_t>& counts,
                          std::vector<std::uint64_t>& displs) {
  std::uint64_t total = 0;
  if (const errc e = total_bytes(a, limit, total); e != errc::ok) return e;
  counts.resize(a.size());
  displs.resize(a.size());
  total = 0;
  for (std::size_t r = 0; r < a.size(); ++r) {
    displs[r] = total;
    counts[r] = a[r].bytes;
    total += a[r].bytes;
  }
  return errc::ok;
}

// The share of a dense reduction that rank r sums: elements [share_begin(r), share_begin(r + 1))
// of n, as even as the division allows.
constexpr std::uint64_t share_begin(std::uint64_t n, int ranks, int r) noexcept {
  return n / static_cast<std::uint64_t>(ranks) * static_cast<std::uint64_t>(r) +
         (n % static_cast<std::uint64_t>(ranks)) * static_cast<std::uint64_t>(r) / static_cast<std::uint64_t>(ranks);
}

// A failure every rank agrees on: the lowest failing rank, then the smallest error code; taken
// as the minimum of each rank's key over all ranks. `no_failure` is above every key.
constexpr std::uint64_t no_failure = std::numeric_limits<std::uint64_t>::max();
GRADCOMP_HD constexpr std::uint64_t failure_key(int rank, errc why) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)) << 32) | static_cast<std::uint32_t>(why);
}
GRADCOMP_HD constexpr int failure_rank(std::uint64_t key) noexcept { return static_cast<int>(key >> 32); }
GRADCOMP_HD constexpr errc failure_code(std::uint64_t key) noexcept { return static_cast<errc>(static_cast<std::uint32_t>(key)); }

// x is neither NaN nor infinite (also in device code, without <cmath>).
template <class T>
GRADCOMP_HD constexpr bool finite_value(T x) noexcept {
  return x - x == T(0);
}

// Element j of a share, summed in rank order: `in` holds the ranks' pieces of the share one after
// the other (rank r's element j at in[r * len + j]); writes ((in_0 + in_1) + in_2) + ... to
// out[j] and returns no_failure, or the failure key of the first rank whose value is not finite
// (non_finite_input) or after whose addition the sum is not (state_overflow).
template <class T>
struct rank_order_sum {
  const T* in;
  T* out;
  std::uint64_t len;
  int ranks;
  GRADCOMP_HD std::uint64_t operator()(std::uint64_t j) const {
    T s = in[j];
    std::uint64_t key = no_failure;
    if (!finite_value(s)) key = failure_key(0, errc::non_finite_input);
    for (int r = 1; r < ranks && key == no_failure; ++r) {
      const T x = in[static_cast<std::uint64_t>(r) * len + j];
      if (!finite_value(x)) {
        key = failure_key(r, errc::non_finite_input);
      } else {
        s += x;
        if (!finite_value(s)) key = failure_key(r, errc::state_overflow);
      }
    }
    out[j] = s;
    return key;
  }
};

// A whole share summed on the host; the smallest failure key of its elements.
template <class T>
std::uint64_t sum_share_in_rank_order(const T* in, T* out, std::uint64_t len, int ranks) {
  const rank_order_sum<T> f{in, out, len, ranks};
  std::uint64_t key = no_failure;
  for (std::uint64_t j = 0; j < len; ++j) {
    const std::uint64_t k = f(j);
    if (k < key) key = k;
  }
  return key;
}

}  // namespace detail
}  // namespace comm
}  // namespace gradcomp
