// The exact top-k of the Thrust backend on the CUDA system, on hand-written kernels: the same
// radix select as the portable path (thrust/select.hpp), with every decision taken on the device
// and no copy back (the NaN verdict, the k-th key and the count stay in the radix state), in a
// handful of launches instead of a Thrust call and a temporary allocation per pass. A closed gate
// (the step's verdict) makes every kernel return at once.
//
// The sample-guided plan (cpu::plan_topk), in launch order on the backend's stream:
// - sample_cut        <<<1, 1024>>>  the cut: the sample's rank-th largest key, resolved to every
//                     bit by a radix select inside one block (the sample's keys gathered into the
//                     workspace, the histogram in shared memory). Also initialises the state.
// - flag_candidates   <<<n / 8192, 256>>>  the one pass over the input: each warp reads 1,024
//                     consecutive keys, 32 coalesced loads per lane, and turns each load's
//                     comparison with the cut into a 32-bit word by a ballot (bit b of word w: key
//                     32w + b is at or above the cut), written to a bitmap; the block's count of
//                     set bits to the per-block counts.
// - scan_candidates   <<<1, 1024>>>  the blocks' offsets (exclusive sums of the counts), the count
//                     passing the cut, and the plan's decision: the candidates are used when the
//                     cut is not zero and at least k, at most the plan's capacity pass.
// - write_candidates  <<<n / 8192, 256>>>  where they are used: each lane writes the keys and
//                     indices of its word's set bits, in index order, after the blocks, warps and
//                     lanes before it (reads the bitmap, n / 8 bytes, and gathers the candidates).
// - then the radix select below over the candidates, or over the whole input where the plan falls
//   back to it; every kernel reads that decision from the state.
//
// The radix select (also the plain plan), in launch order:
// - radix_init        <<<1, 1024>>>  the radix state (thrust_impl::radix_start), histogram zeroed.
// - radix_pass        <<<up to 2048, 256>>>  per digit: a grid-stride loop (4 keys per thread in
//                     flight) counts the keys whose higher digits match the prefix into a
//                     shared-memory histogram (2,048 bins; one atomic per distinct bin in a warp),
//                     added to the global one; the first pass also flags NaN keys. The last block
//                     to finish (a ticket counter after a memory fence) takes the digit's decision
//                     (decide_digit) and zeroes the histogram for the next digit. Blocks past what
//                     the selection's size needs return at once, so a grid sized for the whole
//                     input costs little over a few candidates.
// - count_classes / scan_classes / write_classes: a stable compaction in three launches. Every
//   key is of class 2 (always taken), 1 (taken while its rank among the class-1 keys, in index
//   order, is below a limit) or 0. Tiles of 2,048 keys (256 threads x 8 consecutive keys, so that
//   thread order is index order; a block loops over tiles) count both classes; one block scans
//   the tiles' counts; each tile then writes its taken keys at
//   (class 2 before it) + min(class 1 before it, limit) + (taken before it in the tile). The
//   output of the selection is the compaction with class 2 = above the k-th key, class 1 = equal
//   to it, limit = the equal keys to take.
//
// decide_digit (block-wide, thread t holding 2,048 / threads consecutive bins, highest first): an
// exclusive block scan of the threads' sums finds the bin holding the need-th key (the one bin
// where the running sum crosses `need`); thread 0 applies the CPU's decision
// (cpu::radix_kth_largest). Invariant: the bins matching the prefix hold at least `need` keys,
// so exactly one bin is found. The one-block scans (scan_classes, scan_candidates) give each
// thread a run of consecutive entries and order the runs by one block scan.
//
// Every kernel is launched through cuda_kernels::launch, which counts the launches
// (kernel_launch_count): the plain radix select takes 1 + digits + 3 (7 for float, 10 for
// double), the sample-guided plan 4 more, whatever the input's size.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime_api.h>

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
constexpr unsigned pass_batch = 4;  // keys each thread of radix_pass loads at once
constexpr std::size_t histogram_keys_per_block = pass_batch * std::size_t(block_threads);
constexpr unsigned sample_batch = 8;  // sample keys each thread of sample_cut loads at once
constexpr unsigned tile_blocks = 1024;  // the most blocks of count_classes and write_classes
constexpr unsigned warp_lanes = 32;
constexpr unsigned flag_warps = block_threads / warp_lanes;
constexpr std::size_t flag_block = std::size_t(block_threads) * warp_lanes;  // keys per block of the bitmap
static_assert(tile == 2 * equal_block, "two counts per tile fit the per-block counts of thrust/select.hpp");
static_assert(radix_bins % block_threads == 0 && radix_bins % decide_threads == 0, "whole bins per thread");

inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

// Launches of the hand-written kernels since the program started: every one goes through launch,
// so a test on the GPU counts them as the CPU tests count the Thrust dispatches.
inline std::atomic<std::uint64_t> kernel_launch_count{0};

// kernel<<<grid, block, 0, stream>>>(args...), counted (each argument converted to its parameter).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), unsigned grid, unsigned block, stream_t stream, const Args&... args) {
  kernel_launch_count.fetch_add(1, std::memory_order_relaxed);
  kernel<<<grid, block, 0, stream>>>(args...);
}

// Blocks of radix_pass for `count` keys (at least one).
__host__ __device__ inline unsigned histogram_grid(std::size_t count) {
  const std::size_t b = (count + histogram_keys_per_block - 1) / histogram_keys_per_block;
  return static_cast<unsigned>(b == 0 ? 1 : b < histogram_blocks ? b : histogram_blocks);
}

// Tiles of the compaction for `count` keys (at least one).
__host__ __device__ inline std::size_t tiles_of(std::size_t count) {
  const std::size_t t = (count + tile - 1) / tile;
  return t == 0 ? 1 : t;
}

// Blocks of flag_candidates and write_candidates for n keys (at least one).
__host__ __device__ inline std::size_t flag_blocks(std::size_t n) {
  const std::size_t b = (n + flag_block - 1) / flag_block;
  return b == 0 ? 1 : b;
}

// Adds one to bins[bin] for each lane where `counted`, with one atomic per distinct bin of the
// warp. Every lane of the warp calls it together.
__device__ inline void add_one_per_lane(std::uint32_t* bins, bool counted, unsigned bin) {
  const unsigned peers = __match_any_sync(0xffffffffu, counted ? bin : 0xffffffffu);
  if (counted && (threadIdx.x % warp_lanes) == static_cast<unsigned>(__ffs(static_cast<int>(peers)) - 1))
    atomicAdd(bins + bin, static_cast<std::uint32_t>(__popc(peers)));
}

// Exclusive sums of `count` values, get(b), handed to put(b, sum before b), by all
// decide_threads threads of one block; returns the total (on every thread).
template <class Get, class Put>
__device__ unsigned long long exclusive_scan_runs(std::size_t count, Get get, Put put) {
  using scan_t = cub::BlockScan<unsigned long long, decide_threads>;
  __shared__ typename scan_t::TempStorage temp;
  const std::size_t per = (count + decide_threads - 1) / decide_threads;
  const std::size_t begin = std::size_t(threadIdx.x) * per < count ? std::size_t(threadIdx.x) * per : count;
  const std::size_t end = begin + per < count ? begin + per : count;
  unsigned long long sum = 0;
  for (std::size_t b = begin; b < end; ++b) sum += get(b);
  unsigned long long before = 0, total = 0;
  scan_t(temp).ExclusiveSum(sum, before, total);
  for (std::size_t b = begin; b < end; ++b) {
    const unsigned long long v = get(b);
    put(b, before);
    before += v;
  }
  return total;
}

// The histogram's bins as decide_digit reads and clears them: in global memory (read from L2,
// where the other blocks' atomic additions are) or in the block's shared memory.
struct global_bins {
  std::uint32_t* p;
  __device__ unsigned long long at(unsigned b) const { return __ldcg(p + b); }
  __device__ void clear(unsigned b) const { p[b] = 0; }
};
struct shared_bins {
  std::uint32_t* p;
  __device__ unsigned long long at(unsigned b) const { return p[b]; }
  __device__ void clear(unsigned b) const { p[b] = 0; }
};

