// How the workers' messages reach every replica: an allgather of byte buffers. The demo runs its
// workers in one process (in_process_exchange); a multi-process run puts MPI or NCCL behind the
// same interface. Part of the example, not of the library.
#pragma once

#include <gradcomp/span.hpp>

#include <cstddef>
#include <vector>

namespace fmnist {

/// An allgather of one message per worker and step.
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

 private:
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<std::size_t> sizes_;
};

}  // namespace fmnist
