/// @file comm/nccl.hpp
/// @brief `comm::nccl_exchange`: the exchange of `comm::mpi_exchange` for messages and tensors in
/// GPU memory, over NCCL, on the stream the trainer's work runs on.
///
/// An optional header for CUDA code compiled by nvcc: it includes `<nccl.h>`, the CUDA runtime and
/// Thrust; link NCCL (`-lnccl`) and the CUDA runtime. It needs one GPU per rank (NCCL does not
/// run two ranks of a communicator on one GPU), so its collectives only run where several GPUs
/// are; everything it decides is `exchange_engine`'s, which the MPI tests run on the CPU with the
/// same memory code (comm/thrust_memory.hpp on Thrust's OpenMP system).
///
/// One step on every rank, with the messages the CUDA backend encodes in GPU memory and an
/// `aggregator<float, thrust_backend<thrust::system::cuda::tag>>` `agg`:
/// @code
/// gradcomp::comm::nccl_exchange ex(comm, gradcomp::thrust_backend<thrust::system::cuda::tag>{}.on(stream));
/// ex.reduce(device_message, agg).value();   // every rank's message added in rank order, on the GPU
/// @endcode
///
/// NCCL has no allgatherv: after the lengths (an `ncclAllGather` of every rank's announcement),
/// the messages move either as one grouped `ncclSend`/`ncclRecv` per peer of exactly their bytes
/// (`nccl_gather::grouped`, the default), or as one `ncclAllGather` of the longest message's
/// length from every rank, compacted afterwards (`nccl_gather::padded`). The dense path's
/// reduce-scatter and gather are grouped sends and receives; `dense_order::library` is
/// `ncclAllReduce`.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <thrust/system/cuda/execution_policy.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "../error.hpp"
#include "../thrust/system_backend.hpp"
#include "exchange_engine.hpp"
#include "exchange_plan.hpp"
#include "thrust_memory.hpp"

namespace gradcomp {
namespace comm {

/// How `nccl_exchange` gathers messages of different lengths.
enum class nccl_gather : std::uint8_t {
  grouped,  ///< One grouped send and receive per peer of exactly its message's bytes.
  padded    ///< One `ncclAllGather` of the longest message's length from every rank, then compacted.
};

namespace detail {

inline ncclDataType_t nccl_type(value_kind k) noexcept { return k == value_kind::f32 ? ncclFloat32 : ncclFloat64; }

// NCCL's collectives for exchange_engine, on the stream of the exchange's backend; the
// announcements and the agreement travel through a small buffer on the GPU.
class nccl_transport {
 public:
  nccl_transport(ncclComm_t comm, cudaStream_t stream, nccl_gather gather) : comm_(comm), stream_(stream), gather_(gather) {
    if (ncclCommUserRank(comm_, &rank_) != ncclSuccess || ncclCommCount(comm_, &size_) != ncclSuccess)
      throw gradcomp::error(errc::comm_error, "ncclCommUserRank / ncclCommCount");
    const std::size_t bytes = (static_cast<std::size_t>(size_) + 1) * sizeof(announcement) + 2 * sizeof(std::uint64_t);
    if (cudaMalloc(&scratch_, bytes) != cudaSuccess) throw gradcomp::error(errc::device_error, "cudaMalloc");
  }
  nccl_transport(nccl_transport&& o) noexcept
      : comm_(o.comm_), stream_(o.stream_), gather_(o.gather_), rank_(o.rank_), size_(o.size_), scratch_(o.scratch_),
        padded_(o.padded_), padded_bytes_(o.padded_bytes_) {
    o.scratch_ = nullptr;
    o.padded_ = nullptr;
  }
  nccl_transport(const nccl_transport&) = delete;
  nccl_transport& operator=(const nccl_transport&) = delete;
  nccl_transport& operator=(nccl_transport&&) = delete;
  ~nccl_transport() {
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (padded_ != nullptr) cudaFree(padded_);
  }

  ncclComm_t comm() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // NCCL counts in size_t; the limit keeps every count times a value's size (8) and plus the
  // rank count within 64 bits.
  std::uint64_t count_limit() const noexcept { return std::numeric_limits<std::uint64_t>::max() / 16; }

