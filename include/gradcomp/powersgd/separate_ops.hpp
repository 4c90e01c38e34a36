// detail::powersgd_ops<separate_backend<Kernels>>: PowerSGD's kernels on a separate backend, each
// powersgd_ops<thrust_backend<System>>'s, declared for host code (no Thrust) and defined by
// powersgd/separate_kernels.hpp in the translation unit that compiles the backend's kernels.
#pragma once

#include <cstddef>

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

// A step's operations go tensor by tensor (powersgd/model.hpp), each matrix's in the kernels'
// translation unit.
template <class Kernels>
struct powersgd_ops<separate_backend<Kernels>>
    : separate_method_ops<powersgd_separate_kernels, Kernels>,
      powersgd_tensor_by_tensor<separate_backend<Kernels>, powersgd_ops<separate_backend<Kernels>>> {
  using base = separate_method_ops<powersgd_separate_kernels, Kernels>;
  using model = powersgd_tensor_by_tensor<separate_backend<Kernels>, powersgd_ops<separate_backend<Kernels>>>;
  using base::f::copy, base::d::copy, base::f::form_m, base::d::form_m, base::f::orthogonalize,
      base::d::orthogonalize, base::f::project, base::d::project, base::f::project_back, base::d::project_back,
      base::f::rebuild, base::d::rebuild;
  using model::bind, model::check, model::send_dense, model::project, model::take_dense, model::project_back,
      model::rebuild;
};

}  // namespace detail
}  // namespace gradcomp