// The digit's decision, by all Threads threads of a block (see the top of the file); the bins are
// zeroed; thread 0 updates *s (global or shared memory). `nan`: a NaN key was seen (the first
// digit of a selection that gives a verdict).
template <class T, unsigned Threads, class Bins>
__device__ void decide_digit(radix_state<key_t<T>>* s, Bins bins, bool nan) {
  using key_type = key_t<T>;
  constexpr unsigned per = static_cast<unsigned>(radix_bins) / Threads;
  using scan_t = cub::BlockScan<unsigned long long, Threads>;
  __shared__ typename scan_t::TempStorage temp;
  __shared__ unsigned found;
  __shared__ unsigned long long found_above;
  __shared__ unsigned long long found_count;
  const unsigned top = static_cast<unsigned>(radix_bins) - 1 - threadIdx.x * per;
  if (threadIdx.x == 0) {
    found = 0;
    found_above = 0;
    found_count = 0;
  }
  unsigned long long h[per];
  unsigned long long sum = 0;
  for (unsigned j = 0; j < per; ++j) {
    h[j] = bins.at(top - j);
    sum += h[j];
  }
  const unsigned long long need = s->need;
  __syncthreads();  // the found_* initialisation before any thread's finding
  unsigned long long before = 0;
  scan_t(temp).ExclusiveSum(sum, before);
  for (unsigned j = 0; j < per; ++j) {
    if (before < need && before + h[j] >= need) {
      found = top - j;
      found_above = before;
      found_count = h[j];
    }
    before += h[j];
    bins.clear(top - j);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    radix_state<key_type> st = *s;
    if (nan) {
      st.nan = 1;
      st.done = 1;
    } else {
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
    }
    *s = st;
  }
}

// `reset_plan` (the plain plan): clears the sample-guided plan's fields, so that every byte of the
// state is written before the host copies it back.
template <class T>
__global__ void radix_init(radix_state<key_t<T>>* s, std::uint64_t k, bool reset_plan, std::uint32_t* hist,
                           const std::int32_t* gate) {
  if (threadIdx.x == 0) {
    if (reset_plan) {
      s->passing = 0;
      s->cut = 0;
      s->candidates = 0;
    }
    radix_start<T>{s, k, 0u, gate}(0);
  }
  for (std::size_t b = threadIdx.x; b < hist_entries; b += blockDim.x) hist[b] = 0;
}

template <class T, class Source>
__global__ void __launch_bounds__(block_threads) radix_pass(radix_state<key_t<T>>* s, Source src, std::uint32_t* hist) {
  using key_type = key_t<T>;
  __shared__ std::uint32_t bins[radix_bins];
  __shared__ std::uint32_t nan_seen;
  __shared__ bool last;
  // The state changes only in the last block, after every other block has taken its ticket.
  if (s->done != 0) return;  // the same for every thread
  const std::size_t n = src.size();
  const unsigned active = histogram_grid(n) < gridDim.x ? histogram_grid(n) : gridDim.x;
  if (blockIdx.x >= active) return;
  const key_type prefix = s->prefix;
  const key_type mask = s->mask;
  const int shift = s->shift;
  const int bits = s->bits;
  const bool check_nan = mask == 0 && s->full == 0;
  for (unsigned b = threadIdx.x; b < radix_bins; b += block_threads) bins[b] = 0;
  if (threadIdx.x == 0) nan_seen = 0;
  __syncthreads();
  const key_type digit_mask = static_cast<key_type>((key_type(1) << bits) - 1);
  std::uint32_t nan = 0;
  const std::size_t step = std::size_t(active) * block_threads;
  const unsigned lane = threadIdx.x % warp_lanes;
  // `base` is the same for the whole warp, so that every lane calls add_one_per_lane together.
  for (std::size_t base = std::size_t(blockIdx.x) * block_threads + (threadIdx.x - lane); base < n;
       base += pass_batch * step) {
    key_type key[pass_batch];
    bool valid[pass_batch];
#pragma unroll
    for (unsigned j = 0; j < pass_batch; ++j) {
      const std::size_t i = base + j * step + lane;
      valid[j] = i < n;
      key[j] = valid[j] ? src.key(i) : key_type(0);
    }
#pragma unroll
    for (unsigned j = 0; j < pass_batch; ++j) {
      if (check_nan && valid[j] && is_nan_key<T>(key[j])) nan = 1;
      add_one_per_lane(bins, valid[j] && (key[j] & mask) == prefix,
                       static_cast<unsigned>((key[j] >> shift) & digit_mask));
    }
  }
  if (nan != 0) atomicOr(&nan_seen, 1u);
  __syncthreads();
  const unsigned used = 1u << bits;
  for (unsigned b = threadIdx.x; b < used; b += block_threads)
    if (bins[b] != 0) atomicAdd(hist + b, bins[b]);
  if (threadIdx.x == 0 && nan_seen != 0) atomicOr(hist + nan_flag_entry, 1u);
  __threadfence();  // this block's additions before its ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(hist + ticket_entry, 1u) == active - 1;
  __syncthreads();
  if (!last) return;  // the same for every thread
  __threadfence();
  const bool saw_nan = check_nan && __ldcg(hist + nan_flag_entry) != 0;
  decide_digit<T, block_threads>(s, global_bins{hist}, saw_nan);
  if (threadIdx.x == 0) {
    hist[nan_flag_entry] = 0;
    hist[ticket_entry] = 0;
  }
}

