// A PowerSGD step over a whole model (powersgd/compressor.hpp): the compressor describes every
// tensor's buffers and its share of the step's work in one table of powersgd_entry, and each
// operation of powersgd_ops<Backend> takes the table and does its part of the step for every
// tensor. The Thrust backend (powersgd/thrust_ops.hpp) does each operation in one launch over all
// tensors, so a step's launches do not grow with the tensors; a backend that goes tensor by tensor
// derives its operations from powersgd_tensor_by_tensor below, with the same element functions
// (powersgd/arithmetic.hpp) and so the same bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../backend.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

// The work-item spaces of a step: each numbers the items of every tensor one after the other.
enum powersgd_space : std::size_t {
  powersgd_elements,  // every element of every tensor: the gradient checks
  powersgd_dense,     // the elements of the tensors this step sends dense
  powersgd_matrix,    // the elements of the tensors this step compresses (M, the update, the error)
  powersgd_p_items,   // a row of M and group of columns (powersgd_column_groups): P's products
  powersgd_q_items,   // a column of M and group of columns: Q's products
  powersgd_p,         // P's elements (rows x r)
  powersgd_q,         // Q's elements (cols x r)
  powersgd_round1,    // round 1's averages: a dense tensor's elements, or P's
  powersgd_matrices,  // one per compressed tensor: the orthogonalisations
  powersgd_spaces
};

// One tensor of a step, in registration order: its buffers (in the backend's memory; null where
// it has none), its shape and its first item in each space.
template <class T>
struct powersgd_entry {
  const T* g = nullptr;       // the step's gradient
  T* e = nullptr;             // the error (compressed, with error feedback)
  T* m = nullptr;             // M = g + e
  T* qo = nullptr;            // this step's Q, orthogonalised
  T* q = nullptr;             // the last averaged Q (the warm start)
  T* p = nullptr;             // the averaged P, orthogonalised
  T* update = nullptr;        // the step's update
  const T* q_from = nullptr;  // where this step's Q starts from: q, or the host's draw
  T* out1 = nullptr;          // its place in round 1's payload (the gradient, or P)
  T* out2 = nullptr;          // its place in round 2's payload (Q)
  const T* avg1 = nullptr;    // round 1's average of it (the update, or P)
  const T* avg2 = nullptr;    // round 2's average of its Q
  std::uint64_t numel = 0, rows = 0, cols = 0, rank = 0;
  std::uint64_t compressed = 0;  // compressed this step
  std::uint64_t first[powersgd_spaces] = {};
  std::uint64_t items[powersgd_spaces] = {};
};

// What check() finds: a gradient that is not finite, or a sum g + e that is not.
inline constexpr std::uint32_t powersgd_bad_gradient = 1;
inline constexpr std::uint32_t powersgd_bad_sum = 2;

// Which values check() reads.
enum class powersgd_check { step, round1, round2 };

// Tensor-by-tensor PowerSGD over a table (a backend without whole-model launches): each operation
// calls Kernels' per-matrix operation (copy, form_m, orthogonalize, project, project_back,
// rebuild) for every tensor in turn, and checks with ops<Backend>::largest_magnitude.
template <class Backend, class Kernels>
struct powersgd_tensor_by_tensor {
  template <class U>
  using view = span<U, memory_space_t<Backend>>;
  // The table: the host's entries.
  template <class T>
  struct table {
    std::vector<powersgd_entry<T>> entries;
  };
  template <class T>
  static void bind(const Backend&, table<T>& t, span<const powersgd_entry<T>> entries) {
    t.entries.assign(entries.begin(), entries.end());
  }

