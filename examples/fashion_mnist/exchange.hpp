// How the workers' messages reach every replica: an allgather of byte buffers. The demo runs its
// workers in one process (in_process_exchange); a multi-process run puts MPI or NCCL behind the
// same interface. Part of the example, not of the library.
#pragma once

#include <gradcomp/span.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fmnist {

/// An allgather of one message per worker and step, and an allreduce with max of a few floats
/// per worker and step (TernGrad's shared scales).
class exchange {
 public:
  virtual ~exchange() = default;
  /// Number of workers.
  virtual std::size_t size() const = 0;
  /// Worker `rank`'s buffer for this step's message, at least `bytes` long.
  virtual gradcomp::span<std::byte> outbox(std::size_t rank, std::size_t bytes) = 0;
  /// Worker `rank` sends the first `bytes` of its outbox.
  virtual void send(std::size_t rank, std::size_t bytes) = 0;
  /// Once every worker has sent: worker `rank`'s message, as every replica receives it.
  virtual gradcomp::span<const std::byte> received(std::size_t rank) const = 0;
  /// Worker `rank`'s values for this step's maximum (every worker gives as many; rank 0 first).
  virtual void contribute_max(std::size_t rank, gradcomp::span<const float> values) = 0;
  /// Once every worker has contributed: the element-wise maximum, as every worker receives it.
  virtual gradcomp::span<const float> maximum() const = 0;
};

/// Every worker in this process: the messages stay where they were written.
class in_process_exchange final : public exchange {
 public:
  explicit in_process_exchange(std::size_t workers) : buffers_(workers), sizes_(workers, 0) {}
  std::size_t size() const override { return buffers_.size(); }
  gradcomp::span<std::byte> outbox(std::size_t rank, std::size_t bytes) override {
    if (buffers_[rank].size() < bytes) buffers_[rank].resize(bytes);
    return gradcomp::span<std::byte>(buffers_[rank].data(), buffers_[rank].size());
  }
  void send(std::size_t rank, std::size_t bytes) override { sizes_[rank] = bytes; }
  gradcomp::span<const std::byte> received(std::size_t rank) const override {
    return gradcomp::span<const std::byte>(buffers_[rank].data(), sizes_[rank]);
  }
  void contribute_max(std::size_t rank, gradcomp::span<const float> values) override {
    if (rank == 0) max_.assign(values.begin(), values.end());
    for (std::size_t i = 0; i < values.size() && i < max_.size(); ++i) max_[i] = std::max(max_[i], values[i]);
  }
  gradcomp::span<const float> maximum() const override { return gradcomp::span<const float>(max_.data(), max_.size()); }

 private:
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<std::size_t> sizes_;
  std::vector<float> max_;
};

}  // namespace fmnist
