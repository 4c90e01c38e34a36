// detail::powersgd_ops<cpu_backend>: PowerSGD's products on the CPU (powersgd/arithmetic.hpp), each
// pass reading M once for all r columns; a step's operations tensor by tensor (powersgd/model.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "../backend.hpp"
#include "../span.hpp"
#include "arithmetic.hpp"
#include "model.hpp"

namespace gradcomp {
namespace detail {

template <>
struct powersgd_ops<cpu_backend> : powersgd_tensor_by_tensor<cpu_backend, powersgd_ops<cpu_backend>> {
  using model = powersgd_tensor_by_tensor<cpu_backend, powersgd_ops<cpu_backend>>;
  using model::bind, model::check, model::send_dense, model::project, model::take_dense, model::project_back,
      model::rebuild;
  template <class T>
  static void copy(const cpu_backend&, span<const T> from, span<T> to) {
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = from[i];
  }
  // m = g + e, one rounding each (g where e is empty): one pass.
  template <class T>
  static void form_m(const cpu_backend&, span<const T> g, span<const T> e, span<T> m) {
    if (e.empty())
      for (std::size_t i = 0; i < g.size(); ++i) m[i] = g[i];
    else
      for (std::size_t i = 0; i < g.size(); ++i) m[i] = static_cast<T>(g[i] + e[i]);
  }
  template <class T>
  static void orthogonalize(const cpu_backend&, span<T> a, std::size_t rows, std::size_t r, double epsilon) {
    powersgd_orthogonalize(a, rows, r, epsilon);
  }
  template <class T>
  static void project(const cpu_backend&, span<const T> m, std::size_t rows, std::size_t cols, span<const T> q,
                      std::size_t r, span<T> p) {
    powersgd_project(m, rows, cols, q, r, p);
  }
  template <class T>
  static void project_back(const cpu_backend&, span<const T> m, std::size_t rows, std::size_t cols, span<const T> p,
                           std::size_t r, span<T> q) {
    std::vector<double> acc;
    powersgd_project_back(m, rows, cols, p, r, q, acc);
  }
  template <class T>
  static void rebuild(const cpu_backend&, span<const T> p, span<const T> q, std::size_t rows, std::size_t cols,
                      std::size_t r, span<T> out, span<const T> m, span<T> e) {
    powersgd_rebuild(p, q, rows, cols, r, out, m, e);
  }
};

}  // namespace detail
}  // namespace gradcomp
