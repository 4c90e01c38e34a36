// PowerSGD's workers run together in one process (the tests' reference of an exchange): each
// round's messages averaged in worker order by an aggregator of the round, as every replica does.
#pragma once

#include <gradcomp/aggregator.hpp>
#include <gradcomp/powersgd/compressor.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

namespace gradcomp_test {

// The options the rounds travel with: exact values, a checksum.
template <class T>
gradcomp::wire::encode_options round_options() {
  gradcomp::wire::encode_options opt;
  opt.dense_values = sizeof(T) == 4 ? gradcomp::wire::value_coding::fp32 : gradcomp::wire::value_coding::fp64;
  opt.checksum = true;
  return opt;
}

// A worker's open round as its message (a compressor on any backend).
template <class C>
std::vector<std::byte> round_message(const C& c) {
  const auto opt = round_options<typename C::value_type>();
  std::vector<std::byte> msg(c.max_round_bytes(opt));
  const auto n = c.encode_round(opt, gradcomp::span<std::byte>(msg.data(), msg.size()));
  REQUIRE(n);
  msg.resize(*n);
  return msg;
}

// The average of the workers' open round (compressors on any backend): every message added by a
// host aggregator of the round in worker order, its updates one after the other.
template <class C>
std::vector<typename C::value_type> round_average(const std::vector<C>& workers) {
  using T = typename C::value_type;
  const std::size_t k = workers[0].round();
  gradcomp::aggregator<T> agg(C::round_kind(k), workers[0].round_layout(k));
  agg.begin();
  for (const auto& c : workers) {
    const auto msg = round_message(c);
    REQUIRE(agg.add(gradcomp::span<const std::byte>(msg.data(), msg.size())));
  }
  REQUIRE(agg.finish(workers.size()));
  std::vector<T> average;
  for (std::size_t t = 0; t < agg.num_tensors(); ++t) {
    const auto u = agg.update(t);
    average.insert(average.end(), u.begin(), u.end());
  }
  return average;
}

// The workers' open round: the average given back to every worker.
template <class T>
void end_round_together(std::vector<gradcomp::powersgd_compressor<T>>& workers) {
  const std::vector<T> average = round_average(workers);
  for (auto& c : workers) REQUIRE(c.end_round(gradcomp::span<const T>(average.data(), average.size())));
}

// One step of every worker: grads[w][t] is worker w's gradient of tensor t.
template <class T>
void step_together(std::vector<gradcomp::powersgd_compressor<T>>& workers,
                   const std::vector<std::vector<std::vector<T>>>& grads) {
  for (std::size_t w = 0; w < workers.size(); ++w) {
    std::vector<gradcomp::span<const T>> views;
    for (const auto& g : grads[w]) views.emplace_back(g.data(), g.size());
    REQUIRE(workers[w].begin_step(gradcomp::span<const gradcomp::span<const T>>(views.data(), views.size())));
  }
  for (std::size_t k = 1; workers[0].round() != 0; ++k) {
    REQUIRE(workers[0].round() == k);
    end_round_together(workers);
  }
}

}  // namespace gradcomp_test
