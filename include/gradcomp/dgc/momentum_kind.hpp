/// @file momentum_kind.hpp
/// @brief Moved to `<gradcomp/momentum_kind.hpp>`; this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "../momentum_kind.hpp"
