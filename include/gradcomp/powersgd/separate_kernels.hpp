// The definitions of powersgd/separate_ops.hpp: each powersgd_ops<thrust_backend<System>>'s, for the
// translation unit that compiles a separate backend's kernels (<gradcomp/separate_kernels.hpp>).
#pragma once

#include "../separate/thrust_kernels.hpp"
#include "separate_ops.hpp"
#include "thrust_ops.hpp"

/// @cond GRADCOMP_INTERNAL
namespace gradcomp {
namespace detail {

#define GRADCOMP_DETAIL_POWERSGD_DEFINE(name, params, args) \
  GRADCOMP_SEPARATE_DEFINE(powersgd_separate_kernels, powersgd_ops, name, params, args)
GRADCOMP_DETAIL_POWERSGD_SEPARATE(GRADCOMP_DETAIL_POWERSGD_DEFINE)
#undef GRADCOMP_DETAIL_POWERSGD_DEFINE

}  // namespace detail
}  // namespace gradcomp
/// @endcond
