/// @file version.hpp
/// @brief Library version numbers. CMake reads the three macros below from this file.
#pragma once

/// Major version: changes when the public API or an existing wire-format promise breaks.
#define GRADCOMP_VERSION_MAJOR 0
/// Minor version: changes when features are added compatibly.
#define GRADCOMP_VERSION_MINOR 3
/// Patch version: changes for fixes only.
#define GRADCOMP_VERSION_PATCH 0

/// The version as one integer, `MAJOR * 10000 + MINOR * 100 + PATCH`, for preprocessor checks.
#define GRADCOMP_VERSION \
  (GRADCOMP_VERSION_MAJOR * 10000 + GRADCOMP_VERSION_MINOR * 100 + GRADCOMP_VERSION_PATCH)

namespace gradcomp {

/// The library version as a value, for run-time checks and logs.
struct version_info {
  int major;  ///< GRADCOMP_VERSION_MAJOR
  int minor;  ///< GRADCOMP_VERSION_MINOR
  int patch;  ///< GRADCOMP_VERSION_PATCH
};

/// Returns the version of the headers this translation unit was compiled with.
constexpr version_info version() noexcept {
  return {GRADCOMP_VERSION_MAJOR, GRADCOMP_VERSION_MINOR, GRADCOMP_VERSION_PATCH};
}

}  // namespace gradcomp
