// What the Thrust backend's kernel headers (thrust/*_ops.hpp) share: the backend's declarations,
// Thrust's for_each over a counting iterator, and the system's memory and execution policies
// (system_memory.hpp).
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

}  // namespace gradcomp
