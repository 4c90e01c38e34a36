/// @file separate_backend.hpp
/// @brief A backend whose kernels are compiled in one other translation unit: host code that
/// includes only this header (no Thrust, no CUDA headers, any C++ compiler) uses the portable
/// Thrust backend compiled elsewhere, typically by nvcc in one `.cu` file.
///
/// `separate_backend<Kernels>` is a backend like any other (compressors, the aggregator, the
/// public building blocks and `allocate_buffer` take it), with its own memory space. Every
/// operation that runs on its system is declared for host code, here and in each method's
/// `<method>/separate_ops.hpp` (which `<gradcomp/gradcomp.hpp>` includes), and defined by
/// `<gradcomp/separate_kernels.hpp>`: one translation unit, compiled with Thrust (by nvcc for the
/// GPU), instantiates them for a Thrust system with `GRADCOMP_INSTANTIATE_KERNELS(Kernels, System)`,
/// for `float` and `double`. The program links the two; the results are those of
/// `thrust_backend<System>`, bit for bit.
///
/// `cuda_backend` names the usual case: the kernels of `thrust::system::cuda::tag`, instantiated
/// in a `.cu` file with `GRADCOMP_INSTANTIATE_KERNELS(gradcomp::cuda_kernels,
/// thrust::system::cuda::tag)`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include "backend.hpp"
#include "cpu/dgc_kernels.hpp"
#include "detail/assign.hpp"
#include "detail/magnitude.hpp"
#include "detail/state_bounds.hpp"
#include "momentum_kind.hpp"
#include "error.hpp"
#include "selection_types.hpp"
#include "span.hpp"

namespace gradcomp {

/// The memory space of `separate_backend<Kernels>`: its system's memory. Not host accessible.
template <class Kernels>
struct separate_space {};

/**
 * @brief The portable Thrust backend with its kernels compiled in another translation unit
 * (see the top of separate_backend.hpp). `Kernels` is a tag type that names the set of kernels
 * (`cuda_kernels`, or a tag of the program's own); the translation unit that instantiates them
 * says which Thrust system they run on.
 */
template <class Kernels>
struct separate_backend : stream_backend<separate_backend<Kernels>> {
  using memory_space = separate_space<Kernels>;  ///< The system's memory.
  using kernels = Kernels;                       ///< The tag of its kernels.
};

/// Every `separate_backend<Kernels>` is a backend.
template <class Kernels>
struct is_backend<separate_backend<Kernels>> : std::true_type {};

/// The tag of the kernels of Thrust's CUDA system, for `cuda_backend`.
struct cuda_kernels {};

/// The GPU backend for host code: `thrust_backend<thrust::system::cuda::tag>` with its kernels in
/// a `.cu` file of the program (`GRADCOMP_INSTANTIATE_KERNELS(gradcomp::cuda_kernels,
/// thrust::system::cuda::tag)`).
using cuda_backend = separate_backend<cuda_kernels>;

namespace detail {

/// A view of a separate backend's memory.
template <class U, class Kernels>
using separate_view = span<U, separate_space<Kernels>>;

/// @cond GRADCOMP_INTERNAL
// An object that the unit compiling a separate backend's kernels made, held by host code by its
// address: Owner::copy(address) makes a copy of it (deep: a copy works on its own), and
// Owner::release(address) destroys it; null is no object.
template <class Owner>
class separate_handle {
 public:
  separate_handle() = default;
  explicit separate_handle(void* address) noexcept : address_(address) {}
  separate_handle(const separate_handle& other) : address_(other.address_ ? Owner::copy(other.address_) : nullptr) {}
  separate_handle(separate_handle&& other) noexcept : address_(std::exchange(other.address_, nullptr)) {}
  separate_handle& operator=(const separate_handle& other) { return copy_assign(*this, other); }
  separate_handle& operator=(separate_handle&& other) noexcept {
    separate_handle taken(std::move(other));
    std::swap(address_, taken.address_);
    return *this;
  }
  ~separate_handle() { Owner::release(address_); }

  void* address() noexcept { return address_; }
  const void* address() const noexcept { return address_; }

