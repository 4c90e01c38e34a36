/// @file isgq.hpp
/// @brief Moved to `<gradcomp/isgq/compressor.hpp>`; this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "isgq/compressor.hpp"
