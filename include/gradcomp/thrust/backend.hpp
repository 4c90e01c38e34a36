/// @file thrust/backend.hpp
/// @brief Moved to `<gradcomp/thrust.hpp>` (the Thrust backend with every method's kernels);
/// this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "../thrust.hpp"