 private:
  void* address_ = nullptr;
};

// A model's table on a separate backend, for the methods whose kernels do a whole model's work at
// once (their `model<T>` there): the Thrust backend's table (thrust/model_table.hpp), which the
// unit that compiles the kernels creates, copies, binds and releases.
template <class Kernels, class T>
struct separate_model_table {
  // Called by bind for every tensor t with its entry, which it may change.
  using fill_fn = void (*)(void* context, std::size_t t, model_tensor<T>& entry);
  static void* create(span<const std::size_t> numel, span<const model_items> items);
  static void* copy(const void* table);
  static void release(void* table) noexcept;
  static void bind(const separate_backend<Kernels>& on, void* table, fill_fn fill, void* context);
};

// A method's `model<T>` on a separate backend: owns a table (above); a copy is a table of its own,
// as on the Thrust backend, so that a copy of a compressor steps on its own buffers.
template <class Kernels, class T>
class separate_model : public separate_handle<separate_model_table<Kernels, T>> {
  using table = separate_model_table<Kernels, T>;

 public:
  separate_model() = default;
  // The table of tensors of numel[t] elements and items[t] work items (model_table's).
  separate_model(span<const std::size_t> numel, span<const model_items> items)
      : separate_handle<table>(table::create(numel, items)) {}

  // model_table::bind: fill(t, entry) for every tensor, an upload only where an entry changed.
  template <class Fill>
  void bind(const separate_backend<Kernels>& on, Fill fill) {
    if (this->address() == nullptr) return;
    table::bind(
        on, this->address(),
        [](void* context, std::size_t t, model_tensor<T>& entry) { (*static_cast<Fill*>(context))(t, entry); },
        static_cast<void*>(&fill));
  }
};

// A method's kernels on a separate backend are a struct `Struct<Kernels, T>` whose operations one
// list names, each as X(name, (parameters), (arguments)), a parameter `on` first; the list
// declares them here (GRADCOMP_SEPARATE_DECLARE) and defines them, each the Thrust backend's
// operation of the same name, in the unit that compiles the kernels (GRADCOMP_SEPARATE_DEFINE,
// separate/thrust_kernels.hpp).
#define GRADCOMP_SEPARATE_DECLARE(name, params, args) static void name params;
// Declares the kernels `Struct<Kernels, T>` whose operations LIST names (above).
#define GRADCOMP_SEPARATE_KERNELS(Struct, LIST) \
  template <class Kernels, class T>             \
  struct Struct {                               \
    using backend = separate_backend<Kernels>;  \
    template <class U>                          \
    using view = separate_view<U, Kernels>;     \
    template <class U>                          \
    using model = separate_model<Kernels, U>;   \
    LIST(GRADCOMP_SEPARATE_DECLARE)             \
  }
/// @endcond

/// @cond GRADCOMP_INTERNAL
// A method's kernels template on a separate backend derives from its kernels for float (f) and
// double (d), and brings in each operation of both (one of them for an operation that does not
// depend on T); overload resolution picks by the views' element type.
template <template <class, class> class Kernels_of, class Kernels>
struct separate_method_ops : Kernels_of<Kernels, float>, Kernels_of<Kernels, double> {
  using f = Kernels_of<Kernels, float>;
  using d = Kernels_of<Kernels, double>;
};
// The kernels of a method whose step is measure, plan (per step, the same for every T) and apply,
// measure and apply over a whole model at once (its `model<T>`) or per tensor: the quantisers'.
template <template <class, class> class Kernels_of, class Kernels>
struct separate_quantiser_ops : separate_method_ops<Kernels_of, Kernels> {
  using base = separate_method_ops<Kernels_of, Kernels>;
  template <class T>
  using model = separate_model<Kernels, T>;
  using base::f::measure, base::d::measure, base::f::plan, base::f::apply, base::d::apply;
};
/// @endcond

/// The memory operations of a separate backend, defined with its kernels.
template <class Kernels>
struct separate_memory {
  using stream_type = ::CUstream_st*;
  static void* allocate(std::size_t bytes);
  static void release(void* p) noexcept;
  static void zero(stream_type s, void* p, std::size_t bytes);
  static void copy_within(stream_type s, const void* from, void* to, std::size_t bytes);
  static void copy_to_host(stream_type s, const void* from, void* to, std::size_t bytes);
  static void copy_to_system(stream_type s, const void* from, void* to, std::size_t bytes);
  static void wait(stream_type s);
  static bool all_below(stream_type s, const std::uint32_t* idx, std::size_t k, std::size_t n);
  static errc check_positions(stream_type s, const std::uint32_t* idx, std::size_t k, std::size_t n);
};

/// Owning storage of n elements in a separate backend's memory; copies are deep, moves take the
/// storage.
template <class T, class Kernels>
class separate_buffer {
  using memory = separate_memory<Kernels>;

