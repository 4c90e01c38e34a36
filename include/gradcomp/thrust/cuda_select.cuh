// The exact top-k of the Thrust backend on the CUDA system, on hand-written kernels: the same
// radix select as the portable path (thrust/select.hpp), with every decision taken on the device
// and one copy back per selection (the NaN verdict, the k-th key, the count), instead of a
// Thrust call, a synchronisation and a temporary allocation per step.
//
// Kernels (all on the default stream, in the order below):
// - radix_init        <<<1, 1024>>>  the radix state (thrust_impl::radix_start), histogram zeroed.
//                     The state lives in the caller's workspace; the host copies it back once.
// - radix_histogram   <<<up to 2048, 256>>>  per digit: a grid-stride loop counts the keys whose
//                     higher digits match the prefix into a shared-memory histogram (2,048 bins),
//                     added to the global one; the first pass also flags NaN keys.
// - radix_decide      <<<1, 1024>>>  per digit: thread t holds bins 2047-2t and 2046-2t; an
//                     exclusive block scan of their sums (highest bins first) finds the bin
//                     holding the k-th key (the one thread where the running sum crosses `need`),
//                     thread 0 applies the CPU's decision (cpu::radix_kth_largest); the histogram
//                     is zeroed for the next digit. Invariant: the bins matching the prefix hold
//                     at least `need` keys, so exactly one thread finds the bin.
// - count_classes / scan_classes / write_classes: a stable compaction in three launches. Every
//   key is of class 2 (always taken), 1 (taken while its rank among the class-1 keys, in index
//   order, is below a limit) or 0. Tiles of 2,048 keys (256 threads x 8 consecutive keys, so that
//   thread order is index order) count both classes; one block scans the tiles' counts (any
//   number of tiles, 1,024 at a time); each tile then writes its taken keys at
//   (class 2 before it) + min(class 1 before it, limit) + (taken before it in the tile). The
//   output of the selection is the compaction with class 2 = above the k-th key, class 1 = equal
//   to it, limit = the equal keys to take; the sample-guided plan's candidates are the
//   compaction of the keys at or above the cut.
// - plan_cut / plan_choose <<<1, 1>>>: the sample-guided plan's decisions (thrust_impl::exact_topk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/error.h>
#include <thrust/system_error.h>

#include "../cpu/select_kernels.hpp"
#include "../detail/magnitude.hpp"
#include "../error.hpp"
#include "cuda_execution.cuh"
#include "select.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {
namespace cuda_kernels {

constexpr unsigned block_threads = 256;
constexpr unsigned block_items = 8;
constexpr std::size_t tile = std::size_t(block_threads) * block_items;  // keys per tile of the counts
constexpr unsigned decide_threads = static_cast<unsigned>(radix_bins / 2);
constexpr std::size_t histogram_blocks = 2048;
static_assert(tile == 2 * equal_block, "two counts per tile fit the per-block counts of thrust/select.hpp");

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw thrust::system_error(e, thrust::cuda_category(), what);
}

// The keys a selection reads. A fixed number of them:
template <class KeyAt, class IndexAt>
struct fixed_source {
  KeyAt key_at;
  IndexAt index_at;
  std::size_t n;
  __device__ std::size_t size() const { return n; }
  __device__ auto key(std::size_t i) const { return key_at(i); }
  __device__ std::uint32_t index(std::size_t i) const { return index_at(i); }
};

// The strided sample of the sample-guided plan (thrust_impl::sample_key).
template <class T>
struct sample_source {
  const T* values;
  std::size_t stride;
  std::size_t n;
  __device__ std::size_t size() const { return n; }
  __device__ key_t<T> key(std::size_t i) const { return magnitude_key(values[stride / 2 + i * stride]); }
  __device__ std::uint32_t index(std::size_t i) const { return static_cast<std::uint32_t>(i); }
};

