// The 1-bit SGD step split into host plan and backend execution (docs/backends.md), as for
// EF-SignSGD: the per-tensor records, the per-column sums and the step's verdict live in backend
// memory, the decisions below run where that memory is, and the kernels obey the verdict. A
// backend that runs 1-bit SGD specialises detail::onebit_ops (the CPU's is onebit/cpu_ops.hpp).
//
// The order of every sum is fixed, so that every backend gets the same bits: a tensor of numel
// elements and C columns is a row-major matrix of numel / C rows; the rows are cut into blocks of
// onebit_block_rows, each column of each block is summed in row order (in double, from +0), and
// the blocks' sums of a column are added in block order (from +0).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../config.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/step_verdict.hpp"
#include "../error.hpp"

namespace gradcomp {
namespace detail {

// Rows of a block of the column sums.
inline constexpr std::size_t onebit_block_rows = 256;

// One tensor's record, in backend memory. The host writes `numel`, `columns` and `compressed` at
// registration; the step writes the rest.
struct onebit_record {
  std::uint64_t numel = 0;
  std::uint64_t columns = 1;    // of the row-major matrix the tensor is quantised as
  std::uint8_t g_finite = 1;    // every element of g is finite
  std::uint8_t v_finite = 1;    // every element of v = g + r, and every column's two values, is finite
  std::uint8_t compressed = 0;  // sent as one_bit values (1) or whole (0)
};

// The step's verdict (detail/step_verdict.hpp).
using onebit_step_record = step_status;

// One column's sums over one block of rows (or, in onebit_column_sums, over all of them).
template <class T>
struct onebit_partial {
  double negative = 0.0;        // sum of the elements of v below 0
  double non_negative = 0.0;    // sum of the others
  std::uint64_t negatives = 0;  // how many are below 0
  key_t<T> top_g = 0;           // largest magnitude key of g (a NaN or an infinity shows)
  key_t<T> top_v = 0;           // likewise of v
};

// One column's two values as sent (binary32), and whether its elements were finite.
struct onebit_column {
  float negative = -0.0f;     // the mean of the negative elements (-0 when there are none)
  float non_negative = 0.0f;  // the mean of the others (+0 when there are none)
  std::uint8_t g_finite = 1;
  std::uint8_t v_finite = 1;  // v finite and both means finite in binary32
};

// Blocks of rows of a tensor of `numel` elements in `columns` columns.
GRADCOMP_HD inline std::size_t onebit_blocks(std::size_t numel, std::size_t columns) noexcept {
  const std::size_t rows = columns == 0 ? 0 : numel / columns;
  return (rows + onebit_block_rows - 1) / onebit_block_rows;
}

// Adds element v (and its gradient g) to a column's sums.
template <class T>
GRADCOMP_HD void onebit_add(T g, T v, onebit_partial<T>& p) noexcept {
  const key_t<T> kg = magnitude_key(g), kv = magnitude_key(v);
  p.top_g = kg > p.top_g ? kg : p.top_g;
  p.top_v = kv > p.top_v ? kv : p.top_v;
  if (v < T(0)) {
    p.negative += static_cast<double>(v);
    ++p.negatives;
  } else {
    p.non_negative += static_cast<double>(v);
  }
}

// v = g + r of element j (r null: a tensor without error feedback).
template <class T>
GRADCOMP_HD T onebit_v(const T* g, const T* r, std::size_t j) noexcept {
  return r != nullptr ? static_cast<T>(g[j] + r[j]) : g[j];
}

// Column c's sums over rows [row0, row1), in row order.
template <class T>
GRADCOMP_HD void onebit_block_sums(const T* g, const T* r, std::size_t columns, std::size_t c, std::size_t row0,
                                   std::size_t row1, onebit_partial<T>& p) noexcept {
  for (std::size_t row = row0; row < row1; ++row) {
    const std::size_t j = row * columns + c;
    onebit_add(g[j], onebit_v(g, r, j), p);
  }
}

// Column c's two values from its blocks' sums (part[b * columns + c] for b < blocks, added in
// block order), with `rows` elements in the column.
template <class T>
GRADCOMP_HD onebit_column onebit_column_of(const onebit_partial<T>* part, std::size_t blocks, std::size_t columns,
                                           std::size_t c, std::size_t rows) noexcept {
  onebit_partial<T> s;
  for (std::size_t b = 0; b < blocks; ++b) {
    const onebit_partial<T>& p = part[b * columns + c];
    s.negative += p.negative;
    s.non_negative += p.non_negative;
    s.negatives += p.negatives;
    s.top_g = p.top_g > s.top_g ? p.top_g : s.top_g;
    s.top_v = p.top_v > s.top_v ? p.top_v : s.top_v;
  }
  onebit_column col;
  const std::uint64_t others = rows - s.negatives;
  if (s.negatives != 0) col.negative = static_cast<float>(s.negative / static_cast<double>(s.negatives));
  if (others != 0) col.non_negative = static_cast<float>(s.non_negative / static_cast<double>(others));
  col.g_finite = is_finite_key<T>(s.top_g) ? 1 : 0;
  col.v_finite = is_finite_key<T>(s.top_v) && std::isfinite(col.negative) && std::isfinite(col.non_negative) ? 1 : 0;
  return col;
}

// Folds a tensor's columns into its record (a tensor sent whole only needs a finite g: its
// column values are not sent).
GRADCOMP_HD inline void onebit_fold(const onebit_column* cols, std::size_t count, onebit_record& r) noexcept {
  r.g_finite = 1;
  r.v_finite = 1;
  for (std::size_t c = 0; c < count; ++c) {
    r.g_finite = cols[c].g_finite != 0 ? r.g_finite : 0;
    r.v_finite = cols[c].v_finite != 0 ? r.v_finite : 0;
  }
  if (r.compressed == 0) r.v_finite = r.g_finite;
}

// The value sent for v in a column with values `col`.
template <class T>
GRADCOMP_HD T onebit_value(T v, const onebit_column& col) noexcept {
  return v < T(0) ? static_cast<T>(col.negative) : static_cast<T>(col.non_negative);
}

// Per-backend kernels of 1-bit SGD; each backend that runs it specialises this template:
//   measure<T>(b, g, r, partials, cols, records, t): the column values of tensor t in cols and
//     records[t].g_finite, v_finite, from one read of g and r (r empty for a dense tensor: v = g;
//     partials holds onebit_blocks(numel, columns) * columns sums)
//   plan(b, records, step): plan_step
//   apply<T>(b, g, r, values, cols, records, t, step): if the verdict allows, values = the
//     tensor's message (each element's column value, or g whole) and r = v - values
// The primary template is left undefined: a backend without them does not compile 1-bit SGD.
template <class Backend>
struct onebit_ops;

// The verdict, from the records, in tensor order: a NaN or an infinity in a gradient refuses the
// step with errc::non_finite_input; otherwise a v or a column value that is not finite (in
// binary32) refuses it with errc::state_overflow.
GRADCOMP_HD inline void plan_step(const onebit_record* r, std::size_t count, onebit_step_record* step) noexcept {
  step->status = finite_verdict(r, count, &onebit_record::g_finite, &onebit_record::v_finite);
}

// A tensor's work items in the whole-model launches (model_items, backend.hpp): its elements (space
// 0), its blocks of rows times its columns (1), its columns (2).
inline model_items onebit_model_items(std::size_t numel, std::size_t columns) noexcept {
  model_items items;
  items.count[0] = numel;
  items.count[1] = onebit_blocks(numel, columns) * columns;
  items.count[2] = columns;
  return items;
}

}  // namespace detail
}  // namespace gradcomp
