// The definitions of ef_signsgd/separate_ops.hpp: each ef_sign_ops<thrust_backend<System>>'s, for the
// translation unit that compiles a separate backend's kernels (<gradcomp/separate_kernels.hpp>).
#pragma once

#include "../separate/thrust_kernels.hpp"
#include "separate_ops.hpp"
#include "thrust_ops.hpp"

/// @cond GRADCOMP_INTERNAL
namespace gradcomp {
namespace detail {

#define GRADCOMP_DETAIL_EF_SIGN_DEFINE(name, params, args) \
  GRADCOMP_SEPARATE_DEFINE(ef_sign_separate_kernels, ef_sign_ops, name, params, args)
GRADCOMP_DETAIL_EF_SIGN_SEPARATE(GRADCOMP_DETAIL_EF_SIGN_DEFINE)
#undef GRADCOMP_DETAIL_EF_SIGN_DEFINE

}  // namespace detail
}  // namespace gradcomp
/// @endcond