// The sample-guided plan's selection: the compacted candidates, or the whole input where the plan
// fell back to it (decided on the device: radix_state::candidates).
template <class T>
struct chosen_source {
  const T* values;
  const key_t<T>* keys;
  const std::uint32_t* idx;
  std::size_t n;
  const radix_state<key_t<T>>* s;
  __device__ std::size_t size() const { return s->candidates != 0 ? s->passing : n; }
  __device__ key_t<T> key(std::size_t i) const { return s->candidates != 0 ? keys[i] : magnitude_key(values[i]); }
  __device__ std::uint32_t index(std::size_t i) const {
    return s->candidates != 0 ? idx[i] : static_cast<std::uint32_t>(i);
  }
};

// `reset_plan`: also clears the sample-guided plan's fields (every byte of the state is then
// written before the host copies it back).
template <class T>
__global__ void radix_init(radix_state<key_t<T>>* s, std::uint64_t k, std::uint32_t full, bool reset_plan,
                           std::uint32_t* hist) {
  if (threadIdx.x == 0) {
    radix_start<T>{s, k, full}(0);
    if (reset_plan) {
      s->passing = 0;
      s->cut = 0;
      s->candidates = 0;
    }
  }
  for (std::size_t b = threadIdx.x; b <= radix_bins; b += blockDim.x) hist[b] = 0;
}

template <class T, class Source>
__global__ void __launch_bounds__(block_threads)
    radix_histogram(const radix_state<key_t<T>>* s, Source src, std::uint32_t* hist) {
  using key_type = key_t<T>;
  __shared__ std::uint32_t bins[radix_bins];
  __shared__ std::uint32_t nan_seen;
  if (s->done != 0) return;  // the same for every thread
  const key_type prefix = s->prefix;
  const key_type mask = s->mask;
  const int shift = s->shift;
  const int bits = s->bits;
  const bool check_nan = mask == 0 && s->full == 0;
  for (unsigned b = threadIdx.x; b < radix_bins; b += block_threads) bins[b] = 0;
  if (threadIdx.x == 0) nan_seen = 0;
  __syncthreads();
  const key_type digit_mask = static_cast<key_type>((key_type(1) << bits) - 1);
  const std::size_t n = src.size();
  std::uint32_t nan = 0;
  const std::size_t step = std::size_t(gridDim.x) * block_threads;
  for (std::size_t i = std::size_t(blockIdx.x) * block_threads + threadIdx.x; i < n; i += step) {
    const key_type key = src.key(i);
    if (check_nan && is_nan_key<T>(key)) nan = 1;
    if ((key & mask) == prefix) atomicAdd(&bins[static_cast<unsigned>((key >> shift) & digit_mask)], 1u);
  }
  if (nan != 0) atomicOr(&nan_seen, 1u);
  __syncthreads();
  const unsigned used = 1u << bits;
  for (unsigned b = threadIdx.x; b < used; b += block_threads)
    if (bins[b] != 0) atomicAdd(hist + b, bins[b]);
  if (threadIdx.x == 0 && nan_seen != 0) atomicOr(hist + radix_bins, 1u);
}

template <class T>
__global__ void __launch_bounds__(decide_threads) radix_decide(radix_state<key_t<T>>* s, std::uint32_t* hist) {
  using key_type = key_t<T>;
  using scan_t = cub::BlockScan<unsigned long long, decide_threads>;
  __shared__ typename scan_t::TempStorage temp;
  __shared__ unsigned found;
  __shared__ unsigned long long found_above;
  __shared__ unsigned long long found_count;
  if (s->done != 0) return;  // the same for every thread
  const unsigned t = threadIdx.x;
  const unsigned b0 = static_cast<unsigned>(radix_bins) - 1 - 2 * t;
  const unsigned b1 = b0 - 1;
  const unsigned long long h0 = hist[b0];
  const unsigned long long h1 = hist[b1];
  const unsigned long long need = s->need;
  const bool nan = s->mask == 0 && s->full == 0 && hist[radix_bins] != 0;
  if (t == 0) {
    found = 0;
    found_above = 0;
    found_count = 0;
  }
  unsigned long long before = 0;
  scan_t(temp).ExclusiveSum(h0 + h1, before);  // synchronises the block before and after
  if (before < need && before + h0 >= need) {
    found = b0;
    found_above = before;
    found_count = h0;
  } else if (before + h0 < need && before + h0 + h1 >= need) {
    found = b1;
    found_above = before + h0;
    found_count = h1;
  }
  __syncthreads();
  hist[b0] = 0;
  hist[b1] = 0;
  if (t != 0) return;
  hist[radix_bins] = 0;
  radix_state<key_type> st = *s;
  if (nan) {
    st.nan = 1;
    st.done = 1;
    *s = st;
    return;
  }
  const key_type digit_mask = static_cast<key_type>((key_type(1) << st.bits) - 1);
  st.need -= found_above;
  st.prefix |= static_cast<key_type>(found) << st.shift;
  st.mask |= static_cast<key_type>(digit_mask << st.shift);
  if (found_count == st.need && st.full == 0) {  // the whole bin is taken
    st.take_equal = cpu::take_all_equal;
    st.done = 1;
  } else if (st.shift == 0) {
    st.take_equal = st.need;
    st.done = 1;
  } else {
    st.bits = st.shift < radix_bits ? st.shift : radix_bits;
    st.shift -= st.bits;
  }
  *s = st;
}

