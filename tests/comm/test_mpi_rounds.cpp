// A multi-round method (PowerSGD) across MPI ranks through comm::exchange_rounds: every rank ends
// each step with bitwise the update and the error of one process averaging the same round
// messages in rank order, on either path of the exchange; a refused step, a damaged round message
// and a message of the other round fail the step on every rank and change nothing.
#include <doctest/doctest.h>

#include <gradcomp/comm/mpi.hpp>
#include <gradcomp/comm/rounds.hpp>
#include <gradcomp/powersgd/compressor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/mpi_rounds_support.hpp"
#include "comm/mpi_support.hpp"
#include "powersgd/rounds.hpp"
#include "thrust/data.hpp"

using namespace gradcomp;
using namespace gradcomp_test;

namespace {

using mpi_rounds::gradients;
using mpi_rounds::same_bits;
using mpi_rounds::views;

powersgd_config rounds_config() { return mpi_rounds::config(); }

wire::encode_options round_options() { return gradcomp_test::round_options<float>(); }

// Every rank's worker run in this process: what the exchange must reproduce.
struct one_process {
  std::vector<powersgd_compressor<float>> workers;
  explicit one_process(const powersgd_config& cfg) {
    for (int r = 0; r < world_size(); ++r) workers.push_back(mpi_rounds::model(cfg));
  }
  void step(std::size_t s) {
    std::vector<std::vector<std::vector<float>>> g;
    for (int r = 0; r < world_size(); ++r) g.push_back(gradients(s, r));
    step_together(workers, g);
  }
};

// This rank's worker and exchange on one path.
struct rank_worker {
  comm::mpi_exchange ex;
  comm::round_buffers<float> buffers;
  powersgd_compressor<float> c = mpi_rounds::model(rounds_config());
  explicit rank_worker(comm::exchange_path path) : ex(MPI_COMM_WORLD, path) {}
};

// A checksum of every update, to compare across ranks.
int update_hash(const powersgd_compressor<float>& c) {
  std::vector<span<const float>> u;
  for (std::size_t t = 0; t < c.num_tensors(); ++t) u.push_back(c.update(t));
  return mpi_rounds::hash(u);
}

}  // namespace

TEST_CASE("mpi: PowerSGD's rounds give every rank bitwise one process's update, on either path") {
  const int rank = world_rank();
  for (const auto path : {comm::exchange_path::allgather, comm::exchange_path::allreduce}) {
    CAPTURE(path_name(path));
    rank_worker me(path);
    auto& [ex, buffers, c] = me;
    one_process ref(rounds_config());
    REQUIRE(c.rounds() == 2);
    REQUIRE(c.info(0).compressed);
    REQUIRE(!c.info(1).compressed);
    for (std::size_t s = 0; s < 3; ++s) {
      const auto g = gradients(s, rank);
      const auto v = views(g);
      REQUIRE(comm::exchange_rounds(ex, c, span<const span<const float>>(v.data(), v.size()), buffers,
                                    round_options()));
      CHECK(ex.last_path() == path);
      ref.step(s);
      const auto& mine = ref.workers[static_cast<std::size_t>(rank)];
      for (std::size_t t = 0; t < c.num_tensors(); ++t) {
        CAPTURE(t);
        CHECK(same_bits(c.update(t), mine.update(t)));
        CHECK(same_bits(c.error_feedback(t), mine.error_feedback(t)));
        CHECK(same_bits(c.q(t), mine.q(t)));
      }
      CHECK(c.step() == s + 1);
      CHECK(same_on_every_rank(update_hash(c)));
    }
  }
}

TEST_CASE("mpi: a refused PowerSGD step, a damaged round message and the other round's fail it on every rank") {
  const int rank = world_rank();
  for (const auto path : {comm::exchange_path::allgather, comm::exchange_path::allreduce}) {
    CAPTURE(path_name(path));
    rank_worker me(path);
    auto& [ex, buffers, c] = me;
    const auto opt = round_options();

    // Rank 1's gradient holds a NaN: its step is refused, and every rank's fails without a change.
    auto g = gradients(0, rank);
    if (rank == 1) g[0][17] = std::nanf("");
    auto v = views(g);
    const auto refused = comm::exchange_rounds(ex, c, span<const span<const float>>(v.data(), v.size()), buffers, opt);
    REQUIRE(!refused);
    CHECK(refused.error() == errc::peer_failed);
    CHECK(ex.failed_rank() == 1);
    CHECK(c.round() == 0);
    CHECK(c.step() == 0);

    // Rank 1 sends its first round as the second round's kind, then as damaged bytes: every rank
    // refuses the step, naming rank 1.
    g = gradients(0, rank);
    v = views(g);
    for (const bool damaged : {false, true}) {
      CAPTURE(damaged);
      REQUIRE(c.begin_step(span<const span<const float>>(v.data(), v.size())));
      aggregator<float>& agg = buffers.aggregator_for(1, wire::message_kind::first_round, c.round_layout(1));
      auto msg = round_message(c);
      if (rank == 1 && !damaged) {
        const auto as_second = mpi_rounds::first_round_as_second(c, opt);
        REQUIRE(as_second.size() == msg.size());
        msg = as_second;
      }
      if (rank == 1 && damaged) msg[msg.size() / 2] ^= std::byte{0x10};
      const auto r = ex.reduce(span<const std::byte>(msg.data(), msg.size()), agg);
      REQUIRE(!r);
      CHECK(r.error() == (damaged ? errc::checksum_mismatch : errc::layout_mismatch));
      CHECK(ex.failed_rank() == 1);
      c.cancel_step();
      CHECK(c.step() == 0);
    }

    // The same step then goes through on every rank.
    REQUIRE(comm::exchange_rounds(ex, c, span<const span<const float>>(v.data(), v.size()), buffers, opt));
    CHECK(c.step() == 1);
    CHECK(same_on_every_rank(update_hash(c)));
  }
}
