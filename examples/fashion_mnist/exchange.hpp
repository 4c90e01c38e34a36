// How the workers' messages reach every replica: an allgather of byte buffers, and the few other
// collectives a step needs. The demo runs its workers in one process (in_process_exchange) or one
// per MPI rank (exchange_mpi.hpp, --mpi) behind the same interface. Part of the example, not of
// the library.
#pragma once

#include <gradcomp/span.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fmnist {

/// An allgather of one message per worker and step, an allreduce with max of a few floats per
/// worker and step (TernGrad's shared scales), and allgathers of numbers (each worker's step
/// figures) and of float vectors (SAEF's residuals). Each worker this process runs (`local`)
/// takes part in each of them once per round, in rank order.
class exchange {
 public:
  virtual ~exchange() = default;
  /// Number of workers.
  virtual std::size_t size() const = 0;
  /// Whether this process runs worker `rank`.
  virtual bool local(std::size_t rank) const = 0;
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
  /// Worker `rank`'s numbers for this round (every worker gives as many).
  virtual void share_numbers(std::size_t rank, gradcomp::span<const double> values) = 0;
  /// Once every worker has given its numbers: worker `rank`'s.
  virtual gradcomp::span<const double> numbers(std::size_t rank) const = 0;
  /// Worker `rank`'s floats for this round (every worker gives as many).
  virtual void share_floats(std::size_t rank, gradcomp::span<const float> values) = 0;
  /// Once every worker has given its floats: worker `rank`'s.
  virtual gradcomp::span<const float> floats(std::size_t rank) const = 0;
};

/// Every worker in this process: the messages stay where they were written.
class in_process_exchange final : public exchange {
 public:
  explicit in_process_exchange(std::size_t workers)
      : buffers_(workers), sizes_(workers, 0), numbers_(workers), floats_(workers) {}
  std::size_t size() const override { return buffers_.size(); }
  bool local(std::size_t) const override { return true; }
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
  void share_numbers(std::size_t rank, gradcomp::span<const double> values) override {
    numbers_[rank].assign(values.begin(), values.end());
  }
  gradcomp::span<const double> numbers(std::size_t rank) const override {
    return gradcomp::span<const double>(numbers_[rank].data(), numbers_[rank].size());
  }
  void share_floats(std::size_t rank, gradcomp::span<const float> values) override {
    floats_[rank].assign(values.begin(), values.end());
  }
  gradcomp::span<const float> floats(std::size_t rank) const override {
    return gradcomp::span<const float>(floats_[rank].data(), floats_[rank].size());
  }

 private:
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<std::size_t> sizes_;
  std::vector<float> max_;
  std::vector<std::vector<double>> numbers_;
  std::vector<std::vector<float>> floats_;
};

}  // namespace fmnist