// The output of the selection: above the k-th key, and the first take_equal keys equal to it.
template <class T, class Source>
struct emit_classes {
  radix_state<key_t<T>>* s;
  Source src;
  std::uint32_t* out;
  __device__ bool skip() const { return s->nan != 0; }
  __device__ std::size_t size() const { return src.size(); }
  __device__ int of(std::size_t i) const {
    const key_t<T> key = src.key(i);
    const key_t<T> kth = s->prefix;
    return key > kth ? 2 : key == kth ? 1 : 0;
  }
  __device__ std::uint64_t limit() const { return s->take_equal; }
  __device__ void write(std::size_t pos, std::size_t i) const { out[pos] = src.index(i); }
  __device__ std::uint64_t* total() const { return &s->count; }
};

// The sample-guided plan's candidates: every key at or above the cut, with its index.
template <class T>
struct cut_classes {
  const T* values;
  std::size_t n;
  radix_state<key_t<T>>* s;
  key_t<T>* keys;
  std::uint32_t* idx;
  __device__ bool skip() const { return s->candidates == 0; }
  __device__ std::size_t size() const { return n; }
  __device__ int of(std::size_t i) const { return magnitude_key(values[i]) >= s->cut ? 2 : 0; }
  __device__ std::uint64_t limit() const { return 0; }
  __device__ void write(std::size_t pos, std::size_t i) const {
    keys[pos] = magnitude_key(values[i]);
    idx[pos] = static_cast<std::uint32_t>(i);
  }
  __device__ std::uint64_t* total() const { return &s->passing; }
};

// Per tile: the class-2 and class-1 counts, at pairs[2 * tile] and pairs[2 * tile + 1].
template <class Classes>
__global__ void __launch_bounds__(block_threads) count_classes(Classes c, std::uint32_t* pairs) {
  using reduce_t = cub::BlockReduce<std::uint32_t, block_threads>;
  __shared__ typename reduce_t::TempStorage temp;
  const std::size_t n = c.size();
  const std::size_t first = std::size_t(blockIdx.x) * tile + std::size_t(threadIdx.x) * block_items;
  std::uint32_t packed = 0;  // class 2 in the high half; a tile holds fewer than 2^16 keys
  for (unsigned j = 0; j < block_items; ++j) {
    const std::size_t i = first + j;
    if (i >= n) break;
    const int k = c.of(i);
    packed += k == 2 ? 0x10000u : k == 1 ? 1u : 0u;
  }
  const std::uint32_t sum = reduce_t(temp).Sum(packed);
  if (threadIdx.x == 0) {
    pairs[2 * std::size_t(blockIdx.x)] = sum >> 16;
    pairs[2 * std::size_t(blockIdx.x) + 1] = sum & 0xffffu;
  }
}

