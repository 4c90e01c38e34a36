// Test data and comparisons shared by the Thrust backend's tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace gradcomp_test {

// n normal values of standard deviation `scale`, from `seed`.
template <class T>
std::vector<T> gaussian(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(normal(rng));
  return v;
}

// The same bytes (so NaN equals NaN and -0 differs from +0).
template <class T>
bool bitwise_same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace gradcomp_test
