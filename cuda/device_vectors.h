// optim::DeviceVectors on a GPU (docs/cuda.md, "Tensors on the GPU"): the device memory, the
// combine and the GPU codecs that device gossip (Peer::mix on CUDA tensors) runs on.
#pragma once

#include <memory>

#include "compression/compressor.h"
#include "core/status.h"
#include "optim/device_gossip.h"

namespace starling::cuda {

// A GPU's vectors for device gossip.
class GpuVectors : public optim::DeviceVectors {
 public:
  // The caller's `stream` (a CUstream as an integer; 0: the legacy default stream): the next
  // work here waits for what the caller has enqueued there so far (an event; the host does not
  // wait).
  virtual core::Status after(uint64_t stream) = 0;
  // The GPU's own stream, for a DLPack producer that orders its work before it
  // (__dlpack__(stream=...)).
  virtual uint64_t stream() const = 0;
  // kInvalidArgument naming `what` unless `address` is memory of this GPU.
  virtual core::Status checkPointer(Address address, const std::string& what) const = 0;
};

// GPU `ordinal` with the scenario's codec `spec`: the identity, or one the GPU codecs have
// (cuda::gpuSupports). kUnavailable without a driver or such a GPU, with the reason;
// kInvalidArgument for another codec or error feedback.
core::Result<std::unique_ptr<GpuVectors>> openGpuVectors(int ordinal,
                                                         const compression::CompressorSpec& spec);

}  // namespace starling::cuda
