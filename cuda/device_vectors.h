// optim::DeviceVectors on a GPU (docs/cuda.md, "Tensors on the GPU"): the device memory, the
// combine and the GPU codecs that device gossip (Peer::mix on CUDA tensors) runs on.
#pragma once

#include <memory>

#include "compression/compressor.h"
#include "core/status.h"
#include "optim/device_gossip.h"

namespace starling::cuda {

// GPU `ordinal` with the scenario's codec `spec`: the identity, or one the GPU codecs have
// (cuda::gpuSupports). kUnavailable without a driver or such a GPU, with the reason;
// kInvalidArgument for another codec or error feedback.
core::Result<std::unique_ptr<optim::DeviceVectors>> openGpuVectors(
    int ordinal, const compression::CompressorSpec& spec);

}  // namespace starling::cuda
