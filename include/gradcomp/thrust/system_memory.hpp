// How the portable Thrust backend runs its algorithms on a system, and how it moves bytes between
// the host and the system's memory, for every system of the backend: the host systems (C++,
// OpenMP), whose memory the host can address, and the CUDA system, whose memory it cannot. Each
// copy (a plain copy on the host systems; on the CUDA system a copy on the call's stream, after
// the kernels queued there) is complete when it returns, so a value the host reads this way is
// the value the system's last operation left.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include <thrust/copy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/memory.h>
#include <thrust/reduce.h>

#include "../config.hpp"
#include "../detail/assign.hpp"
#include "../span.hpp"

// The CUDA runtime's stream type (cudaStream_t is CUstream_st*), declared here so that host code
// names a stream without the CUDA headers.
struct CUstream_st;

namespace gradcomp {
namespace detail {
namespace thrust_impl {
// The stream a call's work is issued on: the CUDA system's (null: the default stream); the host
// systems ignore it.
using stream_t = ::CUstream_st*;
}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp

#if defined(__CUDACC__)
#include "cuda_execution.cuh"
#endif

namespace gradcomp {

template <class System>
struct thrust_space;

namespace detail {
namespace thrust_impl {

// Allocation in System's memory (thrust::malloc); std::bad_alloc when it fails.
template <class System>
void* system_allocate(std::size_t bytes) {
  auto p = thrust::malloc(System{}, bytes);
  if (p.get() == nullptr) throw std::bad_alloc();
  return p.get();
}
template <class System>
void system_free(void* p) noexcept {
  if (p != nullptr) thrust::free(System{}, thrust::pointer<void, System>(p));
}

// How many times the host has waited for a system's memory (a copy between the host and it, or a
// Thrust call that returns a value computed there) since the program started: the tests check
// that a step issues its work without any.
inline std::atomic<std::uint64_t> host_transfer_count{0};
inline void note_host_transfer() noexcept { host_transfer_count.fetch_add(1, std::memory_order_relaxed); }

// *to = value, on one thread of the system.
template <class V>
struct store_op {
  V* to;
  V value;
  GRADCOMP_HD void operator()(std::size_t) const { *to = value; }
};

// How the backend runs its algorithms on System: the execution policy for a stream, how to wait
// for the work issued on it, scratch memory, results left in the system's memory, and copies
// between the host and the system. The host systems run each algorithm to completion before it
// returns: the policy is the system's tag, there is nothing to wait for, and the stream is
// ignored. The CUDA system's (thrust/cuda_execution.cuh, with nvcc) queues kernels on the stream
// without waiting.
template <class System>
struct execution {
  static constexpr bool hand_kernels = false;  // the CUDA system runs hand-written kernels where it has them
  static System policy(stream_t) noexcept { return System{}; }
  static void wait(stream_t) noexcept {}
  // Scratch bytes an operation uses and releases before it returns: System's own allocation
  // here; in stream order on the CUDA system, where a plain cudaFree would wait for the whole
  // device.
  static void* allocate_scratch(stream_t, std::size_t bytes) { return system_allocate<System>(bytes); }
  static void release_scratch(stream_t, void* p) noexcept { system_free<System>(p); }
  // *out = the reduction of first[0, n) by op from init, out in System's memory: on the device
  // systems without the host waiting; here the host systems' reduction and a store.
  template <class It, class V, class Op>
  static void reduce_into(stream_t stream, It first, std::size_t n, V init, Op op, V* out) {
    const V v = thrust::reduce(policy(stream), first, first + static_cast<std::ptrdiff_t>(n), init, op);
    thrust::for_each_n(policy(stream), thrust::counting_iterator<std::size_t>(0), 1, store_op<V>{out, v});
  }
  // values[i] for the positions i < n where keep(i), in order, into out; their number into *count
  // (System's memory), without the host waiting on the device systems.
  template <class Values, class Keep, class Out>
  static void select_into(stream_t stream, Values values, std::size_t n, Keep keep, Out out, std::uint64_t* count) {
    const thrust::counting_iterator<std::size_t> positions(0);
    const Out end =
        thrust::copy_if(policy(stream), values, values + static_cast<std::ptrdiff_t>(n), positions, out, keep);
    thrust::for_each_n(policy(stream), positions, 1,
                       store_op<std::uint64_t>{count, static_cast<std::uint64_t>(end - out)});
  }
  // bytes between the host and System's memory, complete when the call returns (after the work
  // issued on the stream before it).
  static void copy_to_host(stream_t, const void* from, void* to, std::size_t bytes) {
    const thrust::pointer<const unsigned char, System> first(static_cast<const unsigned char*>(from));
    thrust::copy_n(first, bytes, static_cast<unsigned char*>(to));
  }
  static void copy_to_system(stream_t, const void* from, void* to, std::size_t bytes) {
    const thrust::pointer<unsigned char, System> out(static_cast<unsigned char*>(to));
    thrust::copy_n(static_cast<const unsigned char*>(from), bytes, out);
  }
  // Host memory that `upload` copies from (page-locked on the CUDA system).
  static void* allocate_staging(std::size_t bytes) { return ::operator new(bytes); }
  static void free_staging(void* p) noexcept { ::operator delete(p); }
  // bytes from staging memory to System's memory in order on the stream, without the host
  // waiting: the source stays unchanged until the stream has run the copy.
  static void upload(stream_t stream, const void* from, void* to, std::size_t bytes) {
    copy_to_system(stream, from, to, bytes);
  }
};

template <class System>
auto exec(stream_t stream) {
  return execution<System>::policy(stream);
}

// bytes from System's memory at `from` to host memory at `to`, after the work on `stream`.
template <class System>
void copy_bytes_to_host(stream_t stream, const void* from, void* to, std::size_t bytes) {
  if (bytes == 0) return;
  note_host_transfer();
  execution<System>::copy_to_host(stream, from, to, bytes);
}

// bytes from host memory at `from` to System's memory at `to`, in order on `stream`.
template <class System>
void copy_bytes_to_system(stream_t stream, const void* from, void* to, std::size_t bytes) {
  if (bytes == 0) return;
  note_host_transfer();
  execution<System>::copy_to_system(stream, from, to, bytes);
}

// Sets `bytes` bytes at `p` in System's memory to zero, in order on `stream`.
template <class System>
void zero_bytes(stream_t stream, void* p, std::size_t bytes) {
  if (bytes == 0) return;
  thrust::fill_n(exec<System>(stream), static_cast<unsigned char*>(p), bytes, static_cast<unsigned char>(0));
}

// A value a Thrust call returned to the host (the host waited for it on a device system).
template <class V>
V returned(V v) noexcept {
  note_host_transfer();
  return v;
}

// Runs f(0) on one thread of the system: the step-level decisions taken where the data is.
template <class System, class F>
void run_once(stream_t stream, F f) {
  thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), 1, f);
}

// Element i's member M of an array in the system's memory, as a function of i: the input of a
// scan or a transform over per-tensor or per-bin records.
template <class Record, class U, U Record::*M>
struct member_of {
  const Record* records;
  GRADCOMP_HD U operator()(std::size_t i) const { return records[i].*M; }
};

// plan_step(records, count, step) on one thread: a method's step verdict (its own overload of
// plan_step, found by argument-dependent lookup), taken where its records are.
template <class Record, class Step>
struct plan_op {
  Record* records;
  std::size_t count;
  Step* step;
  GRADCOMP_HD void operator()(std::size_t) const { plan_step(records, count, step); }
};

template <class System, class Record, class Step>
void run_plan(stream_t stream, Record* records, std::size_t count, Step* step) {
  run_once<System>(stream, plan_op<Record, Step>{records, count, step});
}

// The value at `p` in System's memory (T trivially copyable), after the work on `stream`.
template <class System, class T>
T read_value(stream_t stream, const T* p) {
  T v;
  copy_bytes_to_host<System>(stream, p, &v, sizeof(T));
  return v;
}

// Owning storage of n elements in System's memory, allocated with thrust::malloc; copies are
// deep (byte copies inside the system), moves take the storage.
template <class T, class System>
class system_buffer {
 public:
  using value_type = T;
  using space = thrust_space<System>;

