// compress followed by stats(): one step's outcome and statistics, as a single call for tests.
#pragma once

#include <vector>

#include <gradcomp/dgc/compressor.hpp>

namespace gradcomp_test {

template <class Compressor>
gradcomp::result<gradcomp::dgc_step_stats> compress_step(
    Compressor& c, const std::vector<typename Compressor::tensor_view>& grads) {
  const auto issued = c.compress(grads);
  if (!issued) return gradcomp::fail(issued.error());
  return c.stats();
}

}  // namespace gradcomp_test