 public:
  using value_type = T;
  using space = separate_space<Kernels>;

  separate_buffer() = default;
  explicit separate_buffer(std::size_t n) : size_(n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_alloc();
    if (n != 0) data_ = static_cast<T*>(memory::allocate(n * sizeof(T)));
  }
  separate_buffer(const separate_buffer& other) : separate_buffer(other.size_) {
    if (size_ != 0) memory::copy_within(nullptr, other.data_, data_, size_ * sizeof(T));
  }
  separate_buffer(separate_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  separate_buffer& operator=(const separate_buffer& other) { return copy_assign(*this, other); }
  separate_buffer& operator=(separate_buffer&& other) noexcept {
    separate_buffer taken(std::move(other));
    std::swap(data_, taken.data_);
    std::swap(size_, taken.size_);
    return *this;
  }
  ~separate_buffer() { memory::release(data_); }

  span<T, space> view() noexcept { return span<T, space>(data_, size_); }
  span<const T, space> view() const noexcept { return span<const T, space>(data_, size_); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The operations of a separate backend on `T`, each `ops<thrust_backend<System>>`'s of the same
/// name, defined with its kernels (each method's kernels are in its own folder:
/// `<method>/separate_ops.hpp`).
template <class Kernels, class T>
struct separate_kernels {
  using backend = separate_backend<Kernels>;
  template <class U>
  using view = separate_view<U, Kernels>;

  static std::size_t exact_topk_workspace_bytes(std::size_t n, std::size_t k);
  static result<std::size_t> exact_topk(const backend& on, view<const T> values, std::size_t k,
                                        view<std::uint32_t> out, view<std::byte> workspace, T* threshold);
  static std::size_t sampled_threshold_workspace_bytes(const sampled_threshold_config& cfg, std::size_t n,
                                                       std::size_t k);
  static result<selection_result<T>> sampled_threshold_select(const backend& on, view<const T> values, std::size_t k,
                                                              const sampled_threshold_config& cfg, std::uint64_t seed,
                                                              view<std::uint32_t> out, view<std::byte> workspace);
  static void fill_zero(const backend& on, view<T> x);
  static void add(const backend& on, view<const T> values, view<T> acc);
  static void scatter_add(const backend& on, view<const std::uint32_t> idx, view<const T> values, view<T> acc);
  static void scale(const backend& on, T c, view<T> x);
  static void momentum_apply(const backend& on, momentum_kind kind, T m, view<T> u, view<T> a);
  static double largest_magnitude(const backend& on, view<const T> values);
  static double largest_magnitude_of_sum(const backend& on, view<const T> acc, view<const std::uint32_t> idx,
                                         view<const T> values);
  static state_magnitudes momentum_apply_magnitudes(const backend& on, momentum_kind kind, T m, T inv, bool scaled,
                                                    view<const T> u, view<const T> a);
  static result<std::size_t> threshold_select(const backend& on, view<const T> values, key_t<T> key,
                                              view<std::uint32_t> out, std::size_t* total);
  static cpu::norm_result l2_norm(const backend& on, view<const T> g);
  static void momentum_accumulate(const backend& on, momentum_kind kind, T m, T c, view<const T> g, view<T> u,
                                  view<T> v);
  static void gather_and_zero(const backend& on, view<T> v, view<const std::uint32_t> idx, view<T> values);
  static void zero_at(const backend& on, view<T> u, view<const std::uint32_t> idx);
};

/// A separate backend's operations (docs/backends.md): memory here, the rest forwarded to the
/// kernels compiled elsewhere.
template <class Kernels>
struct ops<separate_backend<Kernels>> : one_tensor_at_a_time {
  using backend = separate_backend<Kernels>;
  using space = separate_space<Kernels>;
  template <class T>
  using view = span<T, space>;
  template <class T>
  using kernels = separate_kernels<Kernels, T>;
  using memory = separate_memory<Kernels>;

  // --- Memory -----------------------------------------------------------------------------
  template <class T>
  using buffer = separate_buffer<T, Kernels>;
  template <class T>
  static buffer<T> allocate(const backend& on, std::size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "backend buffers hold trivially copyable types");
    buffer<T> b(n);
    if (n != 0) memory::zero(on.stream, b.view().data(), n * sizeof(T));
    return b;
  }
  template <class T>
  static void copy_to_host(const backend& on, view<const T> from, span<T> to) {
    memory::copy_to_host(on.stream, from.data(), static_cast<void*>(to.data()), from.size_bytes());
  }
  template <class T>
  static void copy_to_backend(const backend& on, span<const T> from, view<T> to) {
    memory::copy_to_system(on.stream, from.data(), static_cast<void*>(to.data()), from.size_bytes());
  }
  static void synchronize(const backend& on) { memory::wait(on.stream); }

  // --- Selection ----------------------------------------------------------------------------
  template <class T>
  static std::size_t exact_topk_workspace_bytes(const backend&, std::size_t n, std::size_t k) {
    return kernels<T>::exact_topk_workspace_bytes(n, k);
  }
  template <class T>
  static result<std::size_t> exact_topk(const backend& on, view<const T> values, std::size_t k,
                                        view<std::uint32_t> out, view<std::byte> workspace, T* threshold) {
    return kernels<T>::exact_topk(on, values, k, out, workspace, threshold);
  }
  template <class T>
  static std::size_t sampled_threshold_workspace_bytes(const backend&, const sampled_threshold_config& cfg,
                                                       std::size_t n, std::size_t k) {
    return kernels<T>::sampled_threshold_workspace_bytes(cfg, n, k);
  }
  template <class T>
  static result<selection_result<T>> sampled_threshold_select(const backend& on, view<const T> values, std::size_t k,
                                                              const sampled_threshold_config& cfg, std::uint64_t seed,
                                                              view<std::uint32_t> out, view<std::byte> workspace) {
    return kernels<T>::sampled_threshold_select(on, values, k, cfg, seed, out, workspace);
  }

  // --- The aggregator's kernels and the public building blocks ------------------------------
  template <class T>
  static void fill_zero(const backend& on, view<T> x) {
    kernels<T>::fill_zero(on, x);
  }
  template <class T>
  static void add(const backend& on, view<const T> values, view<T> acc) {
    kernels<T>::add(on, values, acc);
  }
  template <class T>
  static void scatter_add(const backend& on, view<const std::uint32_t> idx, view<const T> values, view<T> acc) {
    kernels<T>::scatter_add(on, idx, values, acc);
  }
  template <class T>
  static void scale(const backend& on, T c, view<T> x) {
    kernels<T>::scale(on, c, x);
  }
  template <class T>
  static void momentum_apply(const backend& on, momentum_kind kind, T m, view<T> u, view<T> a) {
    kernels<T>::momentum_apply(on, kind, m, u, a);
  }
  template <class T>
  static double largest_magnitude(const backend& on, view<const T> values) {
    return kernels<T>::largest_magnitude(on, values);
  }
  template <class T>
  static double largest_magnitude_of_sum(const backend& on, view<const T> acc, view<const std::uint32_t> idx,
                                         view<const T> values) {
    return kernels<T>::largest_magnitude_of_sum(on, acc, idx, values);
  }
  template <class T>
  static state_magnitudes momentum_apply_magnitudes(const backend& on, momentum_kind kind, T m, T inv, bool scaled,
                                                    view<const T> u, view<const T> a) {
    return kernels<T>::momentum_apply_magnitudes(on, kind, m, inv, scaled, u, a);
  }
  template <class T>
  static result<std::size_t> threshold_select(const backend& on, view<const T> values, key_t<T> key,
                                              view<std::uint32_t> out, std::size_t* total) {
    return kernels<T>::threshold_select(on, values, key, out, total);
  }
  template <class T>
  static cpu::norm_result l2_norm(const backend& on, view<const T> g) {
    return kernels<T>::l2_norm(on, g);
  }
  template <class T>
  static void momentum_accumulate(const backend& on, momentum_kind kind, T m, T c, view<const T> g, view<T> u,
                                  view<T> v) {
    kernels<T>::momentum_accumulate(on, kind, m, c, g, u, v);
  }
  template <class T>
  static void gather_and_zero(const backend& on, view<T> v, view<const std::uint32_t> idx, view<T> values) {
    kernels<T>::gather_and_zero(on, v, idx, values);
  }
  template <class T>
  static void zero_at(const backend& on, view<T> u, view<const std::uint32_t> idx) {
    kernels<T>::zero_at(on, u, idx);
  }
  static bool all_below(const backend& on, view<const std::uint32_t> idx, std::size_t n) {
    return memory::all_below(on.stream, idx.data(), idx.size(), n);
  }
  static errc check_positions(const backend& on, view<const std::uint32_t> idx, std::size_t n) {
    return memory::check_positions(on.stream, idx.data(), idx.size(), n);
  }
};

}  // namespace detail
}  // namespace gradcomp
