// detail::powersgd_ops<separate_backend<Kernels>>: PowerSGD's kernels on a separate backend, each
// powersgd_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// powersgd/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "arithmetic.hpp"
#include "model.hpp"

namespace gradcomp {
namespace detail {

// The operations, as X(name, (parameters), (arguments)) (GRADCOMP_SEPARATE_DECLARE).
#define GRADCOMP_DETAIL_POWERSGD_SEPARATE(X)                                                                       \
  X(copy, (const backend& on, view<const T> from, view<T> to), (on, from, to))                                     \
  X(form_m, (const backend& on, view<const T> g, view<const T> e, view<T> m), (on, g, e, m))                       \
  X(orthogonalize, (const backend& on, view<T> a, std::size_t rows, std::size_t r, double epsilon),                \
    (on, a, rows, r, epsilon))                                                                                     \
  X(project,                                                                                                       \
    (const backend& on, view<const T> m, std::size_t rows, std::size_t cols, view<const T> q, std::size_t r,       \
     view<T> p),                                                                                                   \
    (on, m, rows, cols, q, r, p))                                                                                  \
  X(project_back,                                                                                                  \
    (const backend& on, view<const T> m, std::size_t rows, std::size_t cols, view<const T> p, std::size_t r,       \
     view<T> q),                                                                                                   \
    (on, m, rows, cols, p, r, q))                                                                                  \
  X(rebuild,                                                                                                       \
    (const backend& on, view<const T> p, view<const T> q, std::size_t rows, std::size_t cols, std::size_t r,       \
     view<T> out, view<const T> m, view<T> e),                                                                     \
    (on, p, q, rows, cols, r, out, m, e))

GRADCOMP_SEPARATE_KERNELS(powersgd_separate_kernels, GRADCOMP_DETAIL_POWERSGD_SEPARATE);

// The operations of the table below that return nothing, as X(name, (parameters), (arguments)).
#define GRADCOMP_DETAIL_POWERSGD_TABLE(X)                                                \
  X(send_dense, (const backend& on, const table& t), (on, t))                            \
  X(project, (const backend& on, const table& t, double epsilon), (on, t, epsilon))      \
  X(take_dense, (const backend& on, const table& t), (on, t))                            \
  X(project_back, (const backend& on, const table& t, double epsilon), (on, t, epsilon)) \
  X(rebuild, (const backend& on, const table& t), (on, t))

// A step's table on a separate backend: the Thrust backend's (powersgd_ops<thrust_backend<System>>::
// table<T>), made at the first bind by the unit that compiles the kernels, with the Thrust
// backend's operations over it: a step's launches do not depend on its tensors, as there.
template <class Kernels, class T>
struct powersgd_separate_table {
  using backend = separate_backend<Kernels>;
  using table = separate_handle<powersgd_separate_table>;
  static void* copy(const void* table);
  static void release(void* table) noexcept;
  static void bind(const backend& on, table& t, span<const powersgd_entry<T>> entries);
  static std::uint32_t check(const backend& on, const table& t, powersgd_check which);
  GRADCOMP_DETAIL_POWERSGD_TABLE(GRADCOMP_SEPARATE_DECLARE)
};

// A step's operations over the whole model (the table above); each matrix's (the snapshots'
// copies) in the kernels' translation unit too.
template <class Kernels>
struct powersgd_ops<separate_backend<Kernels>>
    : separate_method_ops<powersgd_separate_kernels, Kernels>,
      powersgd_separate_table<Kernels, float>,
      powersgd_separate_table<Kernels, double> {
  using base = separate_method_ops<powersgd_separate_kernels, Kernels>;
  using f_table = powersgd_separate_table<Kernels, float>;
  using d_table = powersgd_separate_table<Kernels, double>;
  template <class T>
  using table = typename powersgd_separate_table<Kernels, T>::table;
  using base::f::copy, base::d::copy, base::f::form_m, base::d::form_m, base::f::orthogonalize,
      base::d::orthogonalize, base::f::project, base::d::project, base::f::project_back, base::d::project_back,
      base::f::rebuild, base::d::rebuild;
  using f_table::bind, d_table::bind, f_table::check, d_table::check, f_table::send_dense, d_table::send_dense,
      f_table::project, d_table::project, f_table::take_dense, d_table::take_dense, f_table::project_back,
      d_table::project_back, f_table::rebuild, d_table::rebuild;
};

}  // namespace detail
}  // namespace gradcomp
