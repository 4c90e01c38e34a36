/// @file backend.hpp
/// @brief Backend policies: where memory lives and where work runs.
///
/// A backend is a small type usable both as a template parameter and as a value. Stateful
/// components take it as a template parameter (it fixes where their buffers live); every
/// operation takes a backend value (it fixes, for example, the stream of that call: the
/// compressors take one per call as an optional first argument). Operations dispatch through
/// `detail::ops<Backend>`, which each backend specialises in its own header (`cpu/ops.hpp` for
/// the CPU), so adding a backend is adding files. docs/backends.md is the contract a backend
/// fulfils: its memory space, its buffers and copies, where it may synchronise, and every
/// operation with its determinism promise.
#pragma once

#include <cstddef>
#include <type_traits>

#include "error.hpp"
#include "span.hpp"

// The CUDA runtime's stream type (cudaStream_t is CUstream_st*), named without the CUDA headers.
struct CUstream_st;

namespace gradcomp {

/**
 * @brief The CPU backend: host memory, work on the calling thread (and, for the compressors,
 * the threads `dgc_config::threads` asks for).
 *
 * Every pointer passed with a `cpu_backend` is a host pointer. Calls are synchronous and
 * deterministic; distinct objects may be used from distinct threads concurrently. The value
 * carries no state: every `cpu_backend{}` is the same execution context.
 */
struct cpu_backend {
  using memory_space = host_space;  ///< Ordinary host memory.
};

/**
 * @brief What a backend whose work runs on a CUDA stream has (`thrust_backend`,
 * `separate_backend`): the stream of the calls made with it, and `on(s)`, the same backend on
 * another stream. Derived is the backend.
 */
template <class Derived>
struct stream_backend {
  /// The CUDA runtime's stream type (`cudaStream_t`), named without the CUDA headers.
  using stream_type = ::CUstream_st*;

  /// The stream the work of a call is issued on, and the copies and `synchronize` wait for (null:
  /// the default stream). The host systems ignore it.
  stream_type stream = nullptr;

  /// The same backend issuing its work on `s` (the trainer's stream, so that a step is ordered
  /// after the kernels that computed the gradients without the host waiting between them).
  constexpr Derived on(stream_type s) const noexcept {
    Derived b = static_cast<const Derived&>(*this);
    b.stream = s;
    return b;
  }
};

/// True for types that are gradcomp backend policies. Specialise to `std::true_type` for a new
/// backend.
template <class Backend>
struct is_backend : std::false_type {};

/// `cpu_backend` is a backend.
template <>
struct is_backend<cpu_backend> : std::true_type {};

/// `is_backend<B>::value` as a variable.
template <class Backend>
inline constexpr bool is_backend_v = is_backend<Backend>::value;

/// The memory space of a backend's buffers and of the spans its operations take.
template <class Backend>
using memory_space_t = typename Backend::memory_space;

/// A view of `T`s in `Backend`'s memory space: `backend_span<const float, cpu_backend>` is
/// `span<const float>`.
template <class T, class Backend>
using backend_span = span<T, memory_space_t<Backend>>;

namespace detail {

/// Per-backend implementation of every operation; specialised by each backend's headers
/// (docs/backends.md lists the members). The primary template is intentionally left undefined
/// so that a missing backend header is a compile error naming `ops<Backend>`.
template <class Backend>
struct ops;

/// The work items of one tensor in each item space of its method's whole-model launches (a work
/// item is what one thread of a kernel does: an element, a Philox block of four elements, a
/// bucket, a column; each space numbers the items of every tensor one after the other).
struct model_items {
  /// The number of item spaces.
  static constexpr std::size_t spaces = 3;
  /// The tensor's items in each space.
  std::size_t count[spaces] = {0, 0, 0};
};

/// A tensor's buffers of its method's own in the whole-model launches, and a constant of the
/// method's for it (AdaComp's bin size).
struct own_buffers {
  /// The buffers (null: none).
  void* aux[2] = {nullptr, nullptr};
  /// The constant.
  std::uint64_t param = 0;
};

/// One tensor of a whole-model launch: the entry of a model's table in the backend's memory
/// (thrust/model_table.hpp), filled on the host at every step.
template <class T>
struct model_tensor {
  const T* g = nullptr;     ///< the step's gradient
  T* e = nullptr;           ///< its error buffer (null: none)
  T* values = nullptr;      ///< its message values
  float* scales = nullptr;  ///< its per-bucket scales (null: none)
  std::uint32_t* indices = nullptr;   ///< its message positions (a sparse method's compressed tensor)
  void* aux[2] = {nullptr, nullptr};  ///< buffers of the method's own (own_buffers)
  std::uint64_t param = 0;            ///< a constant of the method's (AdaComp's bin size)
  std::uint64_t numel = 0;            ///< its elements
  std::uint64_t first[model_items::spaces] = {};  ///< its first work item in each space
  std::uint64_t items[model_items::spaces] = {};  ///< its work items in each space
};

/// The work-over-tensors members of `ops<B>` for a backend that runs one tensor after the other
/// (each tensor's operations already parallel inside its system), with one workspace slot: an
/// `ops` specialisation derives from it.
struct one_tensor_at_a_time {
  /// Holds nothing: there is nothing to schedule.
  struct executor {};
  /// The executor for any number of tensors.
  static executor make_executor(std::size_t) { return executor{}; }
  /// Nothing to start: always succeeds.
  template <class Backend>
  static result<void> start_executor(const Backend&, executor&, std::size_t) {
    return {};
  }
  /// Tensors run one at a time, so one workspace slot serves them all.
  static std::size_t executor_slots(const executor&) noexcept { return 1; }
  /// Calls `f(t, 0)` for every `t` of `order`, in order.
  template <class Backend, class F>
  static void for_each(const Backend&, executor&, span<const std::size_t> order, F& f) {
    for (std::size_t t : order) f(t, std::size_t(0));
  }
};

}  // namespace detail
}  // namespace gradcomp
