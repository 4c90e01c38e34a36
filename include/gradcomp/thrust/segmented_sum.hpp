// detail/ordered_sum.hpp's order for many tensors at once on the Thrust backend: each tensor's
// value is bitwise the one issue_ordered_reduce gives it (thrust/ordered_sum.hpp), but every
// level runs over the blocks of all the tensors together, so a model's reductions take two
// launches per level (at most three levels below 2^32 elements a tensor) whatever its number of
// tensors. The blocks of every level depend only on the tensors' sizes: they are planned on the
// host once, when the sizes are known, and kept in the system's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "../detail/ordered_sum.hpp"
#include "../span.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One block of one level: `count` inputs from `first` (level 0: the elements of tensor `tensor`;
// above: the values of the level below), whose value goes to `dest` among the level's values,
// or, where it is its tensor's last block (`last`), to the tensor's result.
struct segment_block {
  std::uint64_t first = 0;
  std::uint64_t dest = 0;
  std::uint32_t count = 0;
  std::uint32_t tensor = 0;
  std::uint32_t last = 0;
};

// The blocks of every level (level 0 first) of the reductions of tensors of `sizes` elements:
// a tensor's level k + 1 reduces the values of its blocks of level k, until one block remains.
inline std::vector<std::vector<segment_block>> plan_segment_levels(span<const std::size_t> sizes) {
  std::vector<std::vector<segment_block>> levels;
  std::vector<std::size_t> count(sizes.begin(), sizes.end());  // each tensor's inputs at the level
  std::vector<std::size_t> first(sizes.size(), 0);             // where they start
  std::vector<std::uint8_t> open(sizes.size(), 1);
  for (bool more = true; more;) {
    more = false;
    std::vector<segment_block> level;
    std::uint64_t values = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      if (!open[t]) continue;
      const std::size_t blocks = sum_blocks(count[t]);
      for (std::size_t b = 0; b < blocks; ++b) {
        segment_block s;
        s.first = first[t] + b * sum_block;
        s.count = static_cast<std::uint32_t>(count[t] - b * sum_block < sum_block ? count[t] - b * sum_block : sum_block);
        s.tensor = static_cast<std::uint32_t>(t);
        s.last = blocks == 1 ? 1 : 0;
        s.dest = blocks == 1 ? t : values + b;
        level.push_back(s);
      }
      if (blocks == 1) {
        open[t] = 0;
      } else {
        first[t] = values;
        count[t] = blocks;
        values += blocks;
        more = true;
      }
    }
    levels.push_back(std::move(level));
  }
  return levels;
}

// Lane k % sum_lanes of block k / sum_lanes of a level, folded in input order (fold_lane_op's
// order within the block).
template <class State, class Leaf, class Merge>
struct segment_fold_op {
  Leaf leaf;
  Merge merge;
  const segment_block* blocks;
  State* lanes;
  GRADCOMP_HD void operator()(std::size_t k) const {
    const segment_block b = blocks[k / sum_lanes];
    State s{};
    for (std::size_t i = k % sum_lanes; i < b.count; i += sum_lanes) s = merge(s, leaf(b.tensor, b.first + i));
    lanes[k] = s;
  }
};

// Block j's lanes combined, into the level's values or its tensor's result.
template <class State, class Merge>
struct segment_combine_op {
  Merge merge;
  const segment_block* blocks;
  State* lanes;
  State* values;
  State* results;
  GRADCOMP_HD void operator()(std::size_t j) const {
    combine_lanes(lanes + j * sum_lanes, merge);
    const segment_block b = blocks[j];
    (b.last != 0 ? results : values)[b.dest] = lanes[j * sum_lanes];
  }
};

// The values of the level below as the inputs of the next.
template <class State>
struct segment_value_leaf {
  const State* values;
  GRADCOMP_HD State operator()(std::uint32_t, std::uint64_t i) const { return values[i]; }
};

// The planned reductions of a model's tensors in System's memory (the plan holds for any state).
template <class System>
class segmented_reduction {
 public:
  segmented_reduction() = default;

  // Plans the reductions of tensors of `sizes` elements and copies the plan into System's
  // memory (waits for the copies).
  explicit segmented_reduction(span<const std::size_t> sizes) : tensors_(sizes.size()) {
    for (const auto& level : plan_segment_levels(sizes)) {
      level_plan p;
      p.count = level.size();
      for (const segment_block& b : level) p.values += b.last != 0 ? 0 : 1;
      p.blocks = system_buffer<segment_block, System>(level.size());
      copy_bytes_to_system<System>(nullptr, level.data(), p.blocks.view().data(), level.size() * sizeof(segment_block));
      lanes_ = p.count * sum_lanes > lanes_ ? p.count * sum_lanes : lanes_;
      values_ += p.values;
      levels_.push_back(std::move(p));
    }
    execution<System>::wait(nullptr);
  }

  // The number of tensors.
  std::size_t size() const noexcept { return tensors_; }
  // Its levels: each takes two launches.
  std::size_t levels() const noexcept { return levels_.size(); }

  // Issues, on `stream` and without waiting, results[t] = the reduction of leaf(t, 0 ..
  // sizes[t]) in the order of detail/ordered_sum.hpp, for every tensor t; results is in
  // System's memory.
  template <class State, class Leaf, class Merge>
  void issue(stream_t stream, Leaf leaf, Merge merge, State* results) const {
    if (tensors_ == 0) return;
    scratch<State, System> work(stream, lanes_ + values_);
    State* lanes = work.data();
    State* values = lanes + lanes_;
    const State* below = nullptr;
    for (std::size_t k = 0; k < levels_.size(); ++k) {
      const level_plan& p = levels_[k];
      const segment_block* blocks = p.blocks.view().data();
      const thrust::counting_iterator<std::size_t> at(0);
      if (k == 0)
        thrust::for_each_n(exec<System>(stream), at, p.count * sum_lanes,
                           segment_fold_op<State, Leaf, Merge>{leaf, merge, blocks, lanes});
      else
        thrust::for_each_n(exec<System>(stream), at, p.count * sum_lanes,
                           segment_fold_op<State, segment_value_leaf<State>, Merge>{
                               segment_value_leaf<State>{below}, merge, blocks, lanes});
      thrust::for_each_n(exec<System>(stream), at, p.count,
                         segment_combine_op<State, Merge>{merge, blocks, lanes, values, results});
      below = values;
      values += p.values;
    }
  }

 private:
  struct level_plan {
    system_buffer<segment_block, System> blocks;
    std::size_t count = 0;   // blocks
    std::size_t values = 0;  // of them, those whose value the next level reads
  };
  std::size_t tensors_ = 0;
  std::vector<level_plan> levels_;
  std::size_t lanes_ = 0;   // the most lanes a level folds
  std::size_t values_ = 0;  // the values all levels keep
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
