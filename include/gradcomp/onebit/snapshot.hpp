/// @file snapshot.hpp
/// @brief Save and restore the state of an `onebit_sgd_compressor` (its residuals and step
/// counter) through the wire format, on any backend.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `one_bit`, followed by one `residual` section per quantised tensor holding
/// its residual r. Restoring it into a compressor with the same tensors continues bit for bit;
/// the receiver's momentum is the compressor's own setting and is not stored.
/// The functions are `snapshot_bytes`, `save_snapshot` and `restore_snapshot` of
/// gradcomp/snapshot.hpp; this header gives them this compressor's state.
#pragma once

#include "../common/residual_snapshot.hpp"
#include "../snapshot.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

template <class T, class B>
struct snapshot_access<onebit_sgd_compressor<T, B>> : residual_snapshot_trait<T, wire::snapshot_selection::one_bit> {};

}  // namespace detail
}  // namespace gradcomp