// The cut of the sample-guided plan: the sample's rank-th largest key, every digit resolved (no
// NaN verdict: a NaN key is an ordinary key here), into s->cut; the state initialised as
// radix_start does, the plan's fields cleared. The sample's keys are gathered into `keys` first.
template <class T>
__global__ void __launch_bounds__(decide_threads)
    sample_cut(radix_state<key_t<T>>* s, const T* values, std::size_t stride, std::size_t samples, key_t<T>* keys,
               std::uint64_t rank, const std::int32_t* gate) {
  using key_type = key_t<T>;
  __shared__ std::uint32_t bins[radix_bins];
  __shared__ radix_state<key_type> st;
  const unsigned t = threadIdx.x;
  if (!gate_open(gate)) {  // the same for every thread: the selection is skipped
    if (t == 0) {
      radix_start<T>{&st, rank, 1u, gate}(0);
      st.passing = 0;
      st.cut = 0;
      st.candidates = 0;
      *s = st;
    }
    return;
  }
  if (t == 0) {
    radix_start<T>{&st, rank, 1u}(0);
    st.passing = 0;
    st.cut = 0;
    st.candidates = 0;
  }
  constexpr std::size_t batch = std::size_t(sample_batch) * decide_threads;
  for (std::size_t base = 0; base < samples; base += batch) {
    key_type k[sample_batch];
#pragma unroll
    for (unsigned j = 0; j < sample_batch; ++j) {
      const std::size_t i = base + std::size_t(j) * decide_threads + t;
      k[j] = i < samples ? magnitude_key(values[stride / 2 + i * stride]) : key_type(0);
    }
#pragma unroll
    for (unsigned j = 0; j < sample_batch; ++j) {
      const std::size_t i = base + std::size_t(j) * decide_threads + t;
      if (i < samples) keys[i] = k[j];
    }
  }
  for (unsigned b = t; b < radix_bins; b += decide_threads) bins[b] = 0;
  __syncthreads();  // the keys, the zeroed bins and the state, for every thread
  while (st.done == 0) {  // the same for every thread: read after a barrier
    const key_type prefix = st.prefix;
    const key_type mask = st.mask;
    const int shift = st.shift;
    const key_type digit_mask = static_cast<key_type>((key_type(1) << st.bits) - 1);
    for (std::size_t base = 0; base < samples; base += batch) {
      key_type k[sample_batch];
#pragma unroll
      for (unsigned j = 0; j < sample_batch; ++j) {
        const std::size_t i = base + std::size_t(j) * decide_threads + t;
        k[j] = i < samples ? keys[i] : key_type(0);
      }
#pragma unroll
      for (unsigned j = 0; j < sample_batch; ++j) {  // the same i < samples test for a whole warp's base
        const std::size_t i = base + std::size_t(j) * decide_threads + t;
        add_one_per_lane(bins, i < samples && (k[j] & mask) == prefix,
                         static_cast<unsigned>((k[j] >> shift) & digit_mask));
      }
    }
    __syncthreads();
    decide_digit<T, decide_threads>(&st, shared_bins{bins}, false);
    __syncthreads();
  }
  if (t == 0) {
    st.cut = st.prefix;
    *s = st;
  }
}

