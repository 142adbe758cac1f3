// Peer::mix and Peer::step on a model in GPU memory (docs/cuda.md, "Tensors on the GPU"): the
// mix node (and the step node: dsgd, exact diffusion, choco) runs optim::DeviceGossip, whose vectors live on the GPU
// (cuda/device_vectors.h), over the same engine, session and transport as the host buffers'
// rounds; only the frames are in host memory.
// This file is the one place outside cuda/ that knows a CUDA path exists (STARLING_CUDA: the
// build has cuda/).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "api/peer_impl.h"
#include "core/rng.h"
#include "runtime/metrics.h"
#include "scenario/compile.h"

#if STARLING_CUDA
#include "cuda/device_vectors.h"
#endif

namespace starling {
namespace {

Result<std::unique_ptr<optim::DeviceVectors>> openGpu(int ordinal,
                                                      const compression::CompressorSpec& spec) {
  // STARLING_DEVICE=host: the device path on host memory (device pointers are host pointers),
  // so that its engine, session and log are tested on machines without a GPU.
  if (const char* d = std::getenv("STARLING_DEVICE"); d != nullptr && std::string(d) == "host") {
    return optim::hostDeviceVectors(spec);
  }
#if STARLING_CUDA
  return cuda::openGpuVectors(ordinal, spec);
#else
  (void)spec;
  return core::unavailable(
      "cuda:" + std::to_string(ordinal) +
      ": this build of Starling has no CUDA path (meson found no PTX compiler: install clang-14, "
      "or nvcc with -Dptx_compiler=nvcc, and configure again; docs/cuda.md)");
#endif
}

// kFailedPrecondition naming what the scenario asks that `call` (mix or step) on GPU memory does
// not do yet.
Status deviceMisfit(const scenario::Scenario& s, const std::string& call) {
  const auto refuse = [&call](const std::string& key, const std::string& what) {
    return core::failedPrecondition(call + " on GPU memory: " + key + ": " + what +
                                    " is not on the GPU yet (docs/cuda.md); " + call +
                                    " a CPU tensor");
  };
  // DiLoCo's exchanges are mix() rounds of the trainer's buffers (starling.torch.DiLoCo keeps
  // them on the model's GPU); its compressed differences need reference points from a common
  // start (mixReference), which the GPU path does not keep yet.
  if (s.algorithm.kind == optim::AlgorithmKind::kDiloco &&
      !compression::sendsIdentityOnly(s.compression)) {
    return refuse("algorithm.kind", "diloco's compressed differences");
  }
  if (s.asynchronous.enabled) return refuse("algorithm.asynchronous", "asynchronous gossip");
  if (!s.compression.layers.empty()) return refuse("compression.layers", "per-layer codecs");
  if (s.algorithm.timeVarying && !compression::sendsIdentityOnly(s.compression)) {
    return refuse("topology.schedule", "a time-varying graph under a codec");
  }
  return Status::ok();
}

}  // namespace

Status Peer::Impl::openDevice(int ordinal, const char* call) {
  if (ordinal < 0) {
    return core::invalidArgument(std::string(call) + ": device " + std::to_string(ordinal));
  }
  if (device) {
    if (ordinal == deviceOrdinal) return Status::ok();
    return core::invalidArgument(std::string(call) + ": cuda:" + std::to_string(ordinal) +
                                 ", but this Peer works on cuda:" +
                                 std::to_string(deviceOrdinal) + " (one GPU a Peer)");
  }
  auto got = openGpu(ordinal, scenario.compression);
  if (!got) {
    const std::string where = "cuda:" + std::to_string(ordinal);
    return got.status().withContext(*call != '\0' ? std::string(call) + " on " + where : where);
  }
  device = std::move(*got);
  deviceOrdinal = ordinal;
  return Status::ok();
}

Status Peer::Impl::makeDeviceNode(PeerState<float>& st, size_t dim, uint32_t channel,
                                  uint64_t salt, std::unique_ptr<engine::Node<float>>& node,
                                  optim::DeviceGossip*& gossip, const char* call,
                                  optim::DeviceGossip::Rounds rounds) {
  // The seeds of the host rounds' codec streams on the same channel (api/peer.cc), so that a
  // frame's shared choices (Count-Sketch's hashes) are its neighbours'.
  const uint64_t seed = core::deriveSeed(scenario.seed, salt, rank);
  const uint64_t shared = channel == kStepChannel
                              ? core::deriveSeed(scenario.seed, kSharedCodecSalt)
                              : core::deriveSeed(scenario.seed, kSharedCodecSalt, 1);
  // (Exact diffusion mixes with half the weights: gamma 1/2, as optim/algorithms.cc.)
  const double gamma =
      rounds == optim::DeviceGossip::Rounds::kExactDiffusion ? 0.5 : scenario.algorithm.gamma;
  auto made = optim::DeviceGossip::create(*device, gamma, dim, seed, shared, rounds);
  if (!made) return made.status().withContext(call);
  gossip = made->get();
  node = std::make_unique<engine::Node<float>>(rank, std::move(*made), *net);
  node->configure(scenario::engineOptions(scenario), &schedule->support(), channel);
  // A membership change: the gossip starts afresh from the current model (copied to the host
  // and back: rare), its reference points from zero, as the host rounds' do.
  return st.session.add(*node, [this, &gossip, gamma, seed, shared,
                                rounds](std::vector<float> x0) {
    auto fresh = optim::DeviceGossip::create(*device, gamma, x0.size(), seed, shared, rounds);
    std::unique_ptr<optim::Algorithm<float>> out;
    if (fresh && (*fresh)->setModel(x0).isOk()) {
      gossip = fresh->get();
      out = std::move(*fresh);
    }
    return out;
  });
}

Status Peer::Impl::mixStartDevice(const DeviceSpan& params) {
  if (closed) return core::failedPrecondition("mix after close()");
  if (scenario.algorithm.codistillation || scenario.algorithm.sketch) {
    return core::failedPrecondition(
        "mix: the scenario's algorithm never averages models (codistillation or sketch); train "
        "with step()");
  }
  STARLING_RETURN_IF_ERROR(deviceMisfit(scenario, "mix"));
  if (rejoin) {
    return core::failedPrecondition(
        "mix on GPU memory: a restarted trainer (STARLING_REJOIN) rejoins with CPU tensors only "
        "for now; restore() a CPU copy, then move it to the GPU");
  }
  if (params.address == 0) return core::invalidArgument("mix: params is a null device pointer");
  // The GPU first: a machine without one says so before the engine starts.
  STARLING_RETURN_IF_ERROR(openDevice(params.device, "mix"));
  auto got = stateFor<float>(params.size, "mix");
  if (!got) return got.status();
  PeerState<float>& st = **got;
  if (st.mixParams.data() != nullptr || st.deviceParams != 0) {
    return core::failedPrecondition("mix: a mix is in flight");
  }
  if (st.mixNode && st.deviceGossip == nullptr) {
    return core::failedPrecondition(
        "mix: this Peer mixes CPU buffers; one Peer mixes either CPU or GPU memory");
  }
  if (!st.mixNode) {
    if (!mixReference.empty()) {
      return core::failedPrecondition(
          "mix on GPU memory: mixReference() is not on the GPU yet (docs/cuda.md)");
    }
    STARLING_RETURN_IF_ERROR(makeDeviceNode(st, params.size, kMixChannel, kMixCodecSalt,
                                            st.mixNode, st.deviceGossip, "mix"));
  }
  if (!st.last) st.last = st.mixNode.get();
  STARLING_RETURN_IF_ERROR(device->checkPointer(params.address, "mix: params"));
  if (params.stream) STARLING_RETURN_IF_ERROR(device->after(*params.stream));
  STARLING_RETURN_IF_ERROR(st.deviceGossip->setDeviceModel(params.address));
  Status s = writePending(st);
  if (s.isOk()) s = st.session.prepare(kMixChannel);
  if (s.isOk()) s = st.session.begin(*st.mixNode);
  if (!s.isOk()) return s;
  st.deviceParams = params.address;
  return Status::ok();
}

Status Peer::Impl::mixWaitDevice(PeerState<float>& st) {
  const uint64_t to = std::exchange(st.deviceParams, 0);
  STARLING_RETURN_IF_ERROR(st.session.complete(*st.mixNode));
  if (!st.mixAbandoned) STARLING_RETURN_IF_ERROR(st.deviceGossip->copyModelTo(to));
  endDeviceRound(st, *st.mixNode);
  return Status::ok();
}

void Peer::Impl::endDeviceRound(PeerState<float>& st, const engine::Node<float>& node) {
  st.last = &node;
  pendingRecord = st.engine().rounds();
  // The round line's model (consensus_distance), copied to the host only in the rounds the log
  // keeps it: every log_every-th.
  if (outDir.empty()) return;
  snapshotTaken = true;
  if (*pendingRecord % scenario.logEvery != 0) return;
  const auto x = node.model();
  if (x.size() <= runtime::kFullModelLogMaxDim) {
    snapshotX.assign(x.begin(), x.end());
  } else {
    snapshotSketch = runtime::modelSketch(x, runtime::sketchSeed(scenario));
  }
}

Status Peer::Impl::stepDevice(const DeviceSpan& params, const DeviceSpan& grads,
                              std::optional<double> lr) {
  if (closed) return core::failedPrecondition("step after close()");
  const auto& a = scenario.algorithm;
  const auto refuse = [](const std::string& key, const std::string& what) {
    return core::failedPrecondition("step on GPU memory: " + key + ": " + what +
                                    " is not on the GPU yet (docs/cuda.md); step a CPU tensor");
  };
  const bool choco = a.kind == optim::AlgorithmKind::kChoco;
  const bool exact = a.kind == optim::AlgorithmKind::kExactDiffusion;
  if (a.kind != optim::AlgorithmKind::kDsgd && !choco && !exact) {
    return refuse("algorithm.kind", std::string(optim::algorithmInfo(a.kind).name));
  }
  if (choco && a.timeVarying) {
    return refuse("topology.schedule", "choco on a time-varying graph");
  }
  if (a.codistillation || a.sketch || a.adascale || a.leader) {
    return refuse("algorithm", "codistillation, sketch, adascale or leader");
  }
  if (a.localOptimizer.kind != optim::LocalOptimizerSpec::Kind::kSgd ||
      a.localOptimizer.weightDecay != 0.0) {
    return refuse("algorithm.local_optimizer", "a local optimizer other than plain SGD");
  }
  if (!choco && !compression::sendsIdentityOnly(scenario.compression)) {
    return refuse("compression.kind", std::string(optim::algorithmInfo(a.kind).name) +
                                          " with a codec");
  }
  STARLING_RETURN_IF_ERROR(deviceMisfit(scenario, "step"));
  if (rejoin) return refuse("STARLING_REJOIN", "a restarted trainer");
  if (lr && !(*lr > 0 && *lr < 1e12)) {
    return core::invalidArgument("step: the step size must be positive and finite");
  }
  if (params.address == 0 || grads.address == 0) {
    return core::invalidArgument("step: a null device pointer");
  }
  if (params.size != grads.size || params.device != grads.device) {
    return core::invalidArgument("step: params (" + std::to_string(params.size) + " on cuda:" +
                                 std::to_string(params.device) + ") and grads (" +
                                 std::to_string(grads.size) + " on cuda:" +
                                 std::to_string(grads.device) + ") differ");
  }
  STARLING_RETURN_IF_ERROR(openDevice(params.device, "step"));
  auto got = stateFor<float>(params.size, "step");
  if (!got) return got.status();
  PeerState<float>& st = **got;
  if (st.mixParams.data() != nullptr || st.deviceParams != 0) {
    return core::failedPrecondition("step: a mix is in flight");
  }
  if (st.stepNode && st.deviceStep == nullptr) {
    return core::failedPrecondition(
        "step: this Peer steps CPU buffers; one Peer steps either CPU or GPU memory");
  }
  if (!st.stepNode) {
    using Rounds = optim::DeviceGossip::Rounds;
    const Rounds rounds = choco ? Rounds::kChocoSgd : exact ? Rounds::kExactDiffusion
                                                            : Rounds::kGossip;
    STARLING_RETURN_IF_ERROR(makeDeviceNode(st, params.size, kStepChannel, kStepCodecSalt,
                                            st.stepNode, st.deviceStep, "step", rounds));
  }
  if (!st.last) st.last = st.stepNode.get();
  STARLING_RETURN_IF_ERROR(device->checkPointer(params.address, "step: params"));
  STARLING_RETURN_IF_ERROR(device->checkPointer(grads.address, "step: grads"));
  if (params.stream) STARLING_RETURN_IF_ERROR(device->after(*params.stream));
  if (grads.stream && grads.stream != params.stream) {
    STARLING_RETURN_IF_ERROR(device->after(*grads.stream));
  }
  STARLING_RETURN_IF_ERROR(st.deviceStep->setDeviceModel(params.address));
  STARLING_RETURN_IF_ERROR(writePending(st));
  STARLING_RETURN_IF_ERROR(st.session.prepare(kStepChannel));
  // The gradient's step is the round's message (its step size from lr or the scenario's).
  st.deviceStep->setGradient(grads.address);
  STARLING_RETURN_IF_ERROR(st.session.begin(*st.stepNode, lr));
  STARLING_RETURN_IF_ERROR(st.session.complete(*st.stepNode));
  STARLING_RETURN_IF_ERROR(st.deviceStep->copyModelTo(params.address));
  endDeviceRound(st, *st.stepNode);
  return Status::ok();
}

}  // namespace starling
