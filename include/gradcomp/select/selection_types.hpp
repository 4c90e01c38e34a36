/// @file selection_types.hpp
/// @brief Moved to `<gradcomp/selection_types.hpp>`; this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "../selection_types.hpp"