// The bitmap of the keys at or above the cut (all clear when the cut is zero: the plan then falls
// back to the whole input) and each block's count of them.
template <class T>
__global__ void __launch_bounds__(block_threads)
    flag_candidates(const T* values, std::size_t n, const radix_state<key_t<T>>* s, std::uint32_t* bitmap,
                    std::uint32_t* block_counts) {
  __shared__ std::uint32_t warp_counts[flag_warps];
  if (s->skipped != 0) return;  // the same for every thread (scan_candidates then decides no candidates)
  const unsigned lane = threadIdx.x % warp_lanes;
  const unsigned warp = threadIdx.x / warp_lanes;
  const auto cut = static_cast<key_t<T>>(s->cut);
  const std::size_t first = (std::size_t(blockIdx.x) * flag_warps + warp) * warp_lanes * warp_lanes;
  std::uint32_t mine = 0;  // lane l's word: keys first + 32 l ... first + 32 l + 31
  if (cut != 0) {          // the same for every thread
#pragma unroll
    for (unsigned j = 0; j < warp_lanes; ++j) {
      const std::size_t i = first + std::size_t(j) * warp_lanes + lane;
      const std::uint32_t word = __ballot_sync(0xffffffffu, i < n && magnitude_key(values[i]) >= cut);
      if (lane == j) mine = word;
    }
  }
  const std::size_t w = first / warp_lanes + lane;
  if (w < (n + warp_lanes - 1) / warp_lanes) bitmap[w] = mine;
  unsigned count = static_cast<unsigned>(__popc(mine));
  for (unsigned off = warp_lanes / 2; off != 0; off /= 2) count += __shfl_down_sync(0xffffffffu, count, off);
  if (lane == 0) warp_counts[warp] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t total = 0;
    for (unsigned v = 0; v < flag_warps; ++v) total += warp_counts[v];
    block_counts[blockIdx.x] = total;
  }
}

// The blocks' counts replaced by the counts before each block; the total to s->passing; the
// plan's decision to s->candidates.
template <class T>
__global__ void __launch_bounds__(decide_threads)
    scan_candidates(radix_state<key_t<T>>* s, std::uint32_t* block_counts, std::size_t blocks, std::uint64_t k,
                    std::uint64_t cap) {
  const unsigned long long total = exclusive_scan_runs(
      blocks, [block_counts](std::size_t b) { return static_cast<unsigned long long>(block_counts[b]); },
      [block_counts](std::size_t b, unsigned long long before) {
        block_counts[b] = static_cast<std::uint32_t>(before);
      });
  if (threadIdx.x == 0) {
    s->passing = total;
    s->candidates = s->cut != 0 && total >= k && total <= cap ? 1u : 0u;
  }
}