  bool announce(const announcement& mine, announcement* all) {
    auto* dev = static_cast<announcement*>(scratch_);  // [0, size): everyone's; [size]: mine
    const std::size_t n = static_cast<std::size_t>(size_);
    return cuda(cudaMemcpyAsync(dev + n, &mine, sizeof(announcement), cudaMemcpyHostToDevice, stream_)) &&
           nccl(ncclAllGather(dev + n, dev, sizeof(announcement), ncclUint8, comm_, stream_)) &&
           cuda(cudaMemcpyAsync(all, dev, n * sizeof(announcement), cudaMemcpyDeviceToHost, stream_));
  }
  bool allgatherv(const std::byte* send, std::uint64_t n, std::byte* recv, const std::vector<std::uint64_t>& counts,
                  const std::vector<std::uint64_t>& displs) {
    if (gather_ == nccl_gather::padded) return padded_allgatherv(send, n, recv, counts, displs);
    bool ok = nccl(ncclGroupStart());
    for (int p = 0; p < size_ && ok; ++p) {
      if (p == rank_) continue;
      const auto i = static_cast<std::size_t>(p);
      if (n != 0) ok = nccl(ncclSend(send, n, ncclUint8, p, comm_, stream_));
      if (ok && counts[i] != 0) ok = nccl(ncclRecv(recv + displs[i], counts[i], ncclUint8, p, comm_, stream_));
    }
    ok = nccl(ncclGroupEnd()) && ok;
    return ok && copy(recv + displs[static_cast<std::size_t>(rank_)], send, n);
  }
  bool alltoallv(const std::byte* send, std::byte* recv, value_kind k, const std::vector<std::uint64_t>& send_counts,
                 const std::vector<std::uint64_t>& send_displs, const std::vector<std::uint64_t>& recv_counts,
                 const std::vector<std::uint64_t>& recv_displs) {
    const std::size_t vs = value_size(k);
    bool ok = nccl(ncclGroupStart());
    for (int p = 0; p < size_ && ok; ++p) {
      if (p == rank_) continue;
      const auto i = static_cast<std::size_t>(p);
      if (send_counts[i] != 0)
        ok = nccl(ncclSend(send + send_displs[i] * vs, send_counts[i], nccl_type(k), p, comm_, stream_));
      if (ok && recv_counts[i] != 0)
        ok = nccl(ncclRecv(recv + recv_displs[i] * vs, recv_counts[i], nccl_type(k), p, comm_, stream_));
    }
    ok = nccl(ncclGroupEnd()) && ok;
    const auto me = static_cast<std::size_t>(rank_);
    return ok && copy(recv + recv_displs[me] * vs, send + send_displs[me] * vs, send_counts[me] * vs);
  }
  bool allgatherv_in_place(std::byte* buf, value_kind k, const std::vector<std::uint64_t>& counts,
                           const std::vector<std::uint64_t>& displs) {
    const std::size_t vs = value_size(k);
    const auto me = static_cast<std::size_t>(rank_);
    bool ok = nccl(ncclGroupStart());
    for (int p = 0; p < size_ && ok; ++p) {
      if (p == rank_) continue;
      const auto i = static_cast<std::size_t>(p);
      if (counts[me] != 0) ok = nccl(ncclSend(buf + displs[me] * vs, counts[me], nccl_type(k), p, comm_, stream_));
      if (ok && counts[i] != 0) ok = nccl(ncclRecv(buf + displs[i] * vs, counts[i], nccl_type(k), p, comm_, stream_));
    }
    return nccl(ncclGroupEnd()) && ok;
  }
  bool allreduce_sum(std::byte* buf, std::uint64_t n, value_kind k) {
    return nccl(ncclAllReduce(buf, buf, n, nccl_type(k), ncclSum, comm_, stream_));
  }
  bool allreduce_min(const std::uint64_t* mine, std::uint64_t* out) {
    auto* dev = reinterpret_cast<std::uint64_t*>(static_cast<announcement*>(scratch_) + size_ + 1);
    return cuda(cudaMemcpyAsync(dev, mine, sizeof(std::uint64_t), cudaMemcpyHostToDevice, stream_)) &&
           nccl(ncclAllReduce(dev, dev + 1, 1, ncclUint64, ncclMin, comm_, stream_)) &&
           cuda(cudaMemcpyAsync(out, dev + 1, sizeof(std::uint64_t), cudaMemcpyDeviceToHost, stream_));
  }
  int test() {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
      return -1;
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    return -1;
  }
  bool wait() { return cudaStreamSynchronize(stream_) == cudaSuccess && test() == 1; }