  system_buffer() = default;
  explicit system_buffer(std::size_t n) : size_(n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_alloc();
    if (n != 0) data_ = allocate_bytes(n * sizeof(T));
  }
  system_buffer(const system_buffer& other) : system_buffer(other.size_) { copy_bytes_from(other); }
  system_buffer(system_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  system_buffer& operator=(const system_buffer& other) { return copy_assign(*this, other); }
  system_buffer& operator=(system_buffer&& other) noexcept {
    system_buffer taken(std::move(other));
    swap(taken);
    return *this;
  }
  ~system_buffer() { release(); }

  span<T, space> view() noexcept { return span<T, space>(data_, size_); }
  span<const T, space> view() const noexcept { return span<const T, space>(data_, size_); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  static T* allocate_bytes(std::size_t bytes) { return static_cast<T*>(system_allocate<System>(bytes)); }
  void release() noexcept {
    system_free<System>(static_cast<void*>(data_));
    data_ = nullptr;
    size_ = 0;
  }
  void copy_bytes_from(const system_buffer& other) {
    if (size_ == 0) return;
    const auto* from = reinterpret_cast<const unsigned char*>(other.data_);
    thrust::copy_n(exec<System>(nullptr), from, size_ * sizeof(T), reinterpret_cast<unsigned char*>(data_));
  }
  void swap(system_buffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// n elements of host memory that System's memory is uploaded from (execution::upload), with their
// values zero-initialised (V trivially copyable); copies are deep.
template <class V, class System>
class staging_buffer {
 public:
  staging_buffer() = default;
  explicit staging_buffer(std::size_t n) : size_(n) {
    static_assert(std::is_trivially_copyable<V>::value, "staging buffers hold trivially copyable types");
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(V)) throw std::bad_alloc();
    if (n == 0) return;
    data_ = static_cast<V*>(execution<System>::allocate_staging(n * sizeof(V)));
    for (std::size_t i = 0; i < n; ++i) new (data_ + i) V{};
  }
  staging_buffer(const staging_buffer& other) : staging_buffer(other.size_) {
    if (size_ != 0) std::memcpy(static_cast<void*>(data_), other.data_, size_ * sizeof(V));
  }
  staging_buffer& operator=(const staging_buffer& other) { return copy_assign(*this, other); }
  staging_buffer(staging_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  staging_buffer& operator=(staging_buffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~staging_buffer() {
    if (data_ != nullptr) execution<System>::free_staging(data_);
  }
  V* data() noexcept { return data_; }
  const V* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  V& operator[](std::size_t i) noexcept { return data_[i]; }
  const V& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  V* data_ = nullptr;
  std::size_t size_ = 0;
};

// n elements of scratch in System's memory for the duration of one operation.
template <class T, class System>
class scratch {
 public:
  scratch(stream_t stream, std::size_t n)
      : stream_(stream), data_(static_cast<T*>(execution<System>::allocate_scratch(stream, n * sizeof(T)))) {}
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() { execution<System>::release_scratch(stream_, data_); }
  T* data() const noexcept { return data_; }

 private:
  stream_t stream_;
  T* data_;
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
