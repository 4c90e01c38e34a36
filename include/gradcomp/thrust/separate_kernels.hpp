/// @file thrust/separate_kernels.hpp
/// @brief Moved to `<gradcomp/separate_kernels.hpp>`; this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "../separate_kernels.hpp"
