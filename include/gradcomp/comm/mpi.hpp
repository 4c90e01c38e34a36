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
#include <vector>

#include "../backend.hpp"
#include "../error.hpp"
#include "exchange_engine.hpp"
#include "exchange_plan.hpp"

namespace gradcomp {
namespace comm {

namespace detail {

inline MPI_Datatype mpi_type(value_kind k) noexcept { return k == value_kind::f32 ? MPI_FLOAT : MPI_DOUBLE; }

// MPI's collectives for exchange_engine, on a duplicate of the communicator with
// MPI_ERRORS_RETURN; counts are int.
class mpi_transport {
 public:
  explicit mpi_transport(MPI_Comm comm) {
    if (MPI_Comm_dup(comm, &comm_) != MPI_SUCCESS) throw gradcomp::error(errc::comm_error, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  mpi_transport(mpi_transport&& o) noexcept : comm_(o.comm_), rank_(o.rank_), size_(o.size_) { o.comm_ = MPI_COMM_NULL; }
  mpi_transport(const mpi_transport&) = delete;
  mpi_transport& operator=(const mpi_transport&) = delete;
  mpi_transport& operator=(mpi_transport&&) = delete;
  ~mpi_transport() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  MPI_Comm comm() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::uint64_t count_limit() const noexcept { return static_cast<std::uint64_t>(INT_MAX); }

  bool announce(const announcement& mine, announcement* all) {
    return ok(MPI_Iallgather(&mine, sizeof(announcement), MPI_BYTE, all, sizeof(announcement), MPI_BYTE, comm_, &request_));
  }
  bool allgatherv(const std::byte* send, std::uint64_t n, std::byte* recv, const std::vector<std::uint64_t>& counts,
                  const std::vector<std::uint64_t>& displs) {
    static const std::byte nothing{};
    const void* from = n == 0 ? static_cast<const void*>(&nothing) : static_cast<const void*>(send);
    ints(counts, a_);
    ints(displs, b_);
    return ok(MPI_Iallgatherv(from, static_cast<int>(n), MPI_BYTE, recv, a_.data(), b_.data(), MPI_BYTE, comm_, &request_));
  }
  bool alltoallv(const std::byte* send, std::byte* recv, value_kind k, const std::vector<std::uint64_t>& send_counts,
                 const std::vector<std::uint64_t>& send_displs, const std::vector<std::uint64_t>& recv_counts,
                 const std::vector<std::uint64_t>& recv_displs) {
    ints(send_counts, a_);
    ints(send_displs, b_);
    ints(recv_counts, c_);
    ints(recv_displs, d_);
    return ok(MPI_Ialltoallv(send, a_.data(), b_.data(), mpi_type(k), recv, c_.data(), d_.data(), mpi_type(k), comm_,
                             &request_));
  }
  bool allgatherv_in_place(std::byte* buf, value_kind k, const std::vector<std::uint64_t>& counts,
                           const std::vector<std::uint64_t>& displs) {
    ints(counts, a_);
    ints(displs, b_);
    return ok(MPI_Iallgatherv(MPI_IN_PLACE, 0, mpi_type(k), buf, a_.data(), b_.data(), mpi_type(k), comm_, &request_));
  }
  bool allreduce_sum(std::byte* buf, std::uint64_t n, value_kind k) {
    return ok(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), mpi_type(k), MPI_SUM, comm_, &request_));
  }
  bool allreduce_min(const std::uint64_t* mine, std::uint64_t* out) {
    return ok(MPI_Iallreduce(mine, out, 1, MPI_UINT64_T, MPI_MIN, comm_, &request_));
  }
  int test() {
    int flag = 0;
    if (MPI_Test(&request_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return -1;
    return flag != 0 ? 1 : 0;
  }
  bool wait() { return MPI_Wait(&request_, MPI_STATUS_IGNORE) == MPI_SUCCESS; }

 private:
  // The engine keeps every count and displacement within count_limit().
  static void ints(const std::vector<std::uint64_t>& v, std::vector<int>& out) {
    out.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<int>(v[i]);
  }
  static bool ok(int rc) noexcept { return rc == MPI_SUCCESS; }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<int> a_, b_, c_, d_;  // the counts and displacements of the collective in flight
};

}  // namespace detail

/**
 * @brief The messages of one step of every rank of an MPI communicator, and their aggregation in
 * rank order into the same update on every rank; dense tensors summed across the ranks.
 *
 * A step is `reduce` (or `start_reduce` ... `wait`): the lengths every rank announces
 * (`MPI_Iallgather`), then, on the path `choose_path` gives for them (`path()`, automatic unless
 * set), either the bytes (`MPI_Iallgatherv`) and every message added in rank order, or the dense
 * allreduce: each rank's own message added into its sums, the sums' shares exchanged
 * (`MPI_Ialltoallv`), each share summed in rank order by its rank, and the sums gathered
 * (`MPI_Iallgatherv`). An agreement on the lowest refused message (`MPI_Iallreduce`) ends both.
 * `allgather` then `aggregate` is the sparse path by hand; `allreduce_sum` sums a dense tensor.
 * The calls are those of `exchange_engine`.
 *
 * It works on its own duplicate of the communicator (so its collectives never match the
 * trainer's), with `MPI_ERRORS_RETURN`: a failed MPI call is `errc::comm_error`. Destroy it before
 * `MPI_Finalize`. Every rank must make the same calls in the same order, as with any collective.
 * Not thread-safe; one exchange in flight at a time.
 *
 * `Memory` is where messages and dense tensors are: the host (`cpu_backend`, `mpi_exchange`), or
 * a `thrust_backend` whose memory MPI can read (include comm/thrust_memory.hpp; the host systems,
 * or the CUDA system with a CUDA-aware MPI), whose aggregators then add the messages where they
 * are, as `nccl_exchange` does.
 */
template <class Memory = cpu_backend>
class basic_mpi_exchange : public exchange_engine<detail::mpi_transport, Memory> {
 public:
  /// Works on a duplicate of `comm` (collective over `comm`); `reduce` takes the path `path`
  /// gives (`choose_path`); buffers in `memory`'s memory. Throws `gradcomp::error`
  /// (`errc::comm_error`) if MPI cannot duplicate the communicator.
  explicit basic_mpi_exchange(MPI_Comm comm, exchange_path path = exchange_path::automatic, Memory memory = Memory{})
      : exchange_engine<detail::mpi_transport, Memory>(detail::mpi_transport(comm), path, memory) {}

  /// The duplicate communicator the exchange runs on.
  MPI_Comm communicator() const noexcept { return this->transport().comm(); }
};

/// The MPI exchange of messages and tensors in host memory (see `basic_mpi_exchange`).
using mpi_exchange = basic_mpi_exchange<cpu_backend>;

}  // namespace comm
}  // namespace gradcomp
