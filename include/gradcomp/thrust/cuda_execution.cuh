// The portable Thrust backend's execution on Thrust's CUDA system (included by
// thrust/system_memory.hpp when nvcc compiles it).
//
// Algorithms run with thrust::cuda::par_nosync on the backend's stream (thrust_backend::on; the
// default stream unless set): each kernel is queued without the host waiting for it. Reductions
// and compactions whose results the next kernels need run on CUB (reduce_into, select_into), which
// leaves them in device memory. The host waits only where it asks for a value (the copies of
// thrust/system_memory.hpp, ordered after the queued kernels on the same stream, and the public
// functions that return one) and in ops::synchronize.
//
// The exact top-k's radix select runs on hand-written kernels (thrust/cuda_select.cuh, whose
// definitions thrust/select.hpp includes): a handful of launches per selection, the portable
// path's decisions and results bit for bit.
//
// The temporary storage of Thrust's algorithms (sorts, scans, compactions, reductions) and of the
// backend's own scratch comes from the stream-ordered allocator (cudaMallocFromPoolAsync /
// cudaFreeAsync on the same stream): plain cudaFree would wait for the whole device after every
// algorithm. It is served from a memory pool of gradcomp's own per device, which keeps the memory
// it has reserved (its release threshold is at its maximum): the device's default pool, whose
// threshold is 0 unless the program changed it, hands its memory back at every synchronisation,
// so the next step would reserve it from the driver again. The program's default pool is left as
// it is. Where a pool cannot be created, the default pool serves.
//
// A failed CUDA call is thrown as gradcomp::error with errc::device_error or, where the CUDA
// context is lost, errc::device_fault (thrust/cuda_errors.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime_api.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/execution_policy.h>

#include "../cpu/select_kernels.hpp"
#include "../detail/magnitude.hpp"
#include "../error.hpp"
#include "cuda_errors.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class System>
struct execution;
template <class Key>
struct radix_state;
using stream_t = ::CUstream_st*;  // as thrust/system_memory.hpp declares it: cudaStream_t

// cuda_sticky's codes, in their order, as the CUDA runtime names them.
constexpr cudaError_t cuda_runtime_sticky[] = {
    cudaErrorECCUncorrectable,   cudaErrorNvlinkUncorrectable, cudaErrorIllegalAddress,    cudaErrorLaunchTimeout,
    cudaErrorContextIsDestroyed, cudaErrorAssert,               cudaErrorHardwareStackError, cudaErrorIllegalInstruction,
    cudaErrorMisalignedAddress,  cudaErrorInvalidAddressSpace,  cudaErrorInvalidPc,          cudaErrorLaunchFailure,
    cudaErrorTensorMemoryLeak,   cudaErrorExternalDevice};
constexpr bool sticky_codes_match() noexcept {
  if (sizeof(cuda_runtime_sticky) / sizeof(cuda_runtime_sticky[0]) !=
      sizeof(cuda_sticky_codes) / sizeof(cuda_sticky_codes[0]))
    return false;
  for (std::size_t i = 0; i < sizeof(cuda_sticky_codes) / sizeof(cuda_sticky_codes[0]); ++i)
    if (cuda_sticky_codes[i] != static_cast<int>(cuda_runtime_sticky[i])) return false;
  return true;
}
static_assert(sticky_codes_match(), "thrust/cuda_errors.hpp's codes are the CUDA runtime's");

// A failed CUDA call as gradcomp::error: errc::device_fault where the context is lost, else
// errc::device_error; the message names the operation and gives CUDA's text.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw gradcomp::error(cuda_errc(static_cast<int>(e)), std::string(what) + ": " + cudaGetErrorString(e));
}

// gradcomp's memory pool on the current device (created at its first use, kept until the
// process ends), or null where one cannot be created.
// Every allocation asks for it, so once a device's pool is settled it is read without the lock.
inline cudaMemPool_t temporaries_pool() {
  constexpr int most_devices = 64;
  static std::mutex lock;
  static std::atomic<cudaMemPool_t> pools[most_devices] = {};
  static std::atomic<bool> tried[most_devices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= most_devices) return nullptr;
  if (tried[device].load(std::memory_order_acquire)) return pools[device].load(std::memory_order_relaxed);
  const std::lock_guard<std::mutex> guard(lock);
  if (!tried[device].load(std::memory_order_relaxed)) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    std::uint64_t keep_all = ~std::uint64_t(0);
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
      (void)cudaGetLastError();  // the failed creation leaves nothing behind
    } else if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaMemPoolDestroy(pool);
    } else {
      pools[device].store(pool, std::memory_order_relaxed);
    }
    tried[device].store(true, std::memory_order_release);
  }
  return pools[device].load(std::memory_order_relaxed);
}

