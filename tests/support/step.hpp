// compress followed by stats(): one step's outcome and statistics, as a single call for tests;
// and the views of a model's gradients that compress takes.
#pragma once

#include <vector>

#include <gradcomp/dgc/compressor.hpp>
#include <gradcomp/span.hpp>

namespace gradcomp_test {

template <class T>
std::vector<gradcomp::span<const T>> views(const std::vector<std::vector<T>>& g) {
  std::vector<gradcomp::span<const T>> out;
  for (const auto& x : g) out.emplace_back(x.data(), x.size());
  return out;
}

template <class Compressor>
gradcomp::result<gradcomp::dgc_step_stats> compress_step(
    Compressor& c, const std::vector<typename Compressor::tensor_view>& grads) {
  const auto issued = c.compress(grads);
  if (!issued) return gradcomp::fail(issued.error());
  return c.stats();
}

}  // namespace gradcomp_test