// The tiles' counts replaced by the counts before each tile; the total taken to c.total().
template <class Classes>
__global__ void __launch_bounds__(decide_threads) scan_classes(Classes c, std::uint32_t* pairs, std::size_t tiles) {
  using scan_t = cub::BlockScan<unsigned long long, decide_threads>;
  __shared__ typename scan_t::TempStorage temp;
  unsigned long long carry = 0;  // class 2 in the high half, class 1 in the low: each below 2^32
  for (std::size_t base = 0; base < tiles; base += decide_threads) {
    const std::size_t b = base + threadIdx.x;
    const unsigned long long v =
        b < tiles ? (static_cast<unsigned long long>(pairs[2 * b]) << 32) | pairs[2 * b + 1] : 0ull;
    unsigned long long before = 0, chunk = 0;
    scan_t(temp).ExclusiveSum(v, before, chunk);
    if (b < tiles) {
      const unsigned long long at = carry + before;
      pairs[2 * b] = static_cast<std::uint32_t>(at >> 32);
      pairs[2 * b + 1] = static_cast<std::uint32_t>(at & 0xffffffffull);
    }
    carry += chunk;
    __syncthreads();  // the scan's storage is used again
  }
  if (threadIdx.x == 0) {
    const std::uint64_t sure = carry >> 32;
    const std::uint64_t ties = carry & 0xffffffffull;
    const std::uint64_t limit = c.limit();
    *c.total() = sure + (ties < limit ? ties : limit);
  }
}

template <class Classes>
__global__ void __launch_bounds__(block_threads) write_classes(Classes c, const std::uint32_t* pairs) {
  using scan_t = cub::BlockScan<std::uint32_t, block_threads>;
  __shared__ typename scan_t::TempStorage temp;
  if (c.skip()) return;  // the same for every thread
  const std::size_t n = c.size();
  const std::size_t first = std::size_t(blockIdx.x) * tile + std::size_t(threadIdx.x) * block_items;
  int cls[block_items];
  std::uint32_t ties = 0;
  for (unsigned j = 0; j < block_items; ++j) {
    const std::size_t i = first + j;
    cls[j] = i < n ? c.of(i) : 0;
    ties += cls[j] == 1 ? 1u : 0u;
  }
  std::uint32_t ties_before = 0;
  scan_t(temp).ExclusiveSum(ties, ties_before);
  const std::uint64_t limit = c.limit();
  const std::uint64_t sure_tiles = pairs[2 * std::size_t(blockIdx.x)];
  const std::uint64_t ties_tiles = pairs[2 * std::size_t(blockIdx.x) + 1];
  std::uint64_t rank = ties_tiles + ties_before;
  bool take[block_items];
  std::uint32_t taken = 0;
  for (unsigned j = 0; j < block_items; ++j) {
    take[j] = cls[j] == 2 || (cls[j] == 1 && rank++ < limit);
    taken += take[j] ? 1u : 0u;
  }
  __syncthreads();  // the scan's storage is used again
  std::uint32_t taken_before = 0;
  scan_t(temp).ExclusiveSum(taken, taken_before);
  std::uint64_t pos = sure_tiles + (ties_tiles < limit ? ties_tiles : limit) + taken_before;
  for (unsigned j = 0; j < block_items; ++j)
    if (take[j]) c.write(pos++, first + j);
}

// The cut is the sample's rank-th largest key (resolved to every bit); the whole input until
// plan_choose decides.
template <class T>
__global__ void plan_cut(radix_state<key_t<T>>* s) {
  s->cut = s->prefix;
  s->candidates = 0;
}

// The candidates are used when the cut is not zero and at least k, at most `cap` keys pass it.
template <class T>
__global__ void plan_choose(radix_state<key_t<T>>* s, std::uint64_t k, std::uint64_t cap) {
  s->candidates = s->cut != 0 && s->passing >= k && s->passing <= cap ? 1u : 0u;
}

inline unsigned tiles_of(std::size_t count) {
  const std::size_t t = (count + tile - 1) / tile;
  return static_cast<unsigned>(t == 0 ? 1 : t);
}

inline unsigned histogram_grid(std::size_t count) {
  const std::size_t b = (count + 16 * std::size_t(block_threads) - 1) / (16 * std::size_t(block_threads));
  return static_cast<unsigned>(b == 0 ? 1 : b < histogram_blocks ? b : histogram_blocks);
}

