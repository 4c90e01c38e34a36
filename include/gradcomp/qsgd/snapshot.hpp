/// @file snapshot.hpp
/// @brief Save and restore the state of a `qsgd_compressor` (its step counter and seed, the
/// whole of its random state) through the wire format, on any backend.
///
/// The snapshot is a compressor snapshot (docs/wire_format.md, "Snapshots") whose state section
/// records the method `qsgd`, the step counter and the seed; QSGD keeps no error, so the
/// state section is the whole snapshot, and it does not depend on the tensors. Restoring it into a
/// compressor with the same rank continues bit for bit: every later draw is keyed by (seed, rank,
/// step).
/// The functions are `snapshot_bytes`, `save_snapshot` and `restore_snapshot` of
/// gradcomp/snapshot.hpp; this header gives them this compressor's state (its `snapshot_trait`).
#pragma once

#include "../common/residual_snapshot.hpp"
#include "compressor.hpp"
