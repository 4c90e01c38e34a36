// strict_backend: a test-only backend whose memory the host cannot touch.
//
// It runs every operation with the CPU kernels, so its results must be bitwise the CPU backend's,
// but it behaves like a device the library must not take shortcuts with:
// - its memory space is its own (strict_space): spans of it cannot be indexed, iterated or
//   converted to host spans at compile time;
// - its allocations are pages mapped without any access except while one of its own operations
//   runs, so a host read or write of its memory anywhere else crashes the test;
// - every span an operation receives must lie inside one of its allocations (a host pointer
//   passed as device memory fails the test);
// - copies to the host are completed only by synchronize(): until then the destination holds
//   a poison pattern, so host code that reads a staged copy before waiting sees garbage;
// - it counts synchronisations, copies and operations, for tests to assert.
// Adding it touches no library header: it is the proof that a backend is added with files only.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include <gradcomp/backend.hpp>
#include <gradcomp/adacomp/cpu_ops.hpp>
#include <gradcomp/ef_signsgd/cpu_ops.hpp>
#include <gradcomp/onebit/cpu_ops.hpp>
#include <gradcomp/qsgd/cpu_ops.hpp>
#include <gradcomp/saef/cpu_ops.hpp>
#include <gradcomp/terngrad/cpu_ops.hpp>
#include <gradcomp/cpu/ops.hpp>
#include <gradcomp/dgc/cpu_ops.hpp>

namespace gradcomp_test {

struct strict_space {};

// The backend value: `stream` names an execution context, as a device backend's would; the
// operations record the last one they ran on.
struct strict_backend {
  using memory_space = strict_space;
  int stream = 0;
  strict_backend on(int s) const noexcept { return strict_backend{s}; }
};

template <class T>
using strict_span = gradcomp::span<T, strict_space>;

// What the backend did, for tests to assert.
struct strict_counters {
  std::size_t synchronizations = 0;
  std::size_t copies_to_host = 0;
  std::size_t copies_to_backend = 0;
  std::size_t operations = 0;  // kernels and step operations
  int last_stream = -1;
};

class strict_memory {
 public:
  static strict_memory& instance() {
    static strict_memory m;
    return m;
  }
  strict_counters counters;

  void* allocate(std::size_t bytes) {
    const std::size_t length = round_up(bytes == 0 ? 1 : bytes);
    void* p = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    blocks_[static_cast<std::byte*>(p)] = length;
    if (open_ > 0) protect(p, length, true);
    return p;
  }
  void release(void* p) noexcept {
    if (p == nullptr) return;
    auto it = blocks_.find(static_cast<std::byte*>(p));
    if (it == blocks_.end()) return;
    ::munmap(p, it->second);
    blocks_.erase(it);
  }

  // Opens every allocation for the duration of one of the backend's own operations.
  class scope {
   public:
    scope() {
      auto& m = instance();
      if (m.open_++ == 0)
        for (auto& b : m.blocks_) protect(b.first, b.second, true);
    }
    ~scope() {
      auto& m = instance();
      if (--m.open_ == 0)
        for (auto& b : m.blocks_) protect(b.first, b.second, false);
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
  };

  // True when [p, p + bytes) lies inside one allocation.
  bool owns(const void* p, std::size_t bytes) const noexcept {
    if (bytes == 0) return true;
    const auto* q = static_cast<const std::byte*>(p);
    auto it = blocks_.upper_bound(const_cast<std::byte*>(q));
    if (it == blocks_.begin()) return false;
    --it;
    return q >= it->first && q + bytes <= it->first + it->second;
  }

  // Host copies that synchronize() completes.
  void defer(void* to, std::vector<std::byte> data) { deferred_.emplace_back(to, std::move(data)); }
  void complete() {
    for (auto& d : deferred_)
      if (!d.second.empty()) std::memcpy(d.first, d.second.data(), d.second.size());
    deferred_.clear();
  }

