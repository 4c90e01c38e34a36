// Test inputs: random vectors from fixed seeds (printed by doctest on failure through CAPTURE),
// and brute-force references the optimised code is checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace gradcomp_test {

enum class dist { gaussian, student_t, log_normal, small_integers };

inline const char* name(dist d) {
  switch (d) {
    case dist::gaussian: return "gaussian";
    case dist::student_t: return "student_t(2)";
    case dist::log_normal: return "log_normal(0,2)";
    case dist::small_integers: return "small_integers";
  }
  return "?";
}

// Values of the given distribution; small_integers draws from {-4..4} so ties are everywhere.
template <class T>
std::vector<T> random_vector(std::size_t n, dist d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::student_t_distribution<double> student(2.0);
  std::lognormal_distribution<double> lognormal(0.0, 2.0);
  std::uniform_int_distribution<int> small(-4, 4);
  std::bernoulli_distribution coin(0.5);
  for (auto& x : v) {
    switch (d) {
      case dist::gaussian: x = static_cast<T>(normal(rng)); break;
      case dist::student_t: x = static_cast<T>(student(rng)); break;
      case dist::log_normal: x = static_cast<T>(coin(rng) ? lognormal(rng) : -lognormal(rng)); break;
      case dist::small_integers: x = static_cast<T>(small(rng)); break;
    }
  }
  return v;
}

// True when two contiguous ranges (vector, span) hold the same elements bit for bit: NaN equals
// the same NaN and -0 differs from +0. Empty ranges may have a null data(), which memcmp must
// never see.
template <class A, class B>
bool bitwise_equal(const A& a, const B& b) {
  static_assert(sizeof(*a.data()) == sizeof(*b.data()), "ranges of different element types");
  return a.size() == b.size() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0);
}

// Reference top-k: full stable sort by (|v| descending, index ascending), first k, ascending.
template <class T>
std::vector<std::uint32_t> brute_force_topk(const std::vector<T>& v, std::size_t k) {
  std::vector<std::uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::fabs(v[a]) > std::fabs(v[b]);
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

// True when every selected magnitude is >= every unselected one.
template <class T>
bool is_magnitude_prefix(const std::vector<T>& v, const std::vector<std::uint32_t>& sel) {
  std::vector<char> in(v.size(), 0);
  T min_in = std::numeric_limits<T>::infinity();
  for (auto i : sel) {
    in[i] = 1;
    min_in = std::min(min_in, static_cast<T>(std::fabs(v[i])));
  }
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!in[i] && std::fabs(v[i]) > min_in) return false;
  return true;
}

}  // namespace gradcomp_test
