/// @file tensor_message.hpp
/// @brief Moved to `<gradcomp/wire/tensor_message.hpp>`; this path forwards there for one release.
// gradcomp: forwarding header
#pragma once

#include "wire/tensor_message.hpp"
