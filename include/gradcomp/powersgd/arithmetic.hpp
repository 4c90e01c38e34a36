// PowerSGD's arithmetic (docs/algorithms.md, "PowerSGD"): a tensor is a row-major
// n x m matrix M, its factors P (n x r) and Q (m x r) row-major too. Every sum runs in double in
// a fixed order (the matrix's elements in storage order), each product rounded before it is added
// (detail::rounded: no fused multiply-add on any target), so every worker, run and build computes
// the same bits from the same inputs; each result is rounded to T once. Each pass reads M once
// for all r columns (r <= 8; in groups of 8 beyond), on the host and in a device's threads.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "../config.hpp"
#include "../span.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {

// PowerSGD's kernels on a backend (powersgd/cpu_ops.hpp, powersgd/thrust_ops.hpp), on one matrix
// in its memory: copy (every bit, -0 included), form_m (m = g + e), orthogonalize, project
// (p = m q), project_back (q = m^T p) and rebuild (p q^T, and the error), every backend with the
// bits of the functions below.
template <class Backend>
struct powersgd_ops;

// Modified Gram-Schmidt on the r columns of the rows x r matrix a, as PyTorch's hook does it:
// column i is divided by its norm (plus epsilon), then its projection is taken out of every later
// column. A column whose norm is 0 with epsilon 0 stays 0 (PyTorch's hook divides by zero there).
// Sequential: one thread of a device runs it for a whole matrix, with these bits.
template <class T>
GRADCOMP_HD void powersgd_orthogonalize(T* a, std::size_t rows, std::size_t r, double epsilon) noexcept {
  for (std::size_t i = 0; i < r; ++i) {
    double squares = 0.0;
    for (std::size_t k = 0; k < rows; ++k) {
      const double x = static_cast<double>(a[k * r + i]);
      squares += rounded(x * x);
    }
    const double divisor = std::sqrt(squares) + epsilon;
    if (divisor == 0.0) continue;
    for (std::size_t k = 0; k < rows; ++k) a[k * r + i] = static_cast<T>(static_cast<double>(a[k * r + i]) / divisor);
    for (std::size_t j = i + 1; j < r; ++j) {
      double dot = 0.0;
      for (std::size_t k = 0; k < rows; ++k)
        dot += rounded(static_cast<double>(a[k * r + i]) * static_cast<double>(a[k * r + j]));
      for (std::size_t k = 0; k < rows; ++k)
        a[k * r + j] =
            static_cast<T>(static_cast<double>(a[k * r + j]) - rounded(dot * static_cast<double>(a[k * r + i])));
    }
  }
}

template <class T>
void powersgd_orthogonalize(span<T> a, std::size_t rows, std::size_t r, double epsilon) noexcept {
  powersgd_orthogonalize(a.data(), rows, r, epsilon);
}

// The products a row or a column at a time, for a backend that gives each a thread: each sum is
// the one the host loops below form (the same terms, the same order, in double, rounded once),
// up to powersgd_columns_per_pass of the r columns from one read of M (a larger r takes a read
// per group of that many).
inline constexpr std::size_t powersgd_columns_per_pass = 8;

