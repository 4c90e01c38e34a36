// detail::onebit_ops<cpu_backend>: the CPU kernels of 1-bit SGD (onebit/step_plan.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "step_plan.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

template <>
struct onebit_ops<cpu_backend> {
  // One read of g and r, row by row (each block's sums of every column in row order, then the
  // blocks in order: the portable order of onebit/step_plan.hpp), then each column's two values
  // and the tensor's record.
  template <class T>
  static void measure(const cpu_backend&, span<const T> g, span<const T> r, span<onebit_partial<T>> partials,
                      span<onebit_column> cols, span<onebit_record> records, std::size_t t) {
    const std::size_t columns = cols.size(), n = g.size();
    const std::size_t rows = columns == 0 ? 0 : n / columns, blocks = onebit_blocks(n, columns);
    const T* rp = r.empty() ? nullptr : r.data();
    for (std::size_t b = 0; b < blocks; ++b) {
      onebit_partial<T>* part = partials.data() + b * columns;
      for (std::size_t c = 0; c < columns; ++c) part[c] = onebit_partial<T>{};
      const std::size_t last = (b + 1) * onebit_block_rows < rows ? (b + 1) * onebit_block_rows : rows;
      for (std::size_t row = b * onebit_block_rows; row < last; ++row) {
        const std::size_t base = row * columns;
        for (std::size_t c = 0; c < columns; ++c) onebit_add(g[base + c], onebit_v(g.data(), rp, base + c), part[c]);
      }
    }
    for (std::size_t c = 0; c < columns; ++c) cols[c] = onebit_column_of(partials.data(), blocks, columns, c, rows);
    onebit_fold(cols.data(), columns, records[t]);
  }
  static void plan(const cpu_backend&, span<const onebit_record> records, span<onebit_step_record> step) {
    plan_step(records.data(), records.size(), step.data());
  }
  // The step, if the verdict allows: a compressed tensor sends its column's value for each
  // element and keeps r = v - sent; a dense one sends g.
  template <class T>
  static void apply(const cpu_backend&, span<const T> g, span<T> r, span<T> values, span<const onebit_column> cols,
                    span<const onebit_record> records, std::size_t t, span<const onebit_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(errc::ok)) return;
    const std::size_t n = g.size();
    if (records[t].compressed == 0) {
      for (std::size_t i = 0; i < n; ++i) values[i] = g[i];
      return;
    }
    const std::size_t columns = cols.size();
    for (std::size_t base = 0; base < n; base += columns) {
      for (std::size_t c = 0; c < columns; ++c) {
        const T v = static_cast<T>(g[base + c] + r[base + c]);
        const T sent = onebit_value(v, cols[c]);
        values[base + c] = sent;
        r[base + c] = static_cast<T>(v - sent);
      }
    }
  }
};

}  // namespace detail
}  // namespace gradcomp
