// The definitions of powersgd/separate_ops.hpp: each powersgd_ops<thrust_backend<System>>'s, for the
// translation unit that compiles a separate backend's kernels (<gradcomp/separate_kernels.hpp>).
#pragma once

#include "../separate/thrust_kernels.hpp"
#include "separate_ops.hpp"
#include "thrust_ops.hpp"

/// @cond GRADCOMP_INTERNAL
namespace gradcomp {
namespace detail {

#define GRADCOMP_DETAIL_POWERSGD_DEFINE(name, params, args) \
  GRADCOMP_SEPARATE_DEFINE(powersgd_separate_kernels, powersgd_ops, name, params, args)
GRADCOMP_DETAIL_POWERSGD_SEPARATE(GRADCOMP_DETAIL_POWERSGD_DEFINE)
#undef GRADCOMP_DETAIL_POWERSGD_DEFINE

template <class Kernels, class T>
using powersgd_thrust_table = typename powersgd_ops<thrust_of_t<Kernels>>::template table<T>;
template <class Kernels, class T>
const powersgd_thrust_table<Kernels, T>& as_thrust(const separate_handle<powersgd_separate_table<Kernels, T>>& t) {
  return *static_cast<const powersgd_thrust_table<Kernels, T>*>(t.address());
}

template <class Kernels, class T>
void* powersgd_separate_table<Kernels, T>::copy(const void* t) {
  return copy_held<powersgd_thrust_table<Kernels, T>>(t);
}
template <class Kernels, class T>
void powersgd_separate_table<Kernels, T>::release(void* t) noexcept {
  release_held<powersgd_thrust_table<Kernels, T>>(t);
}
template <class Kernels, class T>
void powersgd_separate_table<Kernels, T>::bind(const backend& on, table& t, span<const powersgd_entry<T>> entries) {
  if (t.address() == nullptr) t = table(new powersgd_thrust_table<Kernels, T>());
  auto& thrust_table = *static_cast<powersgd_thrust_table<Kernels, T>*>(t.address());
  powersgd_ops<thrust_of_t<Kernels>>::bind(as_thrust(on), thrust_table, entries);
}
template <class Kernels, class T>
std::uint32_t powersgd_separate_table<Kernels, T>::check(const backend& on, const table& t, powersgd_check which) {
  return powersgd_ops<thrust_of_t<Kernels>>::check(as_thrust(on), as_thrust(t), which);
}
#define GRADCOMP_DETAIL_POWERSGD_TABLE_DEFINE(name, params, args) \
  GRADCOMP_SEPARATE_DEFINE(powersgd_separate_table, powersgd_ops, name, params, args)
GRADCOMP_DETAIL_POWERSGD_TABLE(GRADCOMP_DETAIL_POWERSGD_TABLE_DEFINE)
#undef GRADCOMP_DETAIL_POWERSGD_TABLE_DEFINE

}  // namespace detail
}  // namespace gradcomp
/// @endcond