 private:
  // Every rank sends the longest message's length (its own message, then whatever its slot
  // holds), then each message is copied from its slot to where the engine expects it.
  bool padded_allgatherv(const std::byte* send, std::uint64_t n, std::byte* recv, const std::vector<std::uint64_t>& counts,
                         const std::vector<std::uint64_t>& displs) {
    const std::uint64_t most = *std::max_element(counts.begin(), counts.end());
    if (most == 0) return true;
    const std::uint64_t need = most * (static_cast<std::uint64_t>(size_) + 1);
    if (padded_bytes_ < need) {
      if (padded_ != nullptr) cudaFree(padded_);
      padded_ = nullptr;
      padded_bytes_ = 0;
      if (cudaMalloc(&padded_, need) != cudaSuccess) return false;
      padded_bytes_ = need;
    }
    std::byte* slots = static_cast<std::byte*>(padded_);
    std::byte* out = slots + most * static_cast<std::uint64_t>(size_);
    if (!copy(out, send, n) || !nccl(ncclAllGather(out, slots, most, ncclUint8, comm_, stream_))) return false;
    for (std::size_t r = 0; r < counts.size(); ++r)
      if (!copy(recv + displs[r], slots + most * r, counts[r])) return false;
    return true;
  }
  bool copy(std::byte* to, const std::byte* from, std::uint64_t n) {
    return n == 0 || cuda(cudaMemcpyAsync(to, from, n, cudaMemcpyDeviceToDevice, stream_));
  }
  static bool nccl(ncclResult_t r) noexcept { return r == ncclSuccess; }
  static bool cuda(cudaError_t e) noexcept { return e == cudaSuccess; }

  ncclComm_t comm_;
  cudaStream_t stream_;
  nccl_gather gather_;
  int rank_ = 0;
  int size_ = 0;
  void* scratch_ = nullptr;
  void* padded_ = nullptr;
  std::uint64_t padded_bytes_ = 0;
};

}  // namespace detail

/**
 * @brief The messages of one step of every rank of an NCCL communicator, in GPU memory, and their
 * aggregation in rank order on the GPU; dense tensors in GPU memory summed across the ranks.
 *
 * The calls, their paths (`exchange_path`: the sparse allgather or the dense rank-order
 * allreduce, per step) and their errors are those of `exchange_engine` (see `mpi_exchange`):
 * messages are `span<const std::byte, thrust_space<cuda::tag>>`, aggregators are `aggregator`s on
 * `thrust_backend<thrust::system::cuda::tag>`, whose sums the messages are decoded and added into
 * on the GPU (`wire::device_accumulator`, with every check of the host decoder and of the
 * aggregator's layout); the host waits for each message's verdict and for the lengths. The same
 * code with buffers in Thrust's OpenMP memory gives bitwise the updates, errors and failing ranks
 * of `mpi_exchange` (tests/comm/test_mpi_thrust.cpp); tests/nccl/test_nccl.cu checks the updates
 * on GPUs against the host's, and has not yet run on a GPU.
 *
 * It does not own the communicator. Its work is issued on the backend's stream. One GPU per
 * rank; every rank must make the same calls in the same order. Not thread-safe.
 */
class nccl_exchange : public exchange_engine<detail::nccl_transport, thrust_backend<thrust::system::cuda::tag>> {
 public:
  /// The backend whose memory holds the messages, tensors and sums.
  using backend = thrust_backend<thrust::system::cuda::tag>;

  /// An exchange over `comm` (an initialised NCCL communicator, one GPU per rank) on `on`'s
  /// stream; `reduce` takes the path `path` gives; messages of different lengths gather as
  /// `gather` says. Throws `gradcomp::error` (`errc::comm_error`, `errc::device_error`).
  nccl_exchange(ncclComm_t comm, backend on, exchange_path path = exchange_path::automatic,
                nccl_gather gather = nccl_gather::grouped)
      : exchange_engine<detail::nccl_transport, backend>(detail::nccl_transport(comm, on.stream, gather), path, on) {}

  /// The communicator the exchange runs on.
  ncclComm_t communicator() const noexcept { return this->transport().comm(); }
};

}  // namespace comm
}  // namespace gradcomp
