// PowerSGD's arithmetic (docs/algorithms.md, "PowerSGD"): a tensor is a row-major
// n x m matrix M, its factors P (n x r) and Q (m x r) row-major too. Every sum runs in double in
// a fixed order (the matrix's elements in storage order), each product rounded before it is added
// (detail::rounded: no fused multiply-add on any target), so every worker, run and build computes
// the same bits from the same inputs; each result is rounded to T once. The host loops read M once
// for all r columns; the element functions give a device's threads the same sums.
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

// The products one element at a time, for a backend that gives each element a thread: each sum is
// the one the host loops below form (the same terms, the same order, in double, rounded once).
// p[i][c] = sum over j of m[i][j] q[j][c].
template <class T>
GRADCOMP_HD T powersgd_p_element(const T* m, std::size_t cols, const T* q, std::size_t r, std::size_t i,
                                 std::size_t c) noexcept {
  double s = 0.0;
  for (std::size_t j = 0; j < cols; ++j)
    s += rounded(static_cast<double>(m[i * cols + j]) * static_cast<double>(q[j * r + c]));
  return static_cast<T>(s);
}
// q[j][c] = sum over i of m[i][j] p[i][c].
template <class T>
GRADCOMP_HD T powersgd_q_element(const T* m, std::size_t rows, std::size_t cols, const T* p, std::size_t r,
                                 std::size_t j, std::size_t c) noexcept {
  double s = 0.0;
  for (std::size_t i = 0; i < rows; ++i)
    s += rounded(static_cast<double>(m[i * cols + j]) * static_cast<double>(p[i * r + c]));
  return static_cast<T>(s);
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

// p = m q: one read of m for all r columns.
template <class T>
void powersgd_project(span<const T> m, std::size_t rows, std::size_t cols, span<const T> q, std::size_t r,
                      span<T> p) {
  std::vector<double> acc(r);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t c = 0; c < r; ++c) acc[c] = 0.0;
    const T* row = m.data() + i * cols;
    for (std::size_t j = 0; j < cols; ++j) {
      const double x = static_cast<double>(row[j]);
      for (std::size_t c = 0; c < r; ++c) acc[c] += rounded(x * static_cast<double>(q[j * r + c]));
    }
    for (std::size_t c = 0; c < r; ++c) p[i * r + c] = static_cast<T>(acc[c]);
  }
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
