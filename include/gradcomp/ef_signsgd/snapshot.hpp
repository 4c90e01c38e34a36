/// @file snapshot.hpp
/// @brief Save and restore the state of an `ef_signsgd_compressor` (its error buffers and step
/// counter) through the wire format, on any backend.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `scaled_sign`, followed by one `residual` section per compressed tensor
/// holding its error e. Restoring it into a compressor with the same tensors continues bit for
/// bit; the learning rate is the compressor's own setting and is not stored.
/// The functions are `snapshot_bytes`, `save_snapshot` and `restore_snapshot` of
/// gradcomp/snapshot.hpp; this header gives them this compressor's state (its `snapshot_trait`).
#pragma once

#include "../common/residual_snapshot.hpp"
#include "compressor.hpp"
