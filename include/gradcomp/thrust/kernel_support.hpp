// What the Thrust kernels of every method (<method>/thrust_ops.hpp) share: the backend's
// declarations, the views they take, Thrust's for_each over a counting iterator, and the system's
// memory and execution policies (system_memory.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "../config.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "system_memory.hpp"

namespace gradcomp {

template <class System>
struct thrust_backend;
template <class System>
struct thrust_space;

/// A view of `T`s in the memory of Thrust system `System`: what the Thrust backend's kernels take.
template <class T, class System>
using thrust_view = span<T, thrust_space<System>>;

}  // namespace gradcomp
