// detail::powersgd_ops<thrust_backend<System>>: PowerSGD's products on the portable Thrust backend,
// a thread per row of M for P and per column of M for Q (each reading its row or column once for
// up to 8 of the r columns), a thread per element of the update (a sum over the r columns) and
// one thread per orthogonalised matrix,
// with the element functions of powersgd/arithmetic.hpp: bitwise the CPU backend's results.
// A step's operations over the whole model (powersgd/model.hpp) are one launch each, over every
// tensor's items of one space: a step's launches do not depend on the number of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <thrust/copy.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "../detail/magnitude.hpp"
#include "../thrust/kernel_support.hpp"
#include "../thrust/model_table.hpp"
#include "arithmetic.hpp"
#include "model.hpp"

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

// The flags (powersgd_bad_gradient, powersgd_bad_sum) of item k in space `space`.
template <class T>
struct powersgd_check_op {
  const powersgd_entry<T>* entries;
  std::uint32_t count;
  std::size_t space;
  powersgd_check which;
  GRADCOMP_HD std::uint32_t operator()(std::size_t k) const {
    const powersgd_entry<T>& s = entries[tensor_of_item(entries, count, space, k)];
    const std::uint64_t j = k - s.first[space];
    if (which == powersgd_check::round1) return is_finite_key<T>(magnitude_key(s.avg1[j])) ? 0u : powersgd_bad_gradient;
    if (which == powersgd_check::round2) return is_finite_key<T>(magnitude_key(s.avg2[j])) ? 0u : powersgd_bad_gradient;
    std::uint32_t flags = is_finite_key<T>(magnitude_key(s.g[j])) ? 0u : powersgd_bad_gradient;
    if (s.compressed != 0 && s.e != nullptr && !is_finite_key<T>(magnitude_key(static_cast<T>(s.e[j] + s.g[j]))))
      flags |= powersgd_bad_sum;
    return flags;
  }
};

