// detail::onebit_ops<thrust_backend<System>>: 1-bit SGD's kernels on the portable Thrust backend,
// with the CPU's arithmetic and its order for the column sums (onebit/step_plan.hpp: blocks of
// rows, each summed in row order, the blocks in order), so every message and residual is bitwise
// the CPU backend's.
#pragma once

#include "step_plan.hpp"
#include "../thrust/kernel_support.hpp"
#include "../thrust/model_table.hpp"

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

// A tensor of a model in 1-bit SGD's whole-model launches: its columns (items in space 2), rows,
// blocks of rows, its block sums (aux[0]) and column values (aux[1]).
template <class T>
struct onebit_model_tensor {
  std::size_t columns, rows, blocks;
  onebit_partial<T>* partials;
  onebit_column* cols;
  GRADCOMP_HD explicit onebit_model_tensor(const model_tensor<T>& m)
      : columns(m.items[2]),
        rows(columns == 0 ? 0 : m.numel / columns),
        blocks(onebit_blocks(m.numel, columns)),
        partials(static_cast<onebit_partial<T>*>(m.aux[0])),
        cols(static_cast<onebit_column*>(m.aux[1])) {}
};

// Item j of space 1 (block j / columns, column j % columns) of a model's tensor: onebit_block_op.
template <class T>
struct onebit_model_block_op {
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t, std::uint64_t j) const {
    const onebit_model_tensor<T> x(m);
    onebit_block_op<T>{m.g, m.e, x.columns, x.rows, x.partials}(j);
  }
};

// Column c of a model's tensor: onebit_column_op.
template <class T>
struct onebit_model_column_op {
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t, std::uint64_t c) const {
    const onebit_model_tensor<T> x(m);
    onebit_column_op<T>{x.partials, x.blocks, x.columns, x.rows, x.cols}(c);
  }
};

// Tensor t's record from its columns.
template <class T>
struct onebit_model_fold_op {
  onebit_record* records;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t) const {
    onebit_fold_op{static_cast<const onebit_column*>(m.aux[1]), m.items[2], records + t}(0);
  }
};

// Element j of tensor t of a model: onebit_step_op.
template <class T>
struct onebit_model_step_op {
  const onebit_record* records;
  const onebit_step_record* step;
  GRADCOMP_HD void operator()(const model_tensor<T>& m, std::uint32_t t, std::uint64_t j) const {
    const auto* cols = static_cast<const onebit_column*>(m.aux[1]);
    onebit_step_op<T>{m.g, m.e, m.values, m.items[2], cols, records + t, step}(j);
  }
};

}  // namespace thrust_impl

/// 1-bit SGD's kernels on the Thrust backend: the sums, the column values, the records and the
/// verdict stay in the system's memory, and the host issues a step without waiting. A whole
/// model's step (its `model<T>`, thrust/model_table.hpp: a tensor's block sums and column values
/// in its aux buffers) is one launch for every block of rows of every column, one for every
/// column, one for the records, one for the plan and one for every element of every tensor; a
/// separate backend issues the same work tensor by tensor.
template <class System>
struct onebit_ops<thrust_backend<System>> {
  template <class T>
  using model = thrust_impl::model_table<T, System>;

  template <class T>
  static void measure(const thrust_backend<System>& on, const model<T>& m, thrust_view<onebit_record, System> records) {
    m.for_each_item(on.stream, 1, thrust_impl::onebit_model_block_op<T>{});
    m.for_each_item(on.stream, 2, thrust_impl::onebit_model_column_op<T>{});
    m.for_each_tensor(on.stream, thrust_impl::onebit_model_fold_op<T>{records.data()});
  }
  template <class T>
  static void apply(const thrust_backend<System>& on, const model<T>& m,
                    thrust_view<const onebit_record, System> records,
                    thrust_view<const onebit_step_record, System> step) {
    m.for_each_item(on.stream, 0, thrust_impl::onebit_model_step_op<T>{records.data(), step.data()});
  }

  // One tensor at a time (a separate backend's kernels).
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
    thrust_impl::run_plan<System>(on.stream, records.data(), records.size(), step.data());
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
