// detail/ordered_sum.hpp's order on the Thrust backend: one thread per lane of every block (a
// warp reads a block's consecutive elements together), one per block to combine its lanes, and
// the same again over the blocks' values until one remains. The host knows every level's size,
// so nothing waits.
#pragma once

#include <cstddef>

#include "../detail/ordered_sum.hpp"
#include "kernel_support.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// Lane k % sum_lanes of block k / sum_lanes of n elements, folded in element order.
template <class State, class Leaf, class Merge>
struct fold_lane_op {
  Leaf leaf;
  Merge merge;
  std::size_t n;
  State* lanes;
  GRADCOMP_HD void operator()(std::size_t k) const {
    const std::size_t first = k / sum_lanes * sum_block;
    const std::size_t last = n - first < sum_block ? n : first + sum_block;
    State s{};
    for (std::size_t i = first + k % sum_lanes; i < last; i += sum_lanes) s = merge(s, leaf(i));
    lanes[k] = s;
  }
};

// Block b's lanes combined into values[b].
template <class State, class Merge>
struct combine_block_op {
  Merge merge;
  State* lanes;
  State* values;
  GRADCOMP_HD void operator()(std::size_t b) const {
    combine_lanes(lanes + b * sum_lanes, merge);
    values[b] = lanes[b * sum_lanes];
  }
};

// The values of the level below, the elements of the next.
template <class State>
struct value_leaf {
  const State* values;
  GRADCOMP_HD State operator()(std::size_t i) const { return values[i]; }
};

// The states every level of a reduction of n elements keeps: each block's lanes and value.
inline std::size_t ordered_reduce_states(std::size_t n) {
  std::size_t total = 0;
  for (std::size_t m = n;; m = sum_blocks(m)) {
    total += sum_blocks(m) * (sum_lanes + 1);
    if (sum_blocks(m) == 1) return total;
  }
}

// Issues the reduction of leaf(0 .. n) in the order of detail/ordered_sum.hpp into *out, in
// System's memory, without the host waiting: two launches per level (a level per factor of
// sum_block in n).
template <class State, class System, class Leaf, class Merge>
void issue_ordered_reduce(stream_t stream, std::size_t n, Leaf leaf, Merge merge, State* out) {
  scratch<State, System> w(stream, ordered_reduce_states(n));
  State* lanes = w.data();
  std::size_t blocks = sum_blocks(n);
  State* values = lanes + blocks * sum_lanes;
  const auto level = [&](auto level_leaf, std::size_t count) {
    thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), blocks * sum_lanes,
                       fold_lane_op<State, decltype(level_leaf), Merge>{level_leaf, merge, count, lanes});
    thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), blocks,
                       combine_block_op<State, Merge>{merge, lanes, blocks == 1 ? out : values});
  };
  level(leaf, n);
  while (blocks > 1) {
    const std::size_t count = blocks;
    const State* below = values;
    blocks = sum_blocks(count);
    lanes = values + count;
    values = lanes + blocks * sum_lanes;
    level(value_leaf<State>{below}, count);
  }
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
