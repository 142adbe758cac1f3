// Gossip on a model in a device's memory: Peer::mix on CUDA tensors (docs/cuda.md, "Tensors on
// the GPU"). The round is plain gossip's or CHOCO-gossip's (optim/gossip.h), with every vector
// of d values on the device and only the frames in host memory: the algorithm encodes its own
// message on the device, the engine moves the frames (optim::FrameMessages), and the neighbours'
// frames are decoded and combined on the device.
//
// The device is reached through DeviceVectors, which knows nothing of the algorithm: cuda/
// implements it with the GPU codecs and kernels; the tests implement it in host memory with the
// CPU codecs, so the round itself is tested on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "compression/compressor.h"
#include "core/status.h"
#include "optim/algorithm.h"

namespace starling::optim {

// float32 vectors in one device's memory, addressed by opaque 64-bit addresses (CUDA device
// pointers), and the scenario's codec on them. Every call has finished its work when it returns
// (what it wrote is complete, what it read may be changed). Thread-safety: one thread.
class DeviceVectors {
 public:
  using Address = uint64_t;
  virtual ~DeviceVectors() = default;

  // Where the vectors live, for messages ("cuda:0 (NVIDIA H200)").
  virtual std::string where() const = 0;
  // n float32, zeroed, owned by this object (freed with it).
  virtual core::Result<Address> allocate(size_t n) = 0;
  virtual core::Status copy(Address to, Address from, size_t n) = 0;
  virtual core::Status toHost(std::span<float> to, Address from) = 0;
  virtual core::Status fromHost(Address to, std::span<const float> from) = 0;
  // out_k = start_k + sum_j c_j (m_j,k - self_k), the terms in the order given, each rounded as
  // compression::elementwise::combineTerm rounds it (optim/combine.h's difference form); out
  // may be start or self.
  virtual core::Status combine(Address out, Address start, Address self,
                               std::span<const Address> m, std::span<const float> c,
                               size_t n) = 0;
  // Whether some of the n values at x is not within [-limit, limit] (NaN never is).
  virtual core::Result<bool> anyBeyond(Address x, size_t n, float limit) = 0;

  // The codec (the scenario's; the identity for uncompressed gossip). lossy(): frames carry an
  // approximation, so the gossip is CHOCO's.
  virtual bool lossy() const = 0;
  virtual size_t maxFrameBytes(size_t n) const = 0;
  // The sealed frame of the n values at x, written at the start of `frame`; its length. The
  // frame's random choices as the CPU codec's encodeStream makes them: its own draw (stochastic
  // rounding) from `seeds.draw`, the choices every sender of a round shares (Count-Sketch's
  // hashes) from `seeds.shared` and `seeds.round`.
  struct FrameSeeds {
    uint64_t draw = 0;
    uint64_t shared = 0;
    uint64_t round = 0;
  };
  virtual core::Result<size_t> encode(Address x, size_t n, const FrameSeeds& seeds,
                                      std::span<std::byte> frame) = 0;
  // The CPU decoder's checks of a frame of n values, on the host; nothing reaches the device.
  virtual core::Status check(std::span<const std::byte> frame, size_t n) const = 0;
  // Decodes a frame (check() passed) of n values into the device vector at out.
  virtual core::Status decode(std::span<const std::byte> frame, Address out, size_t n) = 0;

  // A device with streams (CUDA). after(): the next work here waits for what the caller has
  // enqueued on its `stream` so far (a CUstream as an integer; 0: the legacy default stream),
  // by an event: the host does not wait. stream(): this object's own stream, for a producer that
  // orders its work before it itself (DLPack's __dlpack__(stream=...)). checkPointer():
  // kInvalidArgument naming `what` unless `address` is memory of this device.
  virtual core::Status after(uint64_t /*stream*/) { return core::Status::ok(); }
  virtual uint64_t stream() const { return 0; }
  virtual core::Status checkPointer(Address /*address*/, const std::string& /*what*/) const {
    return core::Status::ok();
  }
};

// The device played by host memory: addresses are host pointers (float32 arrays), the codec is
// the CPU one (its own xoshiro draws, not the GPU's counter-based bits), the combine is
// compression::elementwise::combineTerm's loop. What the tests run device gossip on, and what
// mix(DeviceSpan) runs on under STARLING_DEVICE=host (api/peer_device.cc), so that the device
// path's engine is tested on every machine.
core::Result<std::unique_ptr<DeviceVectors>> hostDeviceVectors(
    const compression::CompressorSpec& spec);

// Gossip with the model in device memory, float32, on a static or time-varying graph
// (compressed: static only, where s = sum_j w_ij x-hat_j is kept as a running sum, as the host
// algorithm does). Per round, in the host algorithm's arithmetic, value for value:
//   uncompressed: send x;  x <- x + sum_j gamma w_ij (x_j - x)
//   compressed:   send q = C(x - x-hat); x-hat <- x-hat + q; s <- s + w_ii q + sum_j w_ij q_j;
//                 x <- x + gamma (s - x-hat)
// The trainer's buffer is copied in before the round (setDeviceModel) and out after it
// (copyModelTo), device to device; model() copies the model to the host, for what the engine
// asks of it rarely (a membership change, a rejoining neighbour, a log line).
class DeviceGossip : public Algorithm<float>, public FrameMessages {
 public:
  // What a round is besides its gossip (Peer::step's algorithms, their host rounds value for
  // value):
  //   kGossip:          the gossip above (mix(); dsgd's step with setGradient: psi = x - eta g).
  //   kChocoSgd:        CHOCO-SGD (optim/choco.cc, static W): reference points whatever the
  //                     codec, and the consensus step x <- x + gamma (s - x-hat) taken with the
  //                     next round's local step, before its message, not at the end of the round.
  //   kExactDiffusion:  exact diffusion (optim/algorithms.cc, uncompressed): psi = x - eta g,
  //                     send phi = psi + x - psi_prev (psi_prev from the first round's x), then
  //                     x <- phi + sum_j (w_ij / 2)(phi_j - phi); gamma is 1/2.
  enum class Rounds { kGossip, kChocoSgd, kExactDiffusion };
  // `codecSeed` seeds the frames' random draws (one nextU64 a frame); `sharedSeed` is the run's
  // seed of the choices every sender shares (the Node's codecSharedSeed).
  static core::Result<std::unique_ptr<DeviceGossip>> create(DeviceVectors& device, double gamma,
                                                            size_t dim, uint64_t codecSeed,
                                                            uint64_t sharedSeed = 0,
                                                            Rounds rounds = Rounds::kGossip);
  virtual core::Status setDeviceModel(DeviceVectors::Address from) = 0;
  virtual core::Status copyModelTo(DeviceVectors::Address to) = 0;
  // The model from host memory (a restart after a membership change).
  virtual core::Status setModel(std::span<const float> x) = 0;
  // The local step of Peer::step on GPU memory: the next round starts with x <- x - eta g, eta
  // the round's step size, g the gradient at device address g (DSGD's psi; CHOCO-SGD's first
  // half step); once.
  virtual void setGradient(DeviceVectors::Address g) = 0;
};

}  // namespace starling::optim
