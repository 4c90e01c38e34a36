// The one order of gradcomp's floating-point reductions over a tensor (the clipping norm,
// EF-SignSGD's L1 norm, TernGrad's sums): every backend adds in this order, so their results are
// bitwise equal, and it leaves enough independent work for a GPU.
//
// The tensor is cut into blocks of sum_block elements (the last one shorter). Within a block,
// lane j (0 <= j < sum_lanes) folds the block's elements j, j + sum_lanes, j + 2 sum_lanes, ...
// in that order, starting from the identity; the lanes are then combined pairwise
// (lanes[j] = lanes[j] + lanes[j + w] for w = 16, 8, 4, 2, 1), giving the block's value. A tensor
// of at most sum_block elements is that one block. A longer one's value is the reduction of its
// blocks' values by the same rule, as if they were the elements (blocks of sum_block values, and
// so on until one value remains).
#pragma once

#include <cstddef>

#include "../config.hpp"
#include "rounded.hpp"

namespace gradcomp {
namespace detail {

/// Partial sums per block: element i of a block goes to lane i % sum_lanes.
inline constexpr std::size_t sum_lanes = 32;
/// Elements per block (a multiple of sum_lanes).
inline constexpr std::size_t sum_block = 4096;
static_assert(sum_block % sum_lanes == 0, "a block holds whole rows of lanes");

/// The number of blocks of n elements (one for n == 0).
GRADCOMP_HD constexpr std::size_t sum_blocks(std::size_t n) noexcept {
  return n <= sum_block ? 1 : (n + sum_block - 1) / sum_block;
}

/// The lanes combined pairwise into lanes[0].
template <class State, class Merge>
GRADCOMP_HD void combine_lanes(State* lanes, Merge merge) {
  for (std::size_t width = sum_lanes / 2; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j) lanes[j] = merge(lanes[j], lanes[j + width]);
}

/// The lanes of elements [first, last) folded in the order above (lane j of the range takes its
/// elements first + j, first + j + sum_lanes, ...) and combined: one block's value. leaf(i) is
/// element i's contribution; State{} is the identity of merge.
template <class State, class Leaf, class Merge>
GRADCOMP_HD State fold_block(std::size_t first, std::size_t last, Leaf leaf, Merge merge) {
  State lanes[sum_lanes] = {};
  std::size_t i = first;
  for (; i + sum_lanes <= last; i += sum_lanes)
    for (std::size_t j = 0; j < sum_lanes; ++j) lanes[j] = merge(lanes[j], leaf(i + j));
  for (std::size_t j = 0; i < last; ++i, ++j) lanes[j] = merge(lanes[j], leaf(i));
  combine_lanes(lanes, merge);
  return lanes[0];
}

/// The value of n elements in the order above, on the host: block(first, last) returns the value
/// of the block [first, last) (fold_block, or a vectorised kernel with its bits). The blocks'
/// values are reduced as they come, in at most one row of sum_lanes states per level.
template <class State, class Block, class Merge>
State ordered_reduce(std::size_t n, Block block, Merge merge) {
  if (n <= sum_block) return block(std::size_t{0}, n);
  // Level k holds the lanes of its current block of values (level 0: the blocks' values, level
  // k + 1: the values of level k's blocks) and how many it holds; a full block passes up when the
  // next value arrives, so the last block of a level is never empty.
  constexpr int max_levels = 8;  // sum_block^7 values exceed any size_t
  State lanes[max_levels][sum_lanes] = {};
  std::size_t count[max_levels] = {};
  bool passed[max_levels] = {};
  const auto take = [&](State v, int k) {
    State& lane = lanes[k][count[k]++ % sum_lanes];
    lane = merge(lane, v);
  };
  const auto push = [&](State v, int k) {
    int top = k;  // levels k .. top - 1 are full and pass their blocks' values up, highest first
    while (top + 1 < max_levels && count[top] == sum_block) ++top;
    for (int j = top - 1; j >= k; --j) {
      combine_lanes(lanes[j], merge);
      const State up = lanes[j][0];
      for (State& s : lanes[j]) s = State{};
      count[j] = 0;
      passed[j] = true;
      take(up, j + 1);
    }
    take(v, k);
  };
  for (std::size_t first = 0; first < n; first += sum_block)
    push(block(first, first + sum_block < n ? first + sum_block : n), 0);
  // A level that passed no block holds all its values (at least two): its block is the result.
  // Otherwise its last block's value goes up.
  for (int k = 0; k + 1 < max_levels; ++k) {
    combine_lanes(lanes[k], merge);
    if (!passed[k]) return lanes[k][0];
    push(lanes[k][0], k + 1);
  }
  combine_lanes(lanes[max_levels - 1], merge);
  return lanes[max_levels - 1][0];
}

/// Addition of doubles, the merge of a plain sum.
struct sum_merge {
  GRADCOMP_HD double operator()(double a, double b) const { return a + b; }
};

/// g[i]^2 in double: the leaf of the L2 norm's sum of squares.
template <class T>
struct square_leaf {
  const T* g;
  GRADCOMP_HD double operator()(std::size_t i) const {
    const double x = static_cast<double>(g[i]);
    return rounded(x * x);
  }
};

/// (g[i] / top)^2 in double: the leaf of a norm whose plain squares overflow, scaled by the
/// largest magnitude top.
template <class T>
struct scaled_square_leaf {
  const T* g;
  double top;
  GRADCOMP_HD double operator()(std::size_t i) const {
    const double x = static_cast<double>(g[i]) / top;
    return rounded(x * x);
  }
};

}  // namespace detail
}  // namespace gradcomp
