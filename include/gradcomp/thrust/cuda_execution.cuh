// The portable Thrust backend's execution on Thrust's CUDA system (included by
// thrust/system_memory.hpp when nvcc compiles it).
//
// Algorithms run with thrust::cuda::par_nosync on the default stream: each kernel is queued
// without the host waiting for it. The host waits only where it needs a value (a count, a
// verdict, a record: Thrust's own reductions, and the copies of thrust/system_memory.hpp, which
// are ordered after the queued kernels on the same stream) and in ops::synchronize.
//
// The temporary storage of Thrust's algorithms (sorts, scans, compactions, reductions) comes
// from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the same stream, served
// from the device's default memory pool): plain cudaFree would wait for the whole device after
// every algorithm.
#pragma once

#include <cstddef>
#include <new>

#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class System>
struct execution;

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
  static auto policy() { return thrust::cuda::par_nosync(stream_ordered_temporaries{}); }
  // Waits for the work queued on the default stream; an error a kernel left is thrown as
  // Thrust's system_error, as Thrust's own algorithms report it.
  static void wait() {
    const cudaError_t e = cudaStreamSynchronize(cudaStream_t{});
    if (e != cudaSuccess) throw thrust::system_error(e, thrust::cuda_category(), "gradcomp: waiting for the GPU");
  }
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