// The digits' passes over at most `most` keys of `src`.
template <class T, class Source>
void radix_passes(const Source& src, std::size_t most, radix_state<key_t<T>>* state, std::uint32_t* hist) {
  constexpr int digits = (magnitude_traits<T>::key_bits + radix_bits - 1) / radix_bits;
  for (int d = 0; d < digits; ++d) {
    radix_histogram<T, Source><<<histogram_grid(most), block_threads>>>(state, src, hist);
    radix_decide<T><<<1, decide_threads>>>(state, hist);
  }
}

// The radix select of k keys of `src` (at most `most` of them) and its output into `out`.
template <class T, class Source>
void select_on_device(const Source& src, std::size_t most, std::size_t k, std::uint32_t* out,
                      radix_state<key_t<T>>* state, std::uint32_t* hist, std::uint32_t* pairs, bool reset_plan) {
  radix_init<T><<<1, decide_threads>>>(state, k, 0u, reset_plan, hist);
  radix_passes<T>(src, most, state, hist);
  const emit_classes<T, Source> c{state, src, out};
  const unsigned tiles = tiles_of(most);
  count_classes<<<tiles, block_threads>>>(c, pairs);
  scan_classes<<<1, decide_threads>>>(c, pairs, std::size_t(tiles));
  write_classes<<<tiles, block_threads>>>(c, pairs);
  check_launch("gradcomp: the exact top-k's kernels");
}

// The one copy back: the NaN verdict, the k-th key's prefix (the threshold) and the count.
template <class T>
result<std::size_t> finish(const radix_state<key_t<T>>* state, T* threshold) {
  const radix_state<key_t<T>> st = read_value<thrust::system::cuda::tag>(state);
  if (st.nan != 0) return fail(errc::nan_input);
  *threshold = value_of_key<T>(st.prefix);
  return static_cast<std::size_t>(st.count);
}

}  // namespace cuda_kernels

template <class T, class KeyAt, class IndexAt>
result<std::size_t> execution<thrust::system::cuda::tag>::radix_select_and_emit(
    std::size_t count, std::size_t k, KeyAt key_at, IndexAt index_at, std::uint32_t* out,
    radix_state<key_t<T>>* state, std::uint32_t* hist, std::uint32_t* block_counts, T* threshold) {
  const cuda_kernels::fixed_source<KeyAt, IndexAt> src{key_at, index_at, count};
  cuda_kernels::select_on_device<T>(src, count, k, out, state, hist, block_counts, true);
  return cuda_kernels::finish<T>(state, threshold);
}

template <class T>
result<std::size_t> execution<thrust::system::cuda::tag>::sample_guided_topk(
    const T* values, std::size_t n, std::size_t k, const cpu::topk_plan& plan, std::uint32_t* out,
    radix_state<key_t<T>>* state, std::uint32_t* hist, std::uint32_t* block_counts, key_t<T>* keys,
    std::uint32_t* idx, T* threshold) {
  using namespace cuda_kernels;
  // The cut: the sample's rank-th largest key.
  const std::size_t samples = (n - plan.stride / 2 + plan.stride - 1) / plan.stride;
  const sample_source<T> sample{values, plan.stride, samples};
  radix_init<T><<<1, decide_threads>>>(state, plan.rank, 1u, true, hist);
  radix_passes<T>(sample, samples, state, hist);
  plan_cut<T><<<1, 1>>>(state);
  // The keys at or above it: counted, then compacted when the plan takes them.
  const cut_classes<T> cut{values, n, state, keys, idx};
  const unsigned tiles = tiles_of(n);
  count_classes<<<tiles, block_threads>>>(cut, block_counts);
  scan_classes<<<1, decide_threads>>>(cut, block_counts, std::size_t(tiles));
  plan_choose<T><<<1, 1>>>(state, k, plan.candidate_cap);
  write_classes<<<tiles, block_threads>>>(cut, block_counts);
  check_launch("gradcomp: the exact top-k's kernels");
  // The radix select over the candidates, or over the whole input.
  const chosen_source<T> chosen{values, keys, idx, n, state};
  select_on_device<T>(chosen, n, k, out, state, hist, block_counts, false);
  return finish<T>(state, threshold);
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
