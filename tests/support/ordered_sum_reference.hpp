// The summation order of gradcomp's reductions (detail/ordered_sum.hpp), written out from its
// definition with plain vectors, for the tests of the library's streaming and parallel versions;
// and terms whose sum depends on the order of the additions.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gradcomp/config.hpp>
#include <gradcomp/detail/bytes.hpp>

namespace gradcomp_test {
namespace ordered_sum_reference {

inline constexpr std::size_t lanes = 32;
inline constexpr std::size_t block = 4096;

// One block: lane j adds the block's elements j, j + 32, ... to 0.0 in order, then the lanes are
// added pairwise (16 apart, 8 apart, ... 1 apart).
inline double block_value(const std::vector<double>& x, std::size_t first, std::size_t last) {
  double lane[lanes] = {};
  for (std::size_t i = first; i < last; ++i) lane[(i - first) % lanes] += x[i];
  for (std::size_t w = lanes / 2; w > 0; w /= 2)
    for (std::size_t j = 0; j < w; ++j) lane[j] += lane[j + w];
  return lane[0];
}

// The sum of x: one block when it has at most `block` elements, otherwise the sum of its
// blocks' values by the same rule.
inline double sum(std::vector<double> x) {
  while (x.size() > block) {
    std::vector<double> values;
    for (std::size_t first = 0; first < x.size(); first += block)
      values.push_back(block_value(x, first, first + block < x.size() ? first + block : x.size()));
    x = std::move(values);
  }
  return block_value(x, 0, x.size());
}

// The sum of term(0 .. n) (a function of the index, so the largest sizes need no storage for
// the elements: the first level's blocks are summed as they are made).
template <class Term>
double sum_of(std::size_t n, Term term) {
  if (n <= block) {
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = term(i);
    return sum(std::move(x));
  }
  std::vector<double> values, x;
  for (std::size_t first = 0; first < n; first += block) {
    x.clear();
    for (std::size_t i = first; i < n && i < first + block; ++i) x.push_back(term(i));
    values.push_back(block_value(x, 0, x.size()));
  }
  return sum(std::move(values));
}

// The old single-level order (32 lanes over the whole tensor): differs from sum_of on the terms
// below once a tensor has more than one block, which shows the tests can tell the orders apart.
template <class Term>
double lanes_only(std::size_t n, Term term) {
  double lane[lanes] = {};
  for (std::size_t i = 0; i < n; ++i) lane[i % lanes] += term(i);
  for (std::size_t w = lanes / 2; w > 0; w /= 2)
    for (std::size_t j = 0; j < w; ++j) lane[j] += lane[j + w];
  return lane[0];
}

// Signed terms of magnitudes from 2^-30 to 2^31, a function of i (on the host and the device):
// their rounding errors depend on the order of the additions.
GRADCOMP_HD inline double wide_term(std::size_t i) {
  std::uint64_t z = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 29;
  const std::uint64_t sign = (z >> 7 & 1u) << 63;
  const std::uint64_t exponent = 1023 - 30 + z % 61;
  return gradcomp::detail::bit_cast<double>(sign | exponent << 52 | (z >> 12));
}

// wide_term as a functor.
struct wide_leaf {
  GRADCOMP_HD double operator()(std::size_t i) const { return wide_term(i); }
};

}  // namespace ordered_sum_reference
}  // namespace gradcomp_test
