// The portable Thrust backend's execution on Thrust's CUDA system (included by
// thrust/system_memory.hpp when nvcc compiles it).
//
// Algorithms run with thrust::cuda::par_nosync on the default stream: each kernel is queued
// without the host waiting for it. Reductions and compactions whose results the next kernels
// need run on CUB (reduce_into, select_into), which leaves them in device memory. The host waits
// only where it asks for a value (the copies of thrust/system_memory.hpp, ordered after the
// queued kernels on the same stream, and the public functions that return one) and in
// ops::synchronize.
//
// The exact top-k's radix select runs on hand-written kernels (thrust/cuda_select.cuh, whose
// definitions thrust/select.hpp includes): a handful of launches per selection, the portable
// path's decisions and results bit for bit.
//
// The temporary storage of Thrust's algorithms (sorts, scans, compactions, reductions) comes
// from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the same stream, served
// from the device's default memory pool): plain cudaFree would wait for the whole device after
// every algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime_api.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/error.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include "../cpu/select_kernels.hpp"
#include "../detail/magnitude.hpp"
#include "../error.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class System>
struct execution;
template <class Key>
struct radix_state;

// Thrust's temporary storage in stream order on the default stream.
struct stream_ordered_temporaries {
  using value_type = char;
  char* allocate(std::ptrdiff_t bytes) {
    void* p = nullptr;
    if (cudaMallocAsync(&p, static_cast<std::size_t>(bytes), cudaStream_t{}) != cudaSuccess) throw std::bad_alloc();
    return static_cast<char*>(p);
  }
  void deallocate(char* p, std::size_t) noexcept { (void)cudaFreeAsync(p, cudaStream_t{}); }
};

template <>
struct execution<thrust::system::cuda::tag> {
  static constexpr bool hand_kernels = true;
  static auto policy() { return thrust::cuda::par_nosync(stream_ordered_temporaries{}); }
  static void* allocate_scratch(std::size_t bytes) {
    return stream_ordered_temporaries{}.allocate(static_cast<std::ptrdiff_t>(bytes));
  }
  static void release_scratch(void* p) noexcept {
    stream_ordered_temporaries{}.deallocate(static_cast<char*>(p), 0);
  }
  // Waits for the work queued on the default stream; an error a kernel left is thrown as
  // Thrust's system_error, as Thrust's own algorithms report it.
  static void wait() {
    const cudaError_t e = cudaStreamSynchronize(cudaStream_t{});
    if (e != cudaSuccess) throw thrust::system_error(e, thrust::cuda_category(), "gradcomp: waiting for the GPU");
  }

  // reduce_into and select_into (thrust/system_memory.hpp) on CUB's device algorithms, whose
  // results stay in device memory: nothing waits. Their temporary storage is stream-ordered.
  template <class It, class V, class Op>
  static void reduce_into(It first, std::size_t n, V init, Op op, V* out) {
    run_cub("gradcomp: a reduction on the GPU", [&](void* temp, std::size_t& bytes) {
      return cub::DeviceReduce::Reduce(temp, bytes, first, out, n, op, init, cudaStream_t{});
    });
  }
  template <class Values, class Keep, class Out>
  static void select_into(Values values, std::size_t n, Keep keep, Out out, std::uint64_t* count) {
    const thrust::counting_iterator<std::size_t> positions(0);
    run_cub("gradcomp: a compaction on the GPU", [&](void* temp, std::size_t& bytes) {
      return cub::DeviceSelect::FlaggedIf(temp, bytes, values, positions, out, count,
                                          static_cast<::cuda::std::int64_t>(n), keep, cudaStream_t{});
    });
  }
  // A CUB device algorithm: the size query, then the call with stream-ordered storage.
  template <class Call>
  static void run_cub(const char* what, Call call) {
    std::size_t bytes = 0;
    check(call(nullptr, bytes), what);
    void* temp = allocate_scratch(bytes == 0 ? 1 : bytes);
    const cudaError_t e = call(temp, bytes);
    release_scratch(temp);
    check(e, what);
  }
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw thrust::system_error(e, thrust::cuda_category(), what);
  }

  // thrust/select.hpp's issue_radix_select and the sample-guided plan of issue_exact_topk, on
  // the kernels of thrust/cuda_select.cuh; every decision on the device, nothing waits.
  template <class T, class Source>
  static void issue_radix_select(const Source& src, std::size_t most, std::size_t k, std::uint32_t* out,
                                 radix_state<key_t<T>>* state, std::uint32_t* hist, std::uint32_t* block_counts,
                                 const std::int32_t* gate);
  // `bitmap`: candidate_bitmap_words(n) words.
  template <class T>
  static void issue_sample_guided(const T* values, std::size_t n, std::size_t k, const cpu::topk_plan& plan,
                                  std::uint32_t* out, radix_state<key_t<T>>* state, std::uint32_t* hist,
                                  std::uint32_t* block_counts, key_t<T>* keys, std::uint32_t* idx,
                                  std::uint32_t* bitmap, const std::int32_t* gate);
  // The sample-guided plan's bitmap of the keys at or above its cut: one bit per element.
  static constexpr std::size_t candidate_bitmap_words(std::size_t n) noexcept { return n / 32 + (n % 32 != 0); }
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
