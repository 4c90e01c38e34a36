// The definitions of terngrad/separate_ops.hpp: each terngrad_ops<thrust_backend<System>>'s, for the
// translation unit that compiles a separate backend's kernels (<gradcomp/separate_kernels.hpp>).
#pragma once

#include "../separate/thrust_kernels.hpp"
#include "separate_ops.hpp"
#include "thrust_ops.hpp"

/// @cond GRADCOMP_INTERNAL
namespace gradcomp {
namespace detail {

#define GRADCOMP_DETAIL_TERNGRAD_DEFINE(name, params, args) \
  GRADCOMP_SEPARATE_DEFINE(terngrad_separate_kernels, terngrad_ops, name, params, args)
GRADCOMP_DETAIL_TERNGRAD_SEPARATE(GRADCOMP_DETAIL_TERNGRAD_DEFINE)
#undef GRADCOMP_DETAIL_TERNGRAD_DEFINE

}  // namespace detail
}  // namespace gradcomp
/// @endcond