 private:
  static std::size_t round_up(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
  static void protect(void* p, std::size_t length, bool open) {
    if (::mprotect(p, length, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) throw std::runtime_error("mprotect");
  }
  std::map<std::byte*, std::size_t> blocks_;
  std::vector<std::pair<void*, std::vector<std::byte>>> deferred_;
  int open_ = 0;
};

inline strict_counters& strict_stats() { return strict_memory::instance().counters; }

// Owning storage in strict memory: zero bytes on allocation, deep copies by the backend.
template <class T>
class strict_buffer {
  static_assert(std::is_trivially_copyable<T>::value, "strict buffers hold trivially copyable types");

 public:
  using value_type = T;
  strict_buffer() = default;
  explicit strict_buffer(std::size_t n) : size_(n) {
    if (n == 0) return;
    data_ = static_cast<T*>(strict_memory::instance().allocate(n * sizeof(T)));
    strict_memory::scope open;
    std::memset(static_cast<void*>(data_), 0, n * sizeof(T));
  }
  strict_buffer(const strict_buffer& other) : strict_buffer(other.size_) {
    if (size_ == 0) return;
    strict_memory::scope open;
    std::memcpy(static_cast<void*>(data_), other.data_, size_ * sizeof(T));
  }
  strict_buffer(strict_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  strict_buffer& operator=(strict_buffer other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~strict_buffer() { strict_memory::instance().release(data_); }

  strict_span<T> view() noexcept { return strict_span<T>(data_, size_); }
  strict_span<const T> view() const noexcept { return strict_span<const T>(data_, size_); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// A strict span as the host span the CPU kernels take; fails the test unless it lies in strict
// memory.
template <class T>
gradcomp::span<T> unwrap(strict_span<T> s) {
  if (!strict_memory::instance().owns(s.data(), s.size_bytes()))
    throw std::logic_error("strict_backend: an operation received memory that is not the backend's");
  return gradcomp::span<T>(s.data(), s.size());
}

// Runs one of the backend's operations: counted, on the stream of `b`, with its memory open.
template <class Backend, class F>
void strict_run(const Backend& b, F&& f) {
  auto& m = strict_memory::instance();
  ++m.counters.operations;
  m.counters.last_stream = b.stream;
  strict_memory::scope open;
  f();
}

}  // namespace gradcomp_test

template <>
struct gradcomp::is_backend<gradcomp_test::strict_backend> : std::true_type {};

template <>
struct gradcomp::detail::ops<gradcomp_test::strict_backend> : gradcomp::detail::one_tensor_at_a_time {
  using backend = gradcomp_test::strict_backend;
  using space = gradcomp_test::strict_space;
  using cpu = ops<cpu_backend>;
  template <class T>
  using sspan = span<T, space>;

  // --- Memory ---
  template <class T>
  using buffer = gradcomp_test::strict_buffer<T>;
  template <class T>
  static buffer<T> allocate(const backend&, std::size_t n) {
    return buffer<T>(n);
  }
// GCC 12 reports the moved-from vector's destructor below as freeing a non-heap pointer when it
// inlines this copy into some callers (a false positive: the vector owns heap memory or none).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif
  template <class T>
  static void copy_to_host(const backend& b, sspan<const T> from, span<T> to) {
    auto& m = gradcomp_test::strict_memory::instance();
    ++m.counters.copies_to_host;
    m.counters.last_stream = b.stream;
    if (to.size() < from.size()) throw std::logic_error("strict_backend: copy_to_host into a smaller span");
    std::vector<std::byte> data(from.size_bytes());
    {
      gradcomp_test::strict_memory::scope open;
      const auto src = gradcomp_test::unwrap(from);
      if (!data.empty()) std::memcpy(data.data(), src.data(), data.size());
    }
    // Until synchronize() the destination holds garbage.
    if (data.empty()) return;
    std::memset(static_cast<void*>(to.data()), 0xA5, data.size());
    m.defer(to.data(), std::move(data));
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  template <class T>
  static void copy_to_backend(const backend& b, span<const T> from, sspan<T> to) {
    auto& m = gradcomp_test::strict_memory::instance();
    ++m.counters.copies_to_backend;
    m.counters.last_stream = b.stream;
    if (to.size() < from.size()) throw std::logic_error("strict_backend: copy_to_backend into a smaller span");
    gradcomp_test::strict_memory::scope open;
    const auto dst = gradcomp_test::unwrap(to);
    if (!from.empty()) std::memcpy(static_cast<void*>(dst.data()), from.data(), from.size_bytes());
  }
  static void synchronize(const backend& b) {
    auto& m = gradcomp_test::strict_memory::instance();
    ++m.counters.synchronizations;
    m.counters.last_stream = b.stream;
    m.complete();
  }

  // --- Work over tensors: one after the other, one workspace slot (one_tensor_at_a_time) ---

  // --- Sizes (host arithmetic) ---
  template <class T>
  static std::size_t exact_topk_workspace_bytes(const backend&, std::size_t n, std::size_t k) {
    return cpu::exact_topk_workspace_bytes<T>(cpu_backend{}, n, k);
  }
  // --- The aggregator's kernels ---
  template <class T>
  static void fill_zero(const backend& b, sspan<T> x) {
    run(b, [&] { cpu::fill_zero(cpu_backend{}, unwrap(x)); });
  }
  template <class T>
  static void add(const backend& b, sspan<const T> values, sspan<T> acc) {
    run(b, [&] { cpu::add(cpu_backend{}, unwrap(values), unwrap(acc)); });
  }
  template <class T>
  static void scatter_add(const backend& b, sspan<const std::uint32_t> idx, sspan<const T> values, sspan<T> acc) {
    run(b, [&] { cpu::scatter_add(cpu_backend{}, unwrap(idx), unwrap(values), unwrap(acc)); });
  }
  template <class T>
  static void scale(const backend& b, T c, sspan<T> x) {
    run(b, [&] { cpu::scale(cpu_backend{}, c, unwrap(x)); });
  }
  template <class T>
  static void momentum_apply(const backend& b, momentum_kind kind, T m, sspan<T> u, sspan<T> a) {
    run(b, [&] { cpu::momentum_apply(cpu_backend{}, kind, m, unwrap(u), unwrap(a)); });
  }
  // The members that return a value to the host wait for it: a synchronisation each.
  template <class T>
  static double largest_magnitude(const backend& b, sspan<const T> x) {
    return wait_for(b, [&] { return cpu::largest_magnitude(cpu_backend{}, unwrap(x)); });
  }
  template <class T>
  static double largest_magnitude_of_sum(const backend& b, sspan<const T> acc, sspan<const std::uint32_t> idx,
                                         sspan<const T> values) {
    return wait_for(b, [&] { return cpu::largest_magnitude_of_sum(cpu_backend{}, unwrap(acc), unwrap(idx), unwrap(values)); });
  }
  template <class T>
  static state_magnitudes momentum_apply_magnitudes(const backend& b, momentum_kind kind, T m, T inv, bool scaled,
                                                    sspan<const T> u, sspan<const T> a) {
    return wait_for(b, [&] {
      return cpu::momentum_apply_magnitudes(cpu_backend{}, kind, m, inv, scaled, unwrap(u), unwrap(a));
    });
  }
  static errc check_positions(const backend& b, sspan<const std::uint32_t> idx, std::size_t n) {
    return wait_for(b, [&] { return cpu::check_positions(cpu_backend{}, unwrap(idx), n); });
  }

 private:
  template <class F>
  static auto wait_for(const backend& b, F&& f) -> decltype(f()) {
    synchronize(b);
    decltype(f()) out{};
    run(b, [&] { out = f(); });
    return out;
  }
  template <class T>
  static span<T> unwrap(sspan<T> s) {
    return gradcomp_test::unwrap(s);
  }
  template <class F>
  static void run(const backend& b, F&& f) {
    gradcomp_test::strict_run(b, f);
  }
};

namespace gradcomp_test {

// An argument of a quantiser kernel as the CPU kernel takes it: strict spans unwrapped (and
// checked), anything else as it is.
template <class T>
gradcomp::span<T> pass(strict_span<T> s) {
  return unwrap(s);
}
template <class A>
const A& pass(const A& a) {
  return a;
}
template <class A>
A& pass(A& a) {  // state the kernel updates (the DGC step's selection state)
  return a;
}

// A quantiser's kernels on strict memory (measure, plan, apply): the CPU's, `Cpu`, each call
// counted and run with the memory open.
template <class Cpu>
struct strict_quantiser_ops {
  template <class... A>
  static void measure(const strict_backend& b, const A&... a) {
    strict_run(b, [&] { Cpu::measure(gradcomp::cpu_backend{}, pass(a)...); });
  }
  template <class... A>
  static void plan(const strict_backend& b, const A&... a) {
    strict_run(b, [&] { Cpu::plan(gradcomp::cpu_backend{}, pass(a)...); });
  }
  template <class... A>
  static void apply(const strict_backend& b, const A&... a) {
    strict_run(b, [&] { Cpu::apply(gradcomp::cpu_backend{}, pass(a)...); });
  }
};

}  // namespace gradcomp_test

template <>
struct gradcomp::detail::ef_sign_ops<gradcomp_test::strict_backend>
    : gradcomp_test::strict_quantiser_ops<ef_sign_ops<cpu_backend>> {};
template <>
struct gradcomp::detail::terngrad_ops<gradcomp_test::strict_backend>
    : gradcomp_test::strict_quantiser_ops<terngrad_ops<cpu_backend>> {};
template <>
struct gradcomp::detail::qsgd_ops<gradcomp_test::strict_backend>
    : gradcomp_test::strict_quantiser_ops<qsgd_ops<cpu_backend>> {};
template <>
struct gradcomp::detail::onebit_ops<gradcomp_test::strict_backend>
    : gradcomp_test::strict_quantiser_ops<onebit_ops<cpu_backend>> {};
template <>
struct gradcomp::detail::adacomp_ops<gradcomp_test::strict_backend>
    : gradcomp_test::strict_quantiser_ops<adacomp_ops<cpu_backend>> {};

// Step-Ahead Error Feedback's element-wise kernels on strict memory: the CPU's, each call counted.
template <>
struct gradcomp::detail::saef_ops<gradcomp_test::strict_backend> {
  using cpu = saef_ops<cpu_backend>;
  template <class... A>
  static void momentum(const gradcomp_test::strict_backend& b, const A&... a) {
    gradcomp_test::strict_run(b, [&] { cpu::momentum(cpu_backend{}, gradcomp_test::pass(a)...); });
  }
  template <class... A>
  static void difference(const gradcomp_test::strict_backend& b, const A&... a) {
    gradcomp_test::strict_run(b, [&] { cpu::difference(cpu_backend{}, gradcomp_test::pass(a)...); });
  }
  template <class... A>
  static void expand(const gradcomp_test::strict_backend& b, const A&... a) {
    gradcomp_test::strict_run(b, [&] { cpu::expand(cpu_backend{}, gradcomp_test::pass(a)...); });
  }
};

// The DGC step's kernels on strict memory: the CPU's, each call counted.
template <>
struct gradcomp::detail::dgc_ops<gradcomp_test::strict_backend> {
  using cpu = dgc_ops<cpu_backend>;
  template <class T>
  using selection_state = cpu::selection_state<T>;
  template <class T>
  static std::size_t workspace_bytes(const gradcomp_test::strict_backend&, const sampled_threshold_config& cfg,
                                     std::size_t n, std::size_t k) {
    return cpu::workspace_bytes<T>(cpu_backend{}, cfg, n, k);
  }
#define GRADCOMP_TEST_STRICT_DGC(name)                                                              \
  template <class... A>                                                                            \
  static void name(const gradcomp_test::strict_backend& b, A&&... a) {                            \
    gradcomp_test::strict_run(b, [&] { cpu::name(cpu_backend{}, gradcomp_test::pass(a)...); }); \
  }
  GRADCOMP_TEST_STRICT_DGC(read_gradient)
  GRADCOMP_TEST_STRICT_DGC(plan)
  GRADCOMP_TEST_STRICT_DGC(exact_bounds)
  GRADCOMP_TEST_STRICT_DGC(settle_guard)
  GRADCOMP_TEST_STRICT_DGC(dense_step)
  GRADCOMP_TEST_STRICT_DGC(compressed_step)
  GRADCOMP_TEST_STRICT_DGC(commit)
#undef GRADCOMP_TEST_STRICT_DGC
};