// p[i][c0 + c] = sum over j of m[i][j] q[j][c0 + c], for c < n <= powersgd_columns_per_pass.
template <class T>
GRADCOMP_HD void powersgd_p_row(const T* m, std::size_t cols, const T* q, std::size_t r, std::size_t i,
                                std::size_t c0, std::size_t n, T* p) noexcept {
  double acc[powersgd_columns_per_pass] = {};
  const T* row = m + i * cols;
  for (std::size_t j = 0; j < cols; ++j) {
    const double x = static_cast<double>(row[j]);
    for (std::size_t c = 0; c < n; ++c) acc[c] += rounded(x * static_cast<double>(q[j * r + c0 + c]));
  }
  for (std::size_t c = 0; c < n; ++c) p[i * r + c0 + c] = static_cast<T>(acc[c]);
}
// q[j][c0 + c] = sum over i of m[i][j] p[i][c0 + c], for c < n <= powersgd_columns_per_pass.
template <class T>
GRADCOMP_HD void powersgd_q_column(const T* m, std::size_t rows, std::size_t cols, const T* p, std::size_t r,
                                   std::size_t j, std::size_t c0, std::size_t n, T* q) noexcept {
  double acc[powersgd_columns_per_pass] = {};
  for (std::size_t i = 0; i < rows; ++i) {
    const double x = static_cast<double>(m[i * cols + j]);
    for (std::size_t c = 0; c < n; ++c) acc[c] += rounded(x * static_cast<double>(p[i * r + c0 + c]));
  }
  for (std::size_t c = 0; c < n; ++c) q[j * r + c0 + c] = static_cast<T>(acc[c]);
}
// The groups of columns one read of M serves: ceil(r / powersgd_columns_per_pass).
GRADCOMP_HD inline std::size_t powersgd_column_groups(std::size_t r) noexcept {
  return (r + powersgd_columns_per_pass - 1) / powersgd_columns_per_pass;
}
// Group g's first column and its count.
GRADCOMP_HD inline std::size_t powersgd_group_first(std::size_t g) noexcept { return g * powersgd_columns_per_pass; }
GRADCOMP_HD inline std::size_t powersgd_group_size(std::size_t r, std::size_t g) noexcept {
  return r - g * powersgd_columns_per_pass < powersgd_columns_per_pass ? r - g * powersgd_columns_per_pass
                                                                       : powersgd_columns_per_pass;
}
// out[i][j] = sum over c of p[i][c] q[j][c], and with error feedback (e not null) e = m - out.
template <class T>
GRADCOMP_HD void powersgd_rebuild_element(const T* p, const T* q, std::size_t cols, std::size_t r, std::size_t i,
                                          std::size_t j, T* out, const T* m, T* e) noexcept {
  double s = 0.0;
  for (std::size_t c = 0; c < r; ++c)
    s += rounded(static_cast<double>(p[i * r + c]) * static_cast<double>(q[j * r + c]));
  const T v = static_cast<T>(s);
  out[i * cols + j] = v;
  if (e != nullptr) e[i * cols + j] = static_cast<T>(m[i * cols + j] - v);
}

// p = m q: one read of m's rows for up to powersgd_columns_per_pass columns.
template <class T>
void powersgd_project(span<const T> m, std::size_t rows, std::size_t cols, span<const T> q, std::size_t r,
                      span<T> p) noexcept {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t g = 0; g < powersgd_column_groups(r); ++g)
      powersgd_p_row(m.data(), cols, q.data(), r, i, powersgd_group_first(g), powersgd_group_size(r, g), p.data());
}

// q = m^T p: one read of m, in storage order, into a cols x r accumulator.
template <class T>
void powersgd_project_back(span<const T> m, std::size_t rows, std::size_t cols, span<const T> p, std::size_t r,
                           span<T> q, std::vector<double>& acc) {
  acc.assign(cols * r, 0.0);
  for (std::size_t i = 0; i < rows; ++i) {
    const T* row = m.data() + i * cols;
    for (std::size_t j = 0; j < cols; ++j) {
      const double x = static_cast<double>(row[j]);
      for (std::size_t c = 0; c < r; ++c) acc[j * r + c] += rounded(x * static_cast<double>(p[i * r + c]));
    }
  }
  for (std::size_t k = 0; k < cols * r; ++k) q[k] = static_cast<T>(acc[k]);
}

// out = p q^T, and with error feedback e = m - out (m: this worker's matrix).
template <class T>
void powersgd_rebuild(span<const T> p, span<const T> q, std::size_t rows, std::size_t cols, std::size_t r, span<T> out,
                      span<const T> m, span<T> e) noexcept {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      powersgd_rebuild_element(p.data(), q.data(), cols, r, i, j, out.data(), m.data(), e.empty() ? nullptr : e.data());
}

// A standard normal draw from two uniform draws in [0, 1) (Box-Muller; u1 taken as 1 - u so the
// logarithm's argument is in (0, 1]).
inline double powersgd_normal(double u1, double u2) noexcept {
  const double pi = 3.14159265358979323846;
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * pi * u2);
}

}  // namespace detail
}  // namespace gradcomp
