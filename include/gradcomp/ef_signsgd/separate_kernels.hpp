// The definitions of ef_signsgd/separate_ops.hpp: each ef_sign_ops<thrust_backend<System>>'s, for
// the translation unit that compiles a separate backend's kernels (<gradcomp/separate_kernels.hpp>).
#pragma once

#include "../separate/thrust_kernels.hpp"
#include "separate_ops.hpp"
#include "thrust_ops.hpp"

namespace gradcomp {
namespace detail {

template <class Kernels>
using ef_sign_thrust_ops = ef_sign_ops<thrust_of_t<Kernels>>;

GRADCOMP_SEPARATE_KERNEL(ef_sign_separate_kernels, measure, void)(const backend& on, T lr, view<const T> g,
                                                                  view<const T> e, view<ef_sign_record> records,
                                                                  std::size_t t) {
  ef_sign_thrust_ops<Kernels>::measure(as_thrust(on), lr, as_thrust(g), as_thrust(e), as_thrust(records), t);
}
GRADCOMP_SEPARATE_KERNEL(ef_sign_separate_kernels, plan, void)(const backend& on, view<ef_sign_record> records,
                                                               view<ef_sign_step_record> step) {
  ef_sign_thrust_ops<Kernels>::plan(as_thrust(on), as_thrust(records), as_thrust(step));
}
GRADCOMP_SEPARATE_KERNEL(ef_sign_separate_kernels, apply, void)(const backend& on, T lr, view<const T> g, view<T> e,
                                                                view<T> values, view<const ef_sign_record> records,
                                                                std::size_t t, view<const ef_sign_step_record> step) {
  ef_sign_thrust_ops<Kernels>::apply(as_thrust(on), lr, as_thrust(g), as_thrust(e), as_thrust(values),
                                     as_thrust(records), t, as_thrust(step));
}

}  // namespace detail
}  // namespace gradcomp