// Where the plan uses them: the candidates' keys and indices in index order, from the bitmap.
template <class T>
__global__ void __launch_bounds__(block_threads)
    write_candidates(const T* values, std::size_t n, const radix_state<key_t<T>>* s, const std::uint32_t* bitmap,
                     const std::uint32_t* block_offsets, key_t<T>* keys, std::uint32_t* idx) {
  __shared__ std::uint32_t warp_counts[flag_warps];
  if (s->candidates == 0) return;  // the same for every thread
  const unsigned lane = threadIdx.x % warp_lanes;
  const unsigned warp = threadIdx.x / warp_lanes;
  const std::size_t w = (std::size_t(blockIdx.x) * flag_warps + warp) * warp_lanes + lane;
  const std::uint32_t mine = w < (n + warp_lanes - 1) / warp_lanes ? bitmap[w] : 0u;
  const auto count = static_cast<std::uint32_t>(__popc(mine));
  std::uint32_t through = count;  // inclusive sum over the warp's lanes
  for (unsigned off = 1; off < warp_lanes; off *= 2) {
    const std::uint32_t other = __shfl_up_sync(0xffffffffu, through, off);
    if (lane >= off) through += other;
  }
  if (lane == warp_lanes - 1) warp_counts[warp] = through;
  __syncthreads();
  std::uint64_t pos = block_offsets[blockIdx.x] + (through - count);
  for (unsigned v = 0; v < warp; ++v) pos += warp_counts[v];
  for (std::uint32_t bits = mine; bits != 0; bits &= bits - 1) {
    const std::size_t i = w * warp_lanes + static_cast<unsigned>(__ffs(static_cast<int>(bits)) - 1);
    keys[pos] = magnitude_key(values[i]);
    idx[pos] = static_cast<std::uint32_t>(i);
    ++pos;
  }
}

