// detail::onebit_ops<thrust_backend<System>>: 1-bit SGD's kernels on the portable Thrust backend,
// with the CPU's arithmetic and its order for the column sums (onebit/step_plan.hpp: blocks of
// rows, each summed in row order, the blocks in order), so every message and residual is bitwise
// the CPU backend's.
#pragma once

#include "step_plan.hpp"
#include "../thrust/kernel_support.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// One thread per (block, column): the column's sums over the block's rows, in row order.
template <class T>
struct onebit_block_op {
  const T* g;
  const T* r;  // null: v = g
  std::size_t columns;
  std::size_t rows;
  onebit_partial<T>* partials;
  GRADCOMP_HD void operator()(std::size_t i) const {
    const std::size_t b = i / columns, c = i % columns;
    const std::size_t row0 = b * onebit_block_rows;
    const std::size_t row1 = row0 + onebit_block_rows < rows ? row0 + onebit_block_rows : rows;
    onebit_partial<T> p;
    onebit_block_sums(g, r, columns, c, row0, row1, p);
    partials[i] = p;
  }
};

// One thread per column: its blocks' sums in block order, its two values.
template <class T>
struct onebit_column_op {
  const onebit_partial<T>* partials;
  std::size_t blocks;
  std::size_t columns;
  std::size_t rows;
  onebit_column* cols;
  GRADCOMP_HD void operator()(std::size_t c) const { cols[c] = onebit_column_of(partials, blocks, columns, c, rows); }
};

struct onebit_fold_op {
  const onebit_column* cols;
  std::size_t count;
  onebit_record* r;
  GRADCOMP_HD void operator()(std::size_t) const { onebit_fold(cols, count, *r); }
};

struct onebit_plan_op {
  const onebit_record* records;
  std::size_t count;
  onebit_step_record* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_onebit_step(records, count, step); }
};

// One thread per element, where the verdict allows: the column's value of a compressed tensor
// and the new residual, or g itself.
template <class T>
struct onebit_step_op {
  const T* g;
  T* r;
  T* values;
  std::size_t columns;
  const onebit_column* cols;
  const onebit_record* record;
  const onebit_step_record* step;
  GRADCOMP_HD void operator()(std::size_t j) const {
    if (step->status != static_cast<std::int32_t>(errc::ok)) return;
    if (record->compressed == 0) {
      values[j] = g[j];
      return;
    }
    const T v = static_cast<T>(g[j] + r[j]);
    const T sent = onebit_value(v, cols[j % columns]);
    values[j] = sent;
    r[j] = static_cast<T>(v - sent);
  }
};

}  // namespace thrust_impl

/// 1-bit SGD's kernels on the Thrust backend: the sums, the column values, the records and the
/// verdict stay in the system's memory, and the host issues a step without waiting.
template <class System>
struct onebit_ops<thrust_backend<System>> {
  template <class T>
  static void measure(const thrust_backend<System>& on, thrust_view<const T, System> g,
                      thrust_view<const T, System> r, thrust_view<onebit_partial<T>, System> partials,
                      thrust_view<onebit_column, System> cols, thrust_view<onebit_record, System> records,
                      std::size_t t) {
    const std::size_t columns = cols.size(), n = g.size();
    const std::size_t rows = columns == 0 ? 0 : n / columns, blocks = onebit_blocks(n, columns);
    if (blocks * columns != 0)
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                         blocks * columns,
                         thrust_impl::onebit_block_op<T>{g.data(), r.empty() ? nullptr : r.data(), columns, rows,
                                                         partials.data()});
    if (columns != 0)
      thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), columns,
                         thrust_impl::onebit_column_op<T>{partials.data(), blocks, columns, rows, cols.data()});
    thrust_impl::run_once<System>(on.stream, thrust_impl::onebit_fold_op{cols.data(), columns, records.data() + t});
  }
  static void plan(const thrust_backend<System>& on, thrust_view<const onebit_record, System> records,
                   thrust_view<onebit_step_record, System> step) {
    thrust_impl::run_once<System>(on.stream,
                                  thrust_impl::onebit_plan_op{records.data(), records.size(), step.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, thrust_view<const T, System> g, thrust_view<T, System> r,
                    thrust_view<T, System> values, thrust_view<const onebit_column, System> cols,
                    thrust_view<const onebit_record, System> records, std::size_t t,
                    thrust_view<const onebit_step_record, System> step) {
    if (g.empty()) return;
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::onebit_step_op<T>{g.data(), r.empty() ? nullptr : r.data(), values.data(),
                                                      cols.size(), cols.data(), records.data() + t, step.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
