// Helpers of the MPI tests (tests/comm): the world, the messages the cases exchange.
#pragma once

#include <gradcomp/gradcomp.hpp>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/conformance.hpp"

namespace gradcomp_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline gradcomp::span<const std::byte> view(const std::vector<std::byte>& v) {
  return gradcomp::span<const std::byte>(v.data(), v.size());
}

// A value every rank gives, gathered: true when it is the same on every rank.
inline bool same_on_every_rank(int value) {
  std::vector<int> all(static_cast<std::size_t>(world_size()));
  MPI_Allgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (const int v : all)
    if (v != value) return false;
  return true;
}

inline gradcomp::dgc_config mpi_test_config(double density = 0.01) {
  gradcomp::dgc_config cfg;
  cfg.clip_norm = 3.0;
  cfg.schedule = gradcomp::warmup_schedule::constant(density);
  return cfg;
}

inline const char* path_name(gradcomp::comm::exchange_path p) {
  switch (p) {
    case gradcomp::comm::exchange_path::automatic: return "automatic";
    case gradcomp::comm::exchange_path::allgather: return "allgather";
    case gradcomp::comm::exchange_path::allreduce: return "allreduce";
  }
  return "?";
}

// The conformance gradients of `step` for worker `rank`; every one zero at step `zero_step`
// (whatever the selection keeps then, it must go through).
inline std::vector<std::vector<float>> step_gradients(std::size_t step, int rank, std::size_t zero_step) {
  auto g = conformance_gradients<float>(step, static_cast<std::uint64_t>(rank));
  if (step == zero_step)
    for (auto& x : g) std::fill(x.begin(), x.end(), 0.0f);
  return g;
}

// `w`'s encoded DGC step of gradients `g`.
inline std::vector<std::byte> encoded(conformance_worker<float, gradcomp::cpu_backend>& w,
                                      const std::vector<std::vector<float>>& g) {
  w.load(g);
  REQUIRE(w.compressor.compress(w.views()));
  auto bytes = w.encode();
  REQUIRE(bytes);
  return *bytes;
}

// `w`'s encoded DGC step of the conformance gradients of `step` for worker `rank`.
inline std::vector<std::byte> encoded_step(conformance_worker<float, gradcomp::cpu_backend>& w, std::size_t step,
                                           int rank) {
  return encoded(w, conformance_gradients<float>(step, static_cast<std::uint64_t>(rank)));
}

// EF-SignSGD's message for the conformance model's tensors: another compressor's sections.
inline std::vector<std::byte> ef_signsgd_message() {
  gradcomp::ef_signsgd_compressor<float> other(gradcomp::ef_signsgd_config{});
  for (const auto& x : conformance_model()) other.add_tensor(x.name, x.shape);
  const auto g = conformance_gradients<float>(0, 0);
  std::vector<gradcomp::span<const float>> views;
  for (const auto& x : g) views.emplace_back(x.data(), x.size());
  std::vector<std::byte> bytes;
  if (!other.compress(views)) return bytes;
  bytes.assign(other.max_message_bytes({}), std::byte{});
  const auto len = other.encode_message({}, gradcomp::span<std::byte>(bytes.data(), bytes.size()));
  bytes.resize(len ? *len : 0);
  return bytes;
}

// A DGC message (1% kept, no clipping) of gradients that are all 2e38: every rank keeps the same
// positions, and two ranks' values together overflow a float.
inline std::vector<std::byte> overflowing_message() {
  gradcomp::dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.01);
  conformance_worker<float, gradcomp::cpu_backend> huge(cfg, gradcomp::cpu_backend{});
  auto g = conformance_gradients<float>(0, 0);
  for (auto& x : g) std::fill(x.begin(), x.end(), 2e38f);
  huge.load(g);
  if (!huge.compressor.compress(huge.views())) return {};
  auto bytes = huge.encode();
  return bytes ? *bytes : std::vector<std::byte>{};
}

}  // namespace gradcomp_test