// The output of the selection: above the k-th key, and the first take_equal keys equal to it.
template <class T, class Source>
struct emit_classes {
  radix_state<key_t<T>>* s;
  Source src;
  std::uint32_t* out;
  __device__ bool skip() const { return emits_nothing(s); }
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

// Per tile: the class-2 and class-1 counts, at pairs[2 * tile] and pairs[2 * tile + 1]. A block
// loops over tiles; blocks past the selection's tiles return at once.
template <class Classes>
__global__ void __launch_bounds__(block_threads) count_classes(Classes c, std::uint32_t* pairs) {
  using reduce_t = cub::BlockReduce<std::uint32_t, block_threads>;
  __shared__ typename reduce_t::TempStorage temp;
  if (c.skip()) return;  // the same for every thread
  const std::size_t n = c.size();
  for (std::size_t b = blockIdx.x; b < tiles_of(n); b += gridDim.x) {  // the same for every thread
    const std::size_t first = b * tile + std::size_t(threadIdx.x) * block_items;
    std::uint32_t packed = 0;  // class 2 in the high half; a tile holds fewer than 2^16 keys
    for (unsigned j = 0; j < block_items; ++j) {
      const std::size_t i = first + j;
      if (i >= n) break;
      const int k = c.of(i);
      packed += k == 2 ? 0x10000u : k == 1 ? 1u : 0u;
    }
    const std::uint32_t sum = reduce_t(temp).Sum(packed);
    if (threadIdx.x == 0) {
      pairs[2 * b] = sum >> 16;
      pairs[2 * b + 1] = sum & 0xffffu;
    }
    __syncthreads();  // the reduction's storage is used again
  }
}

// The tiles' counts replaced by the counts before each tile; the total taken to c.total().
template <class Classes>
__global__ void __launch_bounds__(decide_threads) scan_classes(Classes c, std::uint32_t* pairs) {
  if (c.skip()) {  // the same for every thread: nothing selected
    if (threadIdx.x == 0) *c.total() = 0;
    return;
  }
  // class 2 in the high half, class 1 in the low: each below 2^32
  const unsigned long long total = exclusive_scan_runs(
      tiles_of(c.size()),
      [pairs](std::size_t b) { return (static_cast<unsigned long long>(pairs[2 * b]) << 32) | pairs[2 * b + 1]; },
      [pairs](std::size_t b, unsigned long long before) {
        pairs[2 * b] = static_cast<std::uint32_t>(before >> 32);
        pairs[2 * b + 1] = static_cast<std::uint32_t>(before & 0xffffffffull);
      });
  if (threadIdx.x == 0) {
    const std::uint64_t sure = total >> 32;
    const std::uint64_t ties = total & 0xffffffffull;
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
  const std::uint64_t limit = c.limit();
  for (std::size_t b = blockIdx.x; b < tiles_of(n); b += gridDim.x) {  // the same for every thread
    const std::size_t first = b * tile + std::size_t(threadIdx.x) * block_items;
    int cls[block_items];
    std::uint32_t ties = 0;
    for (unsigned j = 0; j < block_items; ++j) {
      const std::size_t i = first + j;
      cls[j] = i < n ? c.of(i) : 0;
      ties += cls[j] == 1 ? 1u : 0u;
    }
    std::uint32_t ties_before = 0;
    scan_t(temp).ExclusiveSum(ties, ties_before);
    const std::uint64_t sure_tiles = pairs[2 * b];
    const std::uint64_t ties_tiles = pairs[2 * b + 1];
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
    __syncthreads();  // and again in the next tile
  }
}

// The radix select of k keys of `src` (at most `most` of them: the grids are sized for that many)
// and its output into `out`; radix_init's `reset_plan` as documented there; a closed gate skips it.
template <class T, class Source>
void select_on_device(stream_t stream, const Source& src, std::size_t most, std::size_t k, std::uint32_t* out,
                      radix_state<key_t<T>>* state, std::uint32_t* hist, std::uint32_t* pairs, bool reset_plan,
                      const std::int32_t* gate) {
  constexpr int digits = (magnitude_traits<T>::key_bits + radix_bits - 1) / radix_bits;
  launch(radix_init<T>, 1, decide_threads, stream, state, k, reset_plan, hist, gate);
  for (int d = 0; d < digits; ++d)
    launch(radix_pass<T, Source>, histogram_grid(most), block_threads, stream, state, src, hist);
  const emit_classes<T, Source> c{state, src, out};
  const std::size_t tiles = tiles_of(most);
  const auto tile_grid = static_cast<unsigned>(tiles < tile_blocks ? tiles : tile_blocks);
  launch(count_classes<emit_classes<T, Source>>, tile_grid, block_threads, stream, c, pairs);
  launch(scan_classes<emit_classes<T, Source>>, 1, decide_threads, stream, c, pairs);
  launch(write_classes<emit_classes<T, Source>>, tile_grid, block_threads, stream, c, pairs);
  check_launch("gradcomp: the exact top-k's kernels");
}

}  // namespace cuda_kernels

template <class T, class Source>
void execution<thrust::system::cuda::tag>::issue_radix_select(stream_t stream, const Source& src, std::size_t most,
                                                              std::size_t k, std::uint32_t* out,
                                                              radix_state<key_t<T>>* state, std::uint32_t* hist,
                                                              std::uint32_t* block_counts, const std::int32_t* gate) {
  cuda_kernels::select_on_device<T>(stream, src, most, k, out, state, hist, block_counts, true, gate);
}

template <class T>
void execution<thrust::system::cuda::tag>::issue_sample_guided(stream_t stream, const T* values, std::size_t n,
                                                               std::size_t k, const cpu::topk_plan& plan,
                                                               std::uint32_t* out, radix_state<key_t<T>>* state,
                                                               std::uint32_t* hist, std::uint32_t* block_counts,
                                                               key_t<T>* keys, std::uint32_t* idx,
                                                               std::uint32_t* bitmap, const std::int32_t* gate) {
  using namespace cuda_kernels;
  // The cut: the sample's rank-th largest key.
  const std::size_t samples = (n - plan.stride / 2 + plan.stride - 1) / plan.stride;
  launch(sample_cut<T>, 1, decide_threads, stream, state, values, plan.stride, samples, keys, plan.rank, gate);
  check_launch("gradcomp: the exact top-k's sample");
  // The keys at or above it: a bitmap in one pass; then, where the plan uses them, their keys and
  // indices.
  const auto blocks = static_cast<unsigned>(flag_blocks(n));
  launch(flag_candidates<T>, blocks, block_threads, stream, values, n, state, bitmap, block_counts);
  launch(scan_candidates<T>, 1, decide_threads, stream, state, block_counts, blocks, k, plan.candidate_cap);
  launch(write_candidates<T>, blocks, block_threads, stream, values, n, state, bitmap, block_counts, keys, idx);
  check_launch("gradcomp: the exact top-k's candidates");
  // The radix select over the candidates, or over the whole input (skipped with the cut).
  const chosen_source<T> chosen{values, keys, idx, n, state};
  select_on_device<T>(stream, chosen, n, k, out, state, hist, block_counts, false, gate);
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