// Thrust's temporary storage in stream order on the stream of the work, from gradcomp's pool.
struct stream_ordered_temporaries {
  using value_type = char;
  cudaStream_t stream = nullptr;
  char* allocate(std::ptrdiff_t bytes) {
    void* p = nullptr;
    const cudaMemPool_t pool = temporaries_pool();
    const cudaError_t e = pool != nullptr ? cudaMallocFromPoolAsync(&p, static_cast<std::size_t>(bytes), pool, stream)
                                          : cudaMallocAsync(&p, static_cast<std::size_t>(bytes), stream);
    if (e == cudaErrorMemoryAllocation) throw std::bad_alloc();
    check_cuda(e, "gradcomp: temporary device memory");
    return static_cast<char*>(p);
  }
  void deallocate(char* p, std::size_t) noexcept { (void)cudaFreeAsync(p, stream); }
};

template <>
struct execution<thrust::system::cuda::tag> {
  static constexpr bool hand_kernels = true;
  static auto policy(stream_t stream) {
    return thrust::cuda::par_nosync(stream_ordered_temporaries{stream}).on(stream);
  }
  static void* allocate_scratch(stream_t stream, std::size_t bytes) {
    return stream_ordered_temporaries{stream}.allocate(static_cast<std::ptrdiff_t>(bytes));
  }
  static void release_scratch(stream_t stream, void* p) noexcept {
    stream_ordered_temporaries{stream}.deallocate(static_cast<char*>(p), 0);
  }
  // Waits for the work issued on the stream; an error a kernel left is thrown (check_cuda).
  static void wait(stream_t stream) { check_cuda(cudaStreamSynchronize(stream), "gradcomp: waiting for the GPU"); }
  // Copies in order on the stream, complete when they return. A copy from pageable host memory
  // has read its source when it returns, as the contract requires.
  static void copy_to_host(stream_t stream, const void* from, void* to, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream), "gradcomp: a copy to the host");
    wait(stream);
  }
  static void copy_to_system(stream_t stream, const void* from, void* to, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream), "gradcomp: a copy to the GPU");
    wait(stream);
  }
  // Staging memory is page-locked, so that an upload from it is queued on the stream and returns
  // at once.
  static void* allocate_staging(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes);
    if (e == cudaErrorMemoryAllocation) throw std::bad_alloc();
    check_cuda(e, "gradcomp: page-locked host memory");
    return p;
  }
  static void free_staging(void* p) noexcept { (void)cudaFreeHost(p); }
  static void upload(stream_t stream, const void* from, void* to, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream), "gradcomp: a copy to the GPU");
  }

  // reduce_into and select_into (thrust/system_memory.hpp) on CUB's device algorithms, whose
  // results stay in device memory: nothing waits. Their temporary storage is stream-ordered.
  template <class It, class V, class Op>
  static void reduce_into(stream_t stream, It first, std::size_t n, V init, Op op, V* out) {
    run_cub(stream, "gradcomp: a reduction on the GPU", [&](void* temp, std::size_t& bytes) {
      return cub::DeviceReduce::Reduce(temp, bytes, first, out, n, op, init, stream);
    });
  }
  template <class Values, class Keep, class Out>
  static void select_into(stream_t stream, Values values, std::size_t n, Keep keep, Out out, std::uint64_t* count) {
    const thrust::counting_iterator<std::size_t> positions(0);
    run_cub(stream, "gradcomp: a compaction on the GPU", [&](void* temp, std::size_t& bytes) {
      return cub::DeviceSelect::FlaggedIf(temp, bytes, values, positions, out, count,
                                          static_cast<::cuda::std::int64_t>(n), keep, stream);
    });
  }
  // A CUB device algorithm: the size query, then the call with stream-ordered storage.
  template <class Call>
  static void run_cub(stream_t stream, const char* what, Call call) {
    std::size_t bytes = 0;
    check_cuda(call(nullptr, bytes), what);
    void* temp = allocate_scratch(stream, bytes == 0 ? 1 : bytes);
    const cudaError_t e = call(temp, bytes);
    release_scratch(stream, temp);
    check_cuda(e, what);
  }

  // thrust/select.hpp's issue_radix_select and the sample-guided plan of issue_exact_topk, on
  // the kernels of thrust/cuda_select.cuh; every decision on the device, nothing waits.
  template <class T, class Source>
  static void issue_radix_select(stream_t stream, const Source& src, std::size_t most, std::size_t k,
                                 std::uint32_t* out, radix_state<key_t<T>>* state, std::uint32_t* hist,
                                 std::uint32_t* block_counts, const std::int32_t* gate);
  // `bitmap`: candidate_bitmap_words(n) words.
  template <class T>
  static void issue_sample_guided(stream_t stream, const T* values, std::size_t n, std::size_t k,
                                  const cpu::topk_plan& plan, std::uint32_t* out, radix_state<key_t<T>>* state,
                                  std::uint32_t* hist, std::uint32_t* block_counts, key_t<T>* keys, std::uint32_t* idx,
                                  std::uint32_t* bitmap, const std::int32_t* gate);
  // The sample-guided plan's bitmap of the keys at or above its cut: one bit per element.
  static constexpr std::size_t candidate_bitmap_words(std::size_t n) noexcept { return n / 32 + (n % 32 != 0); }
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
