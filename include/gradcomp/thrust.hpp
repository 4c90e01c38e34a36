/// @file thrust.hpp
/// @brief The Thrust backend with every method's kernels for it: `dgc_compressor`,
/// `ef_signsgd_compressor`, `terngrad_compressor`, `onebit_sgd_compressor`, `qsgd_compressor`,
/// `adacomp_compressor`, `isgq_compressor`, `powersgd_compressor`, `saef_worker` and `aggregator` run on
/// `thrust_backend<System>` (thrust/system_backend.hpp). The wire format's device encoder and
/// decoder are headers of their own (`<gradcomp/thrust/wire_encode.hpp>`,
/// `<gradcomp/thrust/wire_decode.hpp>`), as before: a trainer that encodes on the host does not
/// compile them.
///
/// With `<gradcomp/gradcomp.hpp>` (which does not include Thrust) this is the only header that
/// lists every method for the Thrust backend: a new method adds its `thrust_ops.hpp` here.
/// It includes Thrust (from the CUDA Toolkit's CCCL, `<cuda>/include/cccl`, or any other Thrust
/// installation).
#pragma once

#include "thrust/system_backend.hpp"

#include "adacomp/thrust_ops.hpp"
#include "dgc/thrust_ops.hpp"
#include "ef_signsgd/thrust_ops.hpp"
#include "isgq/thrust_ops.hpp"
#include "onebit/thrust_ops.hpp"
#include "powersgd/thrust_ops.hpp"
#include "qsgd/thrust_ops.hpp"
#include "saef/thrust_ops.hpp"
#include "terngrad/thrust_ops.hpp"
