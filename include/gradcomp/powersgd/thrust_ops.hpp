// detail::powersgd_ops<thrust_backend<System>>: PowerSGD's products on the portable Thrust backend,
// a thread per row of M for P and per column of M for Q (each reading its row or column once for
// up to 8 of the r columns), a thread per element of the update (a sum over the r columns) and
// one thread per orthogonalised matrix,
// with the element functions of powersgd/arithmetic.hpp: bitwise the CPU backend's results.
#pragma once

#include <cstddef>

#include <thrust/copy.h>

#include "../thrust/kernel_support.hpp"
#include "arithmetic.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class T>
struct powersgd_form_m_op {
  const T *g, *e;
  T* m;
  GRADCOMP_HD void operator()(std::size_t i) const { m[i] = e == nullptr ? g[i] : static_cast<T>(g[i] + e[i]); }
};

template <class T>
struct powersgd_orthogonalize_op {
  T* a;
  std::size_t rows, r;
  double epsilon;
  GRADCOMP_HD void operator()(std::size_t) const { powersgd_orthogonalize(a, rows, r, epsilon); }
};

// A thread per row of M and group of columns (powersgd_column_groups): p's elements of both.
template <class T>
struct powersgd_project_op {
  const T *m, *q;
  std::size_t cols, r, groups;
  T* p;
  GRADCOMP_HD void operator()(std::size_t k) const {
    const std::size_t g = k % groups;
    powersgd_p_row(m, cols, q, r, k / groups, powersgd_group_first(g), powersgd_group_size(r, g), p);
  }
};

// A thread per column of M and group of columns of P: q's elements of both.
template <class T>
struct powersgd_project_back_op {
  const T *m, *p;
  std::size_t rows, cols, r, groups;
  T* q;
  GRADCOMP_HD void operator()(std::size_t k) const {
    const std::size_t g = k % groups;
    powersgd_q_column(m, rows, cols, p, r, k / groups, powersgd_group_first(g), powersgd_group_size(r, g), q);
  }
};

template <class T>
struct powersgd_rebuild_op {
  const T *p, *q;
  std::size_t cols, r;
  T* out;
  const T* m;
  T* e;
  GRADCOMP_HD void operator()(std::size_t k) const {
    powersgd_rebuild_element(p, q, cols, r, k / cols, k % cols, out, m, e);
  }
};

}  // namespace thrust_impl

/// PowerSGD's copies and products on the Thrust backend: each call one launch on the backend's stream.
template <class System>
struct powersgd_ops<thrust_backend<System>> {
  using backend = thrust_backend<System>;
  template <class U>
  using view = thrust_view<U, System>;

  template <class T>
  static void copy(const backend& on, view<const T> from, view<T> to) {
    thrust::copy_n(thrust_impl::exec<System>(on.stream), from.data(), from.size(), to.data());
  }
  template <class T>
  static void form_m(const backend& on, view<const T> g, view<const T> e, view<T> m) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::powersgd_form_m_op<T>{g.data(), e.empty() ? nullptr : e.data(), m.data()});
  }
  template <class T>
  static void orthogonalize(const backend& on, view<T> a, std::size_t rows, std::size_t r, double epsilon) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), 1,
                       thrust_impl::powersgd_orthogonalize_op<T>{a.data(), rows, r, epsilon});
  }
  template <class T>
  static void project(const backend& on, view<const T> m, std::size_t rows, std::size_t cols, view<const T> q,
                      std::size_t r, view<T> p) {
    const std::size_t groups = powersgd_column_groups(r);
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), rows * groups,
                       thrust_impl::powersgd_project_op<T>{m.data(), q.data(), cols, r, groups, p.data()});
  }
  template <class T>
  static void project_back(const backend& on, view<const T> m, std::size_t rows, std::size_t cols, view<const T> p,
                           std::size_t r, view<T> q) {
    const std::size_t groups = powersgd_column_groups(r);
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), cols * groups,
                       thrust_impl::powersgd_project_back_op<T>{m.data(), p.data(), rows, cols, r, groups, q.data()});
  }
  template <class T>
  static void rebuild(const backend& on, view<const T> p, view<const T> q, std::size_t, std::size_t cols,
                      std::size_t r, view<T> out, view<const T> m, view<T> e) {
    thrust::for_each_n(
        thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), out.size(),
        thrust_impl::powersgd_rebuild_op<T>{p.data(), q.data(), cols, r, out.data(), m.data(),
                                            e.empty() ? nullptr : e.data()});
  }
};

}  // namespace detail
}  // namespace gradcomp
