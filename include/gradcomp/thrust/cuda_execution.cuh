// The portable Thrust backend's execution on Thrust's CUDA system (included by
// thrust/system_memory.hpp when nvcc compiles it).
//
// Algorithms run with thrust::cuda::par_nosync on the default stream: each kernel is queued
// without the host waiting for it. The host waits only where it needs a value (a count, a
// verdict, a record: Thrust's own reductions, and the copies of thrust/system_memory.hpp, which
// are ordered after the queued kernels on the same stream) and in ops::synchronize.
//
// The exact top-k's radix select runs on hand-written kernels (thrust/cuda_select.cuh, whose
// definitions thrust/select.hpp includes): a handful of launches and one copy back per
// selection, the portable path's results bit for bit.
//
// The temporary storage of Thrust's algorithms (sorts, scans, compactions, reductions) comes
// from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the same stream, served
// from the device's default memory pool): plain cudaFree would wait for the whole device after
// every algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>

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

  // The radix select over `count` keys and the output of the selection (thrust/select.hpp's
  // radix_select_and_emit), on the kernels of thrust/cuda_select.cuh.
  template <class T, class KeyAt, class IndexAt>
  static result<std::size_t> radix_select_and_emit(std::size_t count, std::size_t k, KeyAt key_at, IndexAt index_at,
                                                   std::uint32_t* out, radix_state<key_t<T>>* state,
                                                   std::uint32_t* hist, std::uint32_t* block_counts, T* threshold);
  // The sample-guided plan of the exact top-k (thrust/select.hpp's exact_topk), its decisions
  // taken on the device; `bitmap`: candidate_bitmap_words(n) words.
  template <class T>
  static result<std::size_t> sample_guided_topk(const T* values, std::size_t n, std::size_t k,
                                                const cpu::topk_plan& plan, std::uint32_t* out,
                                                radix_state<key_t<T>>* state, std::uint32_t* hist,
                                                std::uint32_t* block_counts, key_t<T>* keys, std::uint32_t* idx,
                                                std::uint32_t* bitmap, T* threshold);
  // The sample-guided plan's bitmap of the keys at or above its cut: one bit per element.
  static constexpr std::size_t candidate_bitmap_words(std::size_t n) noexcept { return n / 32 + (n % 32 != 0); }
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
