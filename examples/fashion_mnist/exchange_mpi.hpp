// The demo's exchange across MPI processes (train_fashion_mnist --mpi): one worker per rank of
// MPI_COMM_WORLD, the messages through gradcomp::comm::mpi_exchange (an allgather), the other
// rounds through MPI's own collectives. Every rank adds the messages in rank order, as the
// in-process run does, so both runs train bitwise the same weights. Part of the example, not of
// the library.
#pragma once

#include <gradcomp/comm/mpi.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "exchange.hpp"

namespace fmnist {

class mpi_process_exchange final : public exchange {
 public:
  explicit mpi_process_exchange(MPI_Comm comm)
      : net_(comm), rank_(static_cast<std::size_t>(net_.rank())), size_(static_cast<std::size_t>(net_.size())) {}

  std::size_t size() const override { return size_; }
  bool local(std::size_t rank) const override { return rank == rank_; }
  gradcomp::span<std::byte> outbox(std::size_t, std::size_t bytes) override {
    if (outbox_.size() < bytes) outbox_.resize(bytes);
    return gradcomp::span<std::byte>(outbox_.data(), outbox_.size());
  }
  void send(std::size_t, std::size_t bytes) override {
    check(net_.allgather(gradcomp::span<const std::byte>(outbox_.data(), bytes)), "the messages' allgather");
  }
  gradcomp::span<const std::byte> received(std::size_t rank) const override {
    return net_.message(static_cast<int>(rank));
  }
  void contribute_max(std::size_t, gradcomp::span<const float> values) override {
    max_.assign(values.size(), 0.0f);
    mpi(MPI_Allreduce(values.data(), max_.data(), static_cast<int>(values.size()), MPI_FLOAT, MPI_MAX,
                      net_.communicator()),
        "MPI_Allreduce");
  }
  gradcomp::span<const float> maximum() const override { return gradcomp::span<const float>(max_.data(), max_.size()); }
  void share_numbers(std::size_t, gradcomp::span<const double> values) override {
    allgather(values, MPI_DOUBLE, numbers_, per_numbers_);
  }
  gradcomp::span<const double> numbers(std::size_t rank) const override {
    return gradcomp::span<const double>(numbers_.data() + rank * per_numbers_, per_numbers_);
  }
  void share_floats(std::size_t, gradcomp::span<const float> values) override {
    allgather(values, MPI_FLOAT, floats_, per_floats_);
  }
  gradcomp::span<const float> floats(std::size_t rank) const override {
    return gradcomp::span<const float>(floats_.data() + rank * per_floats_, per_floats_);
  }

 private:
  static void check(const gradcomp::result<void>& r, const char* what) {
    if (!r) throw std::runtime_error(std::string(what) + ": " + gradcomp::to_string(r.error()));
  }
  static void mpi(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
  }
  // Every rank's `values` (as many on each), rank after rank, into `all`; `per` of them each.
  template <class T>
  void allgather(gradcomp::span<const T> values, MPI_Datatype type, std::vector<T>& all, std::size_t& per) {
    all.assign(values.size() * size_, T{});
    per = values.size();
    const int count = static_cast<int>(values.size());
    mpi(MPI_Allgather(values.data(), count, type, all.data(), count, type, net_.communicator()), "MPI_Allgather");
  }

  gradcomp::comm::mpi_exchange net_;
  std::size_t rank_, size_;
  std::vector<std::byte> outbox_;
  std::vector<float> max_;
  std::vector<double> numbers_;
  std::vector<float> floats_;
  std::size_t per_numbers_ = 0, per_floats_ = 0;
};

/// MPI for the duration of a program's main, when `wanted`.
struct mpi_session {
  bool on = false;
  explicit mpi_session(bool wanted, int& argc, char**& argv) : on(wanted) {
    if (on) MPI_Init(&argc, &argv);
  }
  ~mpi_session() {
    if (on) MPI_Finalize();
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;
};

}  // namespace fmnist
