/// @file gradcomp.hpp
/// @brief Umbrella header: includes the whole public API of gradcomp.
#pragma once

#include "backend.hpp"
#include "config.hpp"
#include "dgc/clipping.hpp"
#include "dgc/compressor.hpp"
#include "dgc/momentum.hpp"
#include "dgc/momentum_kind.hpp"
#include "dgc/residual_accumulator.hpp"
#include "dgc/warmup_schedule.hpp"
#include "error.hpp"
#include "select/exact_topk.hpp"
#include "select/sampled_threshold.hpp"
#include "select/selection_types.hpp"
#include "select/threshold.hpp"
#include "span.hpp"
#include "tensor_message.hpp"
#include "version.hpp"
#include "wire/crc32c.hpp"
#include "wire/decode.hpp"
#include "wire/encode.hpp"
#include "wire/format.hpp"
