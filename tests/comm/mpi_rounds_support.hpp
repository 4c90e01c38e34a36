// The model, gradients and checks of the tests of PowerSGD's rounds across MPI ranks
// (tests/comm/test_mpi_rounds.cpp on host memory, tests/comm/test_mpi_thrust.cpp on a Thrust
// backend's): a compressed matrix, a bias sent dense and a convolution.
#pragma once

#include <gradcomp/powersgd/compressor.hpp>
#include <gradcomp/wire/encode.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/mpi_support.hpp"
#include "thrust/data.hpp"

namespace gradcomp_test {
namespace mpi_rounds {

inline gradcomp::powersgd_config config() {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  cfg.seed = 11;
  return cfg;
}

template <class B = gradcomp::cpu_backend>
gradcomp::powersgd_compressor<float, B> model(const gradcomp::powersgd_config& cfg, B b = B{}) {
  gradcomp::powersgd_compressor<float, B> c(cfg, b);
  c.add_tensor("w", {24, 30});
  c.add_tensor("bias", {24});
  c.add_tensor("conv", {6, 2, 3, 3});
  return c;
}

// Worker `rank`'s gradients of `step`.
inline std::vector<std::vector<float>> gradients(std::size_t step, int rank) {
  const std::uint64_t key = 1000 * step + static_cast<std::uint64_t>(rank);
  return {gaussian<float>(720, key), gaussian<float>(24, key + 500), gaussian<float>(108, key + 700)};
}

inline std::vector<gradcomp::span<const float>> views(const std::vector<std::vector<float>>& g) {
  std::vector<gradcomp::span<const float>> v;
  for (const auto& x : g) v.emplace_back(x.data(), x.size());
  return v;
}

inline bool same_bits(gradcomp::span<const float> a, gradcomp::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A checksum of values, to compare across ranks.
inline int hash(const std::vector<gradcomp::span<const float>>& parts) {
  std::uint32_t h = 2166136261u;
  for (const auto& p : parts)
    for (const float x : p) {
      std::uint32_t b = 0;
      std::memcpy(&b, &x, 4);
      h = (h ^ b) * 16777619u;
    }
  return static_cast<int>(h & 0x7fffffff);
}

// Round 1 of the open step of `c` (on the host) sent as the second round's kind.
inline std::vector<std::byte> first_round_as_second(const gradcomp::powersgd_compressor<float>& c,
                                                    const gradcomp::wire::encode_options& opt) {
  const auto layout = c.round_layout(1);
  const auto payload = c.payload();
  std::vector<gradcomp::tensor_message<float>> sections;
  std::size_t at = 0;
  for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
    const std::size_t n = layout.tensors[i].info.numel;
    sections.push_back({i, n, true, {}, payload.subspan(at, n)});
    at += n;
  }
  std::vector<std::byte> msg(c.max_round_bytes(opt));
  const auto written = gradcomp::wire::encode_round(
      gradcomp::wire::message_kind::second_round,
      gradcomp::span<const gradcomp::tensor_message<float>>(sections.data(), sections.size()), opt,
      gradcomp::span<std::byte>(msg.data(), msg.size()));
  REQUIRE(written);
  msg.resize(*written);
  return msg;
}

}  // namespace mpi_rounds
}  // namespace gradcomp_test
