/// @file saef.hpp
/// @brief Moved to `<gradcomp/saef/worker.hpp>`; this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "saef/worker.hpp"
