/// @file separate/thrust_kernels.hpp
/// @brief The memory and the generic operations of a `separate_backend`
/// (`<gradcomp/separate_backend.hpp>`) defined over `thrust_backend<System>`'s, and what a method's
/// own separate kernels use to do the same (`<method>/separate_kernels.hpp`). A program includes
/// `<gradcomp/separate_kernels.hpp>`, which adds every method's.
///
/// Every operation forwards to `thrust_backend<System>`'s, so its results are that backend's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../separate_backend.hpp"
#include "../thrust/model_table.hpp"
#include "../thrust/system_backend.hpp"

namespace gradcomp {

/// The Thrust system the kernels named by `Kernels` run on; defined by
/// `GRADCOMP_INSTANTIATE_KERNELS`.
template <class Kernels>
struct kernels_system;

/// @cond GRADCOMP_INTERNAL
namespace detail {

template <class Kernels>
using thrust_of_t = thrust_backend<typename kernels_system<Kernels>::type>;

// The same backend value, and the same views, as the Thrust backend's.
template <class Kernels>
thrust_of_t<Kernels> as_thrust(const separate_backend<Kernels>& on) noexcept {
  thrust_of_t<Kernels> b;
  b.stream = on.stream;
  return b;
}
template <class Kernels, class U>
span<U, thrust_space<typename kernels_system<Kernels>::type>> as_thrust(span<U, separate_space<Kernels>> v) noexcept {
  return {v.data(), v.size()};
}
// Any other argument as it is.
template <class A>
const A& as_thrust(const A& a) noexcept {
  return a;
}
// f with every argument as the Thrust backend's.
template <class F, class... A>
void call_on_thrust(F f, const A&... a) {
  f(as_thrust(a)...);
}

// ---- Memory ----
template <class Kernels>
void* separate_memory<Kernels>::allocate(std::size_t bytes) {
  return thrust_impl::system_allocate<typename kernels_system<Kernels>::type>(bytes);
}
template <class Kernels>
void separate_memory<Kernels>::release(void* p) noexcept {
  thrust_impl::system_free<typename kernels_system<Kernels>::type>(p);
}
template <class Kernels>
void separate_memory<Kernels>::zero(stream_type s, void* p, std::size_t bytes) {
  thrust_impl::zero_bytes<typename kernels_system<Kernels>::type>(s, p, bytes);
}
template <class Kernels>
void separate_memory<Kernels>::copy_within(stream_type s, const void* from, void* to, std::size_t bytes) {
  thrust::copy_n(thrust_impl::exec<typename kernels_system<Kernels>::type>(s),
                 static_cast<const unsigned char*>(from), bytes, static_cast<unsigned char*>(to));
}
template <class Kernels>
void separate_memory<Kernels>::copy_to_host(stream_type s, const void* from, void* to, std::size_t bytes) {
  thrust_impl::copy_bytes_to_host<typename kernels_system<Kernels>::type>(s, from, to, bytes);
}
template <class Kernels>
void separate_memory<Kernels>::copy_to_system(stream_type s, const void* from, void* to, std::size_t bytes) {
  thrust_impl::copy_bytes_to_system<typename kernels_system<Kernels>::type>(s, from, to, bytes);
}
template <class Kernels>
void separate_memory<Kernels>::wait(stream_type s) {
  thrust_impl::execution<typename kernels_system<Kernels>::type>::wait(s);
}
template <class Kernels>
bool separate_memory<Kernels>::all_below(stream_type s, const std::uint32_t* idx, std::size_t k, std::size_t n) {
  using inner = ops<thrust_of_t<Kernels>>;
  return inner::all_below(as_thrust(separate_backend<Kernels>{}.on(s)),
                          typename inner::template view<const std::uint32_t>(idx, k), n);
}
template <class Kernels>
errc separate_memory<Kernels>::check_positions(stream_type s, const std::uint32_t* idx, std::size_t k, std::size_t n) {
  using inner = ops<thrust_of_t<Kernels>>;
  return inner::check_positions(as_thrust(separate_backend<Kernels>{}.on(s)),
                                typename inner::template view<const std::uint32_t>(idx, k), n);
}
// ---- The tables of the whole-model operations: the Thrust backend's ----
// The object of type X that a separate_handle holds at `address`: a deep copy of it, its release.
template <class X>
void* copy_held(const void* address) {
  return new X(*static_cast<const X*>(address));
}
template <class X>
void release_held(void* address) noexcept {
  delete static_cast<X*>(address);
}

template <class Kernels, class T>
using thrust_model_of_t = thrust_impl::model_table<T, typename kernels_system<Kernels>::type>;

template <class Kernels, class T>
void* separate_model_table<Kernels, T>::create(span<const std::size_t> numel, span<const model_items> items) {
  return new thrust_model_of_t<Kernels, T>(numel, items);
}
template <class Kernels, class T>
void* separate_model_table<Kernels, T>::copy(const void* table) {
  return copy_held<thrust_model_of_t<Kernels, T>>(table);
}
template <class Kernels, class T>
void separate_model_table<Kernels, T>::release(void* table) noexcept {
  release_held<thrust_model_of_t<Kernels, T>>(table);
}
template <class Kernels, class T>
void separate_model_table<Kernels, T>::bind(const separate_backend<Kernels>& on, void* table, fill_fn fill,
                                            void* context) {
  static_cast<thrust_model_of_t<Kernels, T>*>(table)->bind(
      as_thrust(on), [&](std::size_t t, model_tensor<T>& entry) { fill(context, t, entry); });
}
// The model's table; a model without one (no tensor registered) is an empty table.
template <class Kernels, class T>
const thrust_model_of_t<Kernels, T>& as_thrust(const separate_model<Kernels, T>& m) noexcept {
  static const thrust_model_of_t<Kernels, T> empty;
  return m.address() ? *static_cast<const thrust_model_of_t<Kernels, T>*>(m.address()) : empty;
}

// ---- Kernels: each the Thrust backend's ----
// The definition of member `name` (of type `...`) of the kernels `Struct<Kernels, T>` of a
// separate backend.
#define GRADCOMP_SEPARATE_KERNEL(Struct, name, ...) \
  template <class Kernels, class T>                 \
  __VA_ARGS__ Struct<Kernels, T>::name
#define GRADCOMP_DETAIL_SEPARATE(name, ...) GRADCOMP_SEPARATE_KERNEL(separate_kernels, name, __VA_ARGS__)
#define GRADCOMP_DETAIL_EXPAND(...) __VA_ARGS__
// The definition of the operation `name` of a method's kernels `Struct<Kernels, T>` on a separate
// backend (declared by GRADCOMP_SEPARATE_DECLARE, separate_backend.hpp): `Ops<thrust_backend<System>>`'s
// operation of the same name, with the same arguments.
#define GRADCOMP_SEPARATE_DEFINE(Struct, Ops, name, params, args)                                              \
  template <class Kernels, class T>                                                                           \
  void Struct<Kernels, T>::name params {                                                                      \
    call_on_thrust([](const auto&... a) { Ops<thrust_of_t<Kernels>>::name(a...); }, GRADCOMP_DETAIL_EXPAND args); \
  }

GRADCOMP_DETAIL_SEPARATE(exact_topk_workspace_bytes, std::size_t)(std::size_t n, std::size_t k) {
  return ops<thrust_of_t<Kernels>>::template exact_topk_workspace_bytes<T>(thrust_of_t<Kernels>{}, n, k);
}
GRADCOMP_DETAIL_SEPARATE(exact_topk, result<std::size_t>)(const backend& on, view<const T> values, std::size_t k,
                                                          view<std::uint32_t> out, view<std::byte> workspace,
                                                          T* threshold) {
  return ops<thrust_of_t<Kernels>>::exact_topk(as_thrust(on), as_thrust(values), k, as_thrust(out),
                                               as_thrust(workspace), threshold);
}
GRADCOMP_DETAIL_SEPARATE(sampled_threshold_workspace_bytes, std::size_t)(const sampled_threshold_config& cfg,
                                                                         std::size_t n, std::size_t k) {
  return ops<thrust_of_t<Kernels>>::template sampled_threshold_workspace_bytes<T>(thrust_of_t<Kernels>{}, cfg, n, k);
}
GRADCOMP_DETAIL_SEPARATE(sampled_threshold_select, result<selection_result<T>>)(
    const backend& on, view<const T> values, std::size_t k, const sampled_threshold_config& cfg, std::uint64_t seed,
    view<std::uint32_t> out, view<std::byte> workspace) {
  return ops<thrust_of_t<Kernels>>::sampled_threshold_select(as_thrust(on), as_thrust(values), k, cfg, seed,
                                                             as_thrust(out), as_thrust(workspace));
}
GRADCOMP_DETAIL_SEPARATE(fill_zero, void)(const backend& on, view<T> x) {
  ops<thrust_of_t<Kernels>>::fill_zero(as_thrust(on), as_thrust(x));
}
GRADCOMP_DETAIL_SEPARATE(add, void)(const backend& on, view<const T> values, view<T> acc) {
  ops<thrust_of_t<Kernels>>::add(as_thrust(on), as_thrust(values), as_thrust(acc));
}
GRADCOMP_DETAIL_SEPARATE(scatter_add, void)(const backend& on, view<const std::uint32_t> idx, view<const T> values,
                                            view<T> acc) {
  ops<thrust_of_t<Kernels>>::scatter_add(as_thrust(on), as_thrust(idx), as_thrust(values), as_thrust(acc));
}
GRADCOMP_DETAIL_SEPARATE(scale, void)(const backend& on, T c, view<T> x) {
  ops<thrust_of_t<Kernels>>::scale(as_thrust(on), c, as_thrust(x));
}
GRADCOMP_DETAIL_SEPARATE(momentum_apply, void)(const backend& on, momentum_kind kind, T m, view<T> u, view<T> a) {
  ops<thrust_of_t<Kernels>>::momentum_apply(as_thrust(on), kind, m, as_thrust(u), as_thrust(a));
}
GRADCOMP_DETAIL_SEPARATE(largest_magnitude, double)(const backend& on, view<const T> values) {
  return ops<thrust_of_t<Kernels>>::largest_magnitude(as_thrust(on), as_thrust(values));
}
GRADCOMP_DETAIL_SEPARATE(largest_magnitude_of_sum, double)(const backend& on, view<const T> acc,
                                                           view<const std::uint32_t> idx, view<const T> values) {
  return ops<thrust_of_t<Kernels>>::largest_magnitude_of_sum(as_thrust(on), as_thrust(acc), as_thrust(idx),
                                                             as_thrust(values));
}
GRADCOMP_DETAIL_SEPARATE(momentum_apply_magnitudes, state_magnitudes)(const backend& on, momentum_kind kind, T m,
                                                                      T inv, bool scaled, view<const T> u,
                                                                      view<const T> a) {
  return ops<thrust_of_t<Kernels>>::momentum_apply_magnitudes(as_thrust(on), kind, m, inv, scaled, as_thrust(u),
                                                              as_thrust(a));
}
GRADCOMP_DETAIL_SEPARATE(threshold_select, result<std::size_t>)(const backend& on, view<const T> values, key_t<T> key,
                                                                view<std::uint32_t> out, std::size_t* total) {
  return ops<thrust_of_t<Kernels>>::threshold_select(as_thrust(on), as_thrust(values), key, as_thrust(out), total);
}
GRADCOMP_DETAIL_SEPARATE(l2_norm, cpu::norm_result)(const backend& on, view<const T> g) {
  return ops<thrust_of_t<Kernels>>::l2_norm(as_thrust(on), as_thrust(g));
}
GRADCOMP_DETAIL_SEPARATE(momentum_accumulate, void)(const backend& on, momentum_kind kind, T m, T c, view<const T> g,
                                                    view<T> u, view<T> v) {
  ops<thrust_of_t<Kernels>>::momentum_accumulate(as_thrust(on), kind, m, c, as_thrust(g), as_thrust(u), as_thrust(v));
}
GRADCOMP_DETAIL_SEPARATE(gather_and_zero, void)(const backend& on, view<T> v, view<const std::uint32_t> idx,
                                                view<T> values) {
  ops<thrust_of_t<Kernels>>::gather_and_zero(as_thrust(on), as_thrust(v), as_thrust(idx), as_thrust(values));
}
GRADCOMP_DETAIL_SEPARATE(zero_at, void)(const backend& on, view<T> u, view<const std::uint32_t> idx) {
  ops<thrust_of_t<Kernels>>::zero_at(as_thrust(on), as_thrust(u), as_thrust(idx));
}
#undef GRADCOMP_DETAIL_SEPARATE

}  // namespace detail
/// @endcond
}  // namespace gradcomp

/// Compiles the operations of `Template<Kernels, T>` (a method's kernels on a separate backend)
/// for `float` and `double`, at namespace scope, in the translation unit that compiles the other
/// kernels of `separate_backend<Kernels>` (after `GRADCOMP_INSTANTIATE_KERNELS`).
#define GRADCOMP_INSTANTIATE_SEPARATE(Template, Kernels) \
  template struct Template<Kernels, float>;              \
  template struct Template<Kernels, double>

/// Says that `separate_backend<Kernels>`'s kernels run on Thrust system `System` and compiles its
/// memory and generic operations; `GRADCOMP_INSTANTIATE_KERNELS` (`<gradcomp/separate_kernels.hpp>`)
/// adds every method's.
#define GRADCOMP_INSTANTIATE_GENERIC_KERNELS(Kernels, System)                     \
  template <>                                                                     \
  struct gradcomp::kernels_system<Kernels> {                                      \
    using type = System;                                                          \
  };                                                                              \
  template struct gradcomp::detail::separate_memory<Kernels>;                     \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::separate_model_table, Kernels); \
  GRADCOMP_INSTANTIATE_SEPARATE(gradcomp::detail::separate_kernels, Kernels)