  template <class T>
  static std::uint32_t check(const Backend& on, const table<T>& t, powersgd_check which) {
    std::uint32_t found = 0;
    for (const powersgd_entry<T>& s : t.entries) {
      const bool bad = [&] {
        switch (which) {
          case powersgd_check::step:
            return magnitude_is_nan(on, view<const T>(s.g, s.numel));
          case powersgd_check::round1:
            return s.items[powersgd_round1] != 0 &&
                   magnitude_is_nan(on, view<const T>(s.avg1, s.items[powersgd_round1]));
          case powersgd_check::round2:
            return s.items[powersgd_q] != 0 && magnitude_is_nan(on, view<const T>(s.avg2, s.items[powersgd_q]));
        }
        return false;
      }();
      if (bad) found |= powersgd_bad_gradient;
    }
    if (found != 0 || which != powersgd_check::step) return found;
    for (const powersgd_entry<T>& s : t.entries) {
      if (!s.compressed || s.e == nullptr) continue;
      const view<const std::uint32_t> every;  // dense: no positions
      if (std::isnan(ops<Backend>::largest_magnitude_of_sum(on, view<const T>(s.e, s.numel), every,
                                                             view<const T>(s.g, s.numel))))
        return powersgd_bad_sum;
    }
    return 0;
  }
  // Round 1's payload of the tensors sent dense: their gradients.
  template <class T>
  static void send_dense(const Backend& on, const table<T>& t) {
    for (const powersgd_entry<T>& s : t.entries)
      if (s.items[powersgd_dense] != 0) Kernels::copy(on, view<const T>(s.g, s.numel), view<T>(s.out1, s.numel));
  }
  // M = g + e, Q from where it starts, orthogonalised, and P = M Q into round 1's payload.
  template <class T>
  static void project(const Backend& on, const table<T>& t, double epsilon) {
    for (const powersgd_entry<T>& s : t.entries) {
      if (!s.compressed) continue;
      Kernels::form_m(on, view<const T>(s.g, s.numel), view<const T>(s.e, s.e == nullptr ? 0 : s.numel),
                      view<T>(s.m, s.numel));
      const std::size_t nq = s.cols * s.rank;
      Kernels::copy(on, view<const T>(s.q_from, nq), view<T>(s.qo, nq));
      Kernels::orthogonalize(on, view<T>(s.qo, nq), s.cols, s.rank, epsilon);
      Kernels::project(on, view<const T>(s.m, s.numel), s.rows, s.cols, view<const T>(s.qo, nq), s.rank,
                       view<T>(s.out1, s.rows * s.rank));
    }
  }
  // The dense tensors' updates from round 1's averages.
  template <class T>
  static void take_dense(const Backend& on, const table<T>& t) {
    for (const powersgd_entry<T>& s : t.entries)
      if (s.items[powersgd_dense] != 0)
        Kernels::copy(on, view<const T>(s.avg1, s.numel), view<T>(s.update, s.numel));
  }
  // P from round 1's average, orthogonalised, and Q = M^T P into round 2's payload.
  template <class T>
  static void project_back(const Backend& on, const table<T>& t, double epsilon) {
    for (const powersgd_entry<T>& s : t.entries) {
      if (!s.compressed) continue;
      const std::size_t np = s.rows * s.rank;
      Kernels::copy(on, view<const T>(s.avg1, np), view<T>(s.p, np));
      Kernels::orthogonalize(on, view<T>(s.p, np), s.rows, s.rank, epsilon);
      Kernels::project_back(on, view<const T>(s.m, s.numel), s.rows, s.cols, view<const T>(s.p, np), s.rank,
                            view<T>(s.out2, s.cols * s.rank));
    }
  }
  // Q from round 2's average (the next step's warm start), the update P Q^T and the error.
  template <class T>
  static void rebuild(const Backend& on, const table<T>& t) {
    for (const powersgd_entry<T>& s : t.entries) {
      if (!s.compressed) continue;
      const std::size_t nq = s.cols * s.rank;
      Kernels::copy(on, view<const T>(s.avg2, nq), view<T>(s.q, nq));
      Kernels::rebuild(on, view<const T>(s.p, s.rows * s.rank), view<const T>(s.q, nq), s.rows, s.cols, s.rank,
                       view<T>(s.update, s.numel), view<const T>(s.m, s.numel),
                       view<T>(s.e, s.e == nullptr ? 0 : s.numel));
    }
  }

 private:
  template <class T>
  static bool magnitude_is_nan(const Backend& on, view<const T> values) {
    return std::isnan(ops<Backend>::largest_magnitude(on, values));
  }
};

}  // namespace detail
}  // namespace gradcomp
