// Test factors of a fully connected layer: Gaussian values, ReLU-like exact zeros on request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace gradcomp_test {

// rows x cols Gaussian values; with `relu`, about a quarter exact zeros; column `zero_col` all 0.
inline std::vector<float> factor(std::size_t rows, std::size_t cols, std::uint64_t seed, bool relu,
                                 std::size_t zero_col = std::numeric_limits<std::size_t>::max()) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(rows * cols);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = normal(rng);
    if ((relu && w[i] < -0.7f) || i % cols == zero_col) w[i] = 0.0f;
  }
  return w;
}

inline std::vector<double> widened(const std::vector<float>& w) { return std::vector<double>(w.begin(), w.end()); }

}  // namespace gradcomp_test