template <class T>
struct powersgd_send_dense_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t j) const {
    s.out1[j] = s.g[j];
  }
};
template <class T>
struct powersgd_form_m_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t j) const {
    s.m[j] = s.e == nullptr ? s.g[j] : static_cast<T>(s.g[j] + s.e[j]);
  }
};
template <class T>
struct powersgd_start_q_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t j) const {
    s.qo[j] = s.q_from[j];
  }
};
template <class T>
struct powersgd_orthogonalize_q_item {
  double epsilon;
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t) const {
    powersgd_orthogonalize(s.qo, s.cols, s.rank, epsilon);
  }
};
template <class T>
struct powersgd_project_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t k) const {
    const std::size_t groups = powersgd_column_groups(s.rank), g = k % groups;
    powersgd_p_row(s.m, s.cols, s.qo, s.rank, k / groups, powersgd_group_first(g), powersgd_group_size(s.rank, g),
                   s.out1);
  }
};
template <class T>
struct powersgd_take_dense_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t j) const {
    s.update[j] = s.avg1[j];
  }
};
template <class T>
struct powersgd_take_p_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t j) const {
    s.p[j] = s.avg1[j];
  }
};
template <class T>
struct powersgd_orthogonalize_p_item {
  double epsilon;
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t) const {
    powersgd_orthogonalize(s.p, s.rows, s.rank, epsilon);
  }
};
template <class T>
struct powersgd_project_back_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t k) const {
    const std::size_t groups = powersgd_column_groups(s.rank), g = k % groups;
    powersgd_q_column(s.m, s.rows, s.cols, s.p, s.rank, k / groups, powersgd_group_first(g),
                      powersgd_group_size(s.rank, g), s.out2);
  }
};
template <class T>
struct powersgd_take_q_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t j) const {
    s.q[j] = s.avg2[j];
  }
};
template <class T>
struct powersgd_rebuild_item {
  GRADCOMP_HD void operator()(const powersgd_entry<T>& s, std::uint32_t, std::uint64_t k) const {
    powersgd_rebuild_element(s.p, s.q, s.cols, s.rank, k / s.cols, k % s.cols, s.update, s.m, s.e);
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

  /// A step's table (powersgd/model.hpp) in the system's memory, uploaded (in the stream's order,
  /// without the host waiting) when an entry changed since the last bind: a training loop whose
  /// gradients and averages stay where they are uploads it once.
  template <class T>
  struct table {
    thrust_impl::system_buffer<powersgd_entry<T>, System> device;
    thrust_impl::staging_buffer<powersgd_entry<T>, System> host;
    std::uint64_t items[powersgd_spaces] = {};
    std::uint32_t count = 0;
  };
  template <class T>
  static void bind(const backend& on, table<T>& t, span<const powersgd_entry<T>> entries) {
    bool dirty = entries.size() != t.count;
    if (dirty) {
      t.device = thrust_impl::system_buffer<powersgd_entry<T>, System>(entries.size());
      t.host = thrust_impl::staging_buffer<powersgd_entry<T>, System>(entries.size());
      t.count = static_cast<std::uint32_t>(entries.size());
    } else {
      dirty = entries.size() != 0 &&
              std::memcmp(entries.data(), t.host.data(), entries.size() * sizeof(powersgd_entry<T>)) != 0;
    }
    for (std::size_t k = 0; k < powersgd_spaces; ++k) t.items[k] = 0;
    for (const powersgd_entry<T>& s : entries)
      for (std::size_t k = 0; k < powersgd_spaces; ++k) t.items[k] += s.items[k];
    if (!dirty || entries.size() == 0) return;
    std::memcpy(t.host.data(), entries.data(), entries.size() * sizeof(powersgd_entry<T>));
    thrust_impl::execution<System>::upload(on.stream, t.host.data(), t.device.view().data(),
                                           entries.size() * sizeof(powersgd_entry<T>));
  }
  // One launch over the table's checks; returns to the host.
  template <class T>
  static std::uint32_t check(const backend& on, const table<T>& t, powersgd_check which) {
    const std::size_t space = which == powersgd_check::step     ? powersgd_elements
                              : which == powersgd_check::round1 ? powersgd_round1
                                                                : powersgd_q;
    if (t.items[space] == 0) return 0;
    const thrust::counting_iterator<std::size_t> first(0);
    return thrust_impl::returned(thrust::transform_reduce(
        thrust_impl::exec<System>(on.stream), first, first + static_cast<std::ptrdiff_t>(t.items[space]),
        thrust_impl::powersgd_check_op<T>{t.device.view().data(), t.count, space, which}, std::uint32_t(0),
        thrust::bit_or<std::uint32_t>()));
  }
  template <class T>
  static void send_dense(const backend& on, const table<T>& t) {
    each(on, t, powersgd_dense, thrust_impl::powersgd_send_dense_item<T>{});
  }
  template <class T>
  static void project(const backend& on, const table<T>& t, double epsilon) {
    each(on, t, powersgd_matrix, thrust_impl::powersgd_form_m_item<T>{});
    each(on, t, powersgd_q, thrust_impl::powersgd_start_q_item<T>{});
    each(on, t, powersgd_matrices, thrust_impl::powersgd_orthogonalize_q_item<T>{epsilon});
    each(on, t, powersgd_p_items, thrust_impl::powersgd_project_item<T>{});
  }
  template <class T>
  static void take_dense(const backend& on, const table<T>& t) {
    each(on, t, powersgd_dense, thrust_impl::powersgd_take_dense_item<T>{});
  }
  template <class T>
  static void project_back(const backend& on, const table<T>& t, double epsilon) {
    each(on, t, powersgd_p, thrust_impl::powersgd_take_p_item<T>{});
    each(on, t, powersgd_matrices, thrust_impl::powersgd_orthogonalize_p_item<T>{epsilon});
    each(on, t, powersgd_q_items, thrust_impl::powersgd_project_back_item<T>{});
  }
  template <class T>
  static void rebuild(const backend& on, const table<T>& t) {
    each(on, t, powersgd_q, thrust_impl::powersgd_take_q_item<T>{});
    each(on, t, powersgd_matrix, thrust_impl::powersgd_rebuild_item<T>{});
  }

 private:
  // f(entry, t, j) for every item j of every entry t in `space`: one launch (none for no items).
  template <class T, class F>
  static void each(const backend& on, const table<T>& t, std::size_t space, F f) {
    if (t.items[space] == 0) return;
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0),
                       t.items[space],
                       thrust_impl::model_item_op<powersgd_entry<T>, F>{t.device.view().data(), t.count, space, f});
  }
};

}  // namespace detail
}  // namespace gradcomp
