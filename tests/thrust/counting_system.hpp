// A Thrust system that counts what the Thrust backend dispatches to it: Thrust's C++ system
// (derived from its execution policy, through Thrust's own customisation point: an algorithm
// called with the policy finds these overloads by argument-dependent lookup), each algorithm
// counted once and then run on the C++ system. On the CUDA system each dispatch is one or a few
// kernel launches, so a step whose count does not grow with its tensors launches a fixed number
// of kernels there. Copies between the host and the system are not dispatches of an algorithm
// (the backend's host_transfer_count counts them).
#pragma once

#include <cstddef>
#include <utility>

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/logical.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>
#include <thrust/transform_scan.h>

namespace gradcomp_test {
namespace counting {

// The system tag of thrust_backend<counting::tag>.
struct tag : thrust::system::cpp::execution_policy<tag> {};

// Algorithms dispatched to the system since the program started (one thread issues them).
inline std::size_t dispatches = 0;

// Every algorithm gradcomp's headers call with a system's policy: one missing here would run on
// the C++ system uncounted.
#define GRADCOMP_TEST_COUNTED(name)                                                                \
  template <class... Args>                                                                        \
  auto name(tag&, Args&&... args)->decltype(thrust::name(thrust::cpp::par, std::forward<Args>(args)...)) { \
    ++dispatches;                                                                                 \
    return thrust::name(thrust::cpp::par, std::forward<Args>(args)...);                           \
  }
GRADCOMP_TEST_COUNTED(for_each_n)
GRADCOMP_TEST_COUNTED(fill_n)
GRADCOMP_TEST_COUNTED(copy_n)
GRADCOMP_TEST_COUNTED(copy_if)
GRADCOMP_TEST_COUNTED(transform)
GRADCOMP_TEST_COUNTED(transform_reduce)
GRADCOMP_TEST_COUNTED(reduce)
GRADCOMP_TEST_COUNTED(inclusive_scan)
GRADCOMP_TEST_COUNTED(exclusive_scan)
GRADCOMP_TEST_COUNTED(exclusive_scan_by_key)
GRADCOMP_TEST_COUNTED(transform_inclusive_scan)
GRADCOMP_TEST_COUNTED(sort)
GRADCOMP_TEST_COUNTED(count_if)
GRADCOMP_TEST_COUNTED(all_of)
#undef GRADCOMP_TEST_COUNTED

}  // namespace counting
}  // namespace gradcomp_test
