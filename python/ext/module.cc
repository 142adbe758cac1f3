// The `starling._starling` extension: starling::Peer for Python (python/starling/__init__.py
// re-exports it as `starling.Peer`).
//
// Arrays cross without copies (python/ext/arrays.h); every call that communicates releases the
// GIL; a non-ok starling::Status becomes a `starling.Error` (a RuntimeError) whose message is the
// status's toString(). One Peer is used by one thread at a time: a second thread calling into a
// Peer that is busy gets a starling.Error instead of a data race.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <starling/peer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "python/ext/arrays.h"

namespace py = pybind11;

namespace starling::python {
namespace {

// starling.Error, created once at import and never freed (a static py::object would be
// released after the interpreter is gone).
PyObject*& errorType() {
  static PyObject* type = nullptr;  // NOLINT: the module's exception type
  return type;
}

[[noreturn]] void raise(const std::string& message) {
  PyErr_SetString(errorType(), message.c_str());
  throw py::error_already_set();
}

void check(const Status& status) {
  if (!status.isOk()) raise(status.toString());
}

template <typename T>
std::span<T> spanOf(const Borrowed& b) {
  return {static_cast<T*>(b.data()), b.size()};
}

class PyPeer {
 public:
  explicit PyPeer(std::unique_ptr<Peer> peer) : peer_(std::move(peer)) {}

  static std::unique_ptr<PyPeer> fromScenario(const std::string& scenario, int rank,
                                              std::optional<std::string> out,
                                              std::optional<std::vector<std::string>> peers,
                                              std::optional<std::vector<size_t>> layout) {
    PeerOptions options;
    if (out) options.outDir = *out;
    if (peers) options.addresses = *peers;
    if (layout) options.layout = *layout;
    Result<std::unique_ptr<Peer>> r = [&] {
      py::gil_scoped_release release;  // creating a peer connects to its neighbours
      return Peer::fromScenario(scenario, rank, options);
    }();
    if (!r) raise(r.status().toString());
    return std::make_unique<PyPeer>(std::move(*r));
  }

  static std::unique_ptr<PyPeer> fromEnv(std::optional<std::vector<size_t>> layout) {
    Result<std::unique_ptr<Peer>> r = [&] {
      py::gil_scoped_release release;
      return Peer::fromEnv();
    }();
    if (!r) raise(r.status().toString());
    if (layout) check((*r)->setLayout(*layout));
    return std::make_unique<PyPeer>(std::move(*r));
  }

  void setLayout(std::vector<size_t> sizes) {
    check(use("set_layout").setLayout(std::move(sizes)));
  }
  std::vector<size_t> layout() { return alive("layout").layout(); }

  void step(py::object params, py::object grads, std::optional<double> lr,
            std::optional<double> loss, std::optional<double> gradVariance,
            std::optional<double> gradSquaredMean) {
    Peer& peer = use("step");
    if (gradVariance.has_value() != gradSquaredMean.has_value()) {
      throw py::value_error("give both grad_variance and grad_squared_mean, or neither");
    }
    const StepStats stats{loss, gradVariance, gradSquaredMean};
    if (Borrowed::cudaDevice(params.ptr()) >= 0 || Borrowed::cudaDevice(grads.ptr()) >= 0) {
      // On the GPU (docs/cuda.md): dsgd's step; its statistics are the host methods' (leader,
      // adascale), which the GPU path refuses.
      Borrowed x = borrowCuda(peer, params, "step");
      Borrowed g = borrowCuda(peer, grads, "step", "grads");
      if (x.empty() || g.empty()) {
        throw py::type_error("params and grads must both be CUDA tensors (on one device) or "
                             "both CPU arrays");
      }
      if (g.size() != x.size()) {
        throw py::value_error("grads must have as many elements as params (" +
                              std::to_string(x.size()) + "); got " + std::to_string(g.size()));
      }
      check(communicate([&] { return peer.step(deviceSpanOf(x), deviceSpanOf(g), lr); }));
      return;
    }
    Borrowed x = Borrowed::from(params.ptr(), "params", Access::kWrite);
    Borrowed g = Borrowed::from(grads.ptr(), "grads", Access::kRead);
    if (g.dtype() != x.dtype()) {
      throw py::type_error(std::string("grads must have the dtype of params (") +
                           dtypeName(x.dtype()) + "); got " + dtypeName(g.dtype()));
    }
    if (g.size() != x.size()) {
      throw py::value_error("grads must have as many elements as params (" +
                            std::to_string(x.size()) + "); got " + std::to_string(g.size()));
    }
    Status s = communicate([&] {
      return x.dtype() == DType::kFloat32
                 ? peer.step(spanOf<float>(x), spanOf<const float>(g), lr, stats)
                 : peer.step(spanOf<double>(x), spanOf<const double>(g), lr, stats);
    });
    check(s);
  }

  // A CUDA tensor (docs/cuda.md): Starling's stream on its GPU, which the tensor's producer
  // orders its work before (DLPack's __dlpack__(stream=...)); empty for host memory.
  Borrowed borrowCuda(Peer& peer, py::object array, const char* call,
                      const char* name = "params") {
    const int device = Borrowed::cudaDevice(array.ptr());
    if (device < 0) return Borrowed();
    uint64_t stream = 0;
    if (Status s = peer.deviceStream(device, &stream); !s.isOk()) {
      raise(std::string(call) + ": " + s.toString());
    }
    return Borrowed::fromCuda(array.ptr(), name, stream);
  }
  static DeviceSpan deviceSpanOf(const Borrowed& b) {
    // (No stream: the producer has ordered its work before Starling's stream itself.)
    return DeviceSpan{reinterpret_cast<uint64_t>(b.data()), b.size(), b.device(), std::nullopt};
  }

  void mix(py::object params) {
    Peer& peer = use("mix");
    if (Borrowed g = borrowCuda(peer, params, "mix"); !g.empty()) {
      check(communicate([&] { return peer.mix(deviceSpanOf(g)); }));
      return;
    }
    Borrowed x = Borrowed::from(params.ptr(), "params", Access::kWrite);
    check(communicate([&] {
      return x.dtype() == DType::kFloat32 ? peer.mix(spanOf<float>(x))
                                          : peer.mix(spanOf<double>(x));
    }));
  }

  void restore(py::object params) {
    Peer& peer = use("restore");
    Borrowed x = Borrowed::from(params.ptr(), "params", Access::kWrite);
    check(communicate([&] {
      return x.dtype() == DType::kFloat32 ? peer.restore(spanOf<float>(x))
                                          : peer.restore(spanOf<double>(x));
    }));
  }

  void mixReference(py::object params) {
    Peer& peer = use("mix_reference");
    Borrowed x = Borrowed::from(params.ptr(), "params", Access::kRead);
    check(x.dtype() == DType::kFloat32 ? peer.mixReference(spanOf<const float>(x))
                                       : peer.mixReference(spanOf<const double>(x)));
  }

  // The array stays borrowed (alive and in place) until mixWait(): the exchange writes into it.
  void mixStart(py::object params) {
    Peer& peer = use("mix_start");
    if (Borrowed g = borrowCuda(peer, params, "mix_start"); !g.empty()) {
      check(communicate([&] { return peer.mixStart(deviceSpanOf(g)); }));
      pending_ = std::move(g);
      return;
    }
    Borrowed x = Borrowed::from(params.ptr(), "params", Access::kWrite);
    check(communicate([&] {
      return x.dtype() == DType::kFloat32 ? peer.mixStart(spanOf<float>(x))
                                          : peer.mixStart(spanOf<double>(x));
    }));
    pending_ = std::move(x);
  }

  void mixWait() {
    Peer& peer = use("mix_wait");
    Status s = communicate([&] { return peer.mixWait(); });
    pending_.reset();
    check(s);
  }

  // Never waits: a few microseconds when there is nothing to move, so it keeps the GIL.
  void poll() {
    Peer& peer = use("poll");
    check(peer.poll());
  }

  void log(const py::kwargs& metrics) {
    Peer& peer = use("log");
    std::map<std::string, double> values;
    for (auto [key, value] : metrics) {
      if (!PyFloat_Check(value.ptr()) && !PyLong_Check(value.ptr()) &&
          !py::hasattr(value, "__float__")) {
        throw py::type_error("log: metric " + std::string(py::str(key)) +
                             " must be a number; got " +
                             std::string(py::str(value.get_type().attr("__name__"))));
      }
      // Something with __float__ that will not give one (a tensor or array of many values):
      // starling.Error naming the metric, not a bare cast error.
      double v = 0;
      std::string why;
      try {
        v = py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (!why.empty()) {
        check(Status(StatusCode::kInvalidArgument, "log: metric " + std::string(py::str(key)) +
                                    " cannot be logged as one number (" + why + ")"));
      }
      values[py::str(key)] = v;
    }
    check(peer.log(values));
  }

  void close() {
    if (!peer_) return;
    Peer& peer = use("close");
    Status s = communicate([&] { return peer.close(); });
    pending_.reset();
    peer_.reset();
    check(s);
  }

  // Copies (array.array of the steps' dtype): the Peer's own copies change at the next exchange.
  py::list neighbourModels() {
    Peer& peer = use("neighbour_models");
    py::list out;
    const py::object array = py::module_::import("array").attr("array");
    std::vector<std::span<const float>> f;
    Status s = peer.neighbourModels(f);
    if (s.isOk()) {
      for (const auto& m : f) {
        out.append(array("f", py::bytes(reinterpret_cast<const char*>(m.data()), m.size_bytes())));
      }
      if (!f.empty()) return out;
    }
    std::vector<std::span<const double>> d;
    Status sd = peer.neighbourModels(d);
    if (!sd.isOk() && !s.isOk()) check(s);
    for (const auto& m : d) {
      out.append(array("d", py::bytes(reinterpret_cast<const char*>(m.data()), m.size_bytes())));
    }
    return out;
  }

  py::object codistillation() {
    const auto c = alive("codistillation").codistillation();
    if (!c) return py::none();
    py::dict d;
    d["alpha"] = c->alpha;
    d["distance"] = c->kl ? "kl" : "cross_entropy";
    d["period"] = c->period;
    d["burn_in"] = c->burnIn;
    return d;
  }

  py::object diloco() {
    const auto c = alive("diloco").diloco();
    if (!c) return py::none();
    py::dict d;
    d["inner_steps"] = c->innerSteps;
    d["outer"] = c->outer;
    d["outer_lr"] = c->outerLr;
    d["outer_momentum"] = c->outerMomentum;
    d["fragments"] = c->fragments;
    d["overlap"] = c->overlap;
    d["compressed"] = c->compressed;
    d["compressed_differences"] = c->compressedDifferences;
    d["pull"] = c->pull;
    d["seconds"] = c->seconds;
    return d;
  }

  // Fixed for the Peer's life, so readable while another thread is in a call.
  int rank() { return alive("rank").rank(); }
  int nodes() { return alive("nodes").nodes(); }
  uint64_t round() { return use("round").round(); }
  py::object lastRound() {
    const uint64_t last = alive("last_round").lastRound();
    return last == 0 ? py::object(py::none()) : py::object(py::int_(last));
  }
  bool rejoining() { return use("rejoining").rejoining(); }
  bool closed() const { return !peer_; }

  std::string repr() const {
    if (!peer_) return "<starling.Peer (closed)>";
    return "<starling.Peer rank " + std::to_string(peer_->rank()) + " of " +
           std::to_string(peer_->nodes()) + ", round " + std::to_string(peer_->round()) + ">";
  }

 private:
  Peer& alive(const char* what) {
    if (!peer_) raise(std::string(what) + ": the peer is closed");
    return *peer_;
  }

  Peer& use(const char* what) {
    Peer& peer = alive(what);
    if (busy_) raise(std::string(what) + ": the peer is busy in another thread");
    return peer;
  }

  // Runs `call` with the GIL released; the busy flag keeps other Python threads off this Peer.
  template <typename F>
  Status communicate(F&& call) {
    struct Busy {
      bool& flag;
      explicit Busy(bool& f) : flag(f) { flag = true; }
      ~Busy() { flag = false; }  // runs with the GIL held again (declared before `release`)
    } busy(busy_);
    py::gil_scoped_release release;
    return call();
  }

  // Declared before peer_, so destroyed after it: a Peer dropped during an unfinished
  // mixStart() stops writing into the array before the array is let go.
  Borrowed pending_;  // the array an unfinished mixStart() writes into
  std::unique_ptr<Peer> peer_;
  bool busy_ = false;  // read and written with the GIL held only
};

}  // namespace
}  // namespace starling::python

PYBIND11_MODULE(_starling, m) {
  using starling::python::PyPeer;
  m.doc() = "Starling's decentralized training runtime: one Peer per process (see starling.Peer).";
  m.attr("__version__") = STARLING_VERSION;

  PyObject* error = PyErr_NewExceptionWithDoc(
      "starling.Error", "An error from Starling (its message is the status Starling returned).",
      PyExc_RuntimeError, nullptr);
  if (error == nullptr) throw py::error_already_set();
  starling::python::errorType() = error;
  m.attr("Error") = py::handle(error);

  py::class_<PyPeer>(m, "Peer", R"doc(
One decentralized-training peer: this process's rank of a Starling run.

Peer(scenario, rank) joins the run described by the scenario file as `rank`;
Peer.from_env() reads STARLING_SCENARIO and STARLING_RANK (set by
`node-launcher run SCENARIO -- COMMAND`, or the rank of srun/mpirun). Both take
layout=[sizes]: the model's tensors in the flat buffer, for the scenario's
local optimizer (LAMB's trust ratio is per tensor).

Arrays are 1-D contiguous float32 or float64 numpy arrays or PyTorch CPU tensors
(pass p.detach() for a tensor that requires grad). Starling reads and writes
their memory in place, never a copy, and releases the GIL while it communicates.
Errors from Starling raise starling.Error; wrong arrays raise TypeError or ValueError.
)doc")
      .def(py::init(&PyPeer::fromScenario), py::arg("scenario"), py::arg("rank"),
           py::kw_only(), py::arg("out") = py::none(), py::arg("peers") = py::none(),
           py::arg("layout") = py::none(),
           R"doc(Rank `rank` of the run the scenario file describes. `out`: the run folder
its peer log goes to (default: none is written); `peers`: "host:port" of every
rank (default: the scenario's `peers`, else 127.0.0.1:29500 + rank); `layout`:
the sizes of the model's tensors in the flat params buffer, in order, for the
scenario's algorithm.local_optimizer (default: the buffer is one tensor; their
sum must be the buffer's size, checked at the first step()).)doc")
      .def_static("from_env", &PyPeer::fromEnv, py::kw_only(), py::arg("layout") = py::none(),
                  R"doc(The peer of this process, from STARLING_SCENARIO and STARLING_RANK
(what `node-launcher run SCENARIO -- COMMAND` sets). `layout`: as for Peer().)doc")
      .def("set_layout", &PyPeer::setLayout, py::arg("layout"),
           R"doc(Sets the model's layout (the sizes of its tensors in the flat params buffer,
in order) for the scenario's local optimizer, replacing the one given; only
before the first step().)doc")
      .def_property_readonly("layout", &PyPeer::layout,
                             "The layout given (a list of tensor sizes; empty: one tensor).")
      .def("step", &PyPeer::step, py::arg("params"), py::arg("grads"), py::arg("lr") = py::none(),
           py::arg("loss") = py::none(), py::arg("grad_variance") = py::none(),
           py::arg("grad_squared_mean") = py::none(),
           R"doc(One round of the scenario's algorithm. `grads` is the gradient the caller
computed at `params`; `params` holds the new local model afterwards. `lr`, when
given, is this round's step size (instead of the scenario's schedule). With the
scenario's algorithm.local_optimizer (momentum, adam, lamb; dsgd and choco), the
gradient first becomes the optimizer's direction u, per tensor of the layout,
and the algorithm steps with lr * u; mix() never applies it.
CUDA tensors (both, float32, one GPU): dsgd's step on the GPU (docs/cuda.md).
`loss`: the mean loss of the batch behind `grads` (the scenario's `leader`
elects by it; a peer that never gives one never leads). `grad_variance`,
`grad_squared_mean`: AdaScale's estimates for `grads` (both or neither; see
starling::StepStats and docs/algorithms.md §22).)doc")
      .def("mix", &PyPeer::mix, py::arg("params"),
           "One gossip round: averages `params` with the neighbours', in place. A CUDA tensor "
           "(float32) is mixed on its GPU, only the compressed frames crossing to host memory "
           "(docs/cuda.md): its producer's current stream is ordered before Starling's, and "
           "the call returns with the mixed values written.")
      .def("restore", &PyPeer::restore, py::arg("params"),
           "A restarted trainer (STARLING_REJOIN=1): takes its neighbours' model into params "
           "before the first step()/mix(); a no-op otherwise.")
      .def("mix_reference", &PyPeer::mixReference, py::arg("params"),
           "Before the first mix(): the model every rank starts from (the same on every rank). "
           "With a lossy codec, mix() then sends compressed changes against reference points "
           "that start there (in a diloco scenario: DiLoCo's compressed differences).")
      .def("mix_start", &PyPeer::mixStart, py::arg("params"),
           "Starts mix(params) and returns; mix_wait() finishes it. Leave params alone between.")
      .def("mix_wait", &PyPeer::mixWait, "Finishes the exchange mix_start() started.")
      .def("poll", &PyPeer::poll,
           "Moves what the network can move now, without waiting, so that a mix_start() in "
           "flight progresses while the program computes (DecentralizedOptimizer(overlap=True) "
           "calls it from gradient hooks). Raises the peer's failure, if it has one.")
      .def("neighbour_models", &PyPeer::neighbourModels,
           R"doc(Codistillation: the neighbours' models the next step()'s loss should distil
from (copies, each an array.array of the params' dtype and size, sorted by rank); an empty list
while the term is off (before burn_in, before the first exchange). starling.torch's
codistillation_loss turns them into the term. Raises starling.Error without codistillation.)doc")
      .def_property_readonly("codistillation", &PyPeer::codistillation,
                             "The scenario's codistillation as a dict (alpha, distance, period, "
                             "burn_in), or None.")
      .def_property_readonly("diloco", &PyPeer::diloco,
                             "The scenario's DiLoCo keys as a dict (inner_steps, outer, outer_lr, "
                             "outer_momentum, fragments, overlap, compressed: a lossy codec, "
                             "compressed_differences, pull, seconds: by_time) when "
                             "its algorithm is diloco, "
                             "else None.")
      .def("log", &PyPeer::log, "Logs the trainer's metrics (numbers) into the run's outputs.")
      .def("close", &PyPeer::close,
           "Flushes this peer's last messages and leaves the run. Closing twice is harmless.")
      .def_property_readonly("rank", &PyPeer::rank)
      .def_property_readonly("nodes", &PyPeer::nodes)
      .def_property_readonly("round", &PyPeer::round, "Rounds (step or mix) completed.")
      .def_property_readonly("last_round", &PyPeer::lastRound,
                             "The run's last round (the scenario's rounds), or None when the "
                             "scenario has none and the trainer decides.")
      .def_property_readonly("rejoining", &PyPeer::rejoining,
                             "True for a lost rank's restarted trainer (STARLING_REJOIN=1) until "
                             "it rejoins: call restore(params) first, then go on from round.")
      .def_property_readonly("closed", &PyPeer::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyPeer& self, py::handle type, py::handle, py::handle) {
             if (type.is_none()) {
               self.close();
             } else {
               // Leaving on an exception: that exception is the news, not a failed close.
               try {
                 self.close();
               } catch (py::error_already_set&) {
               }
             }
             return false;
           })
      .def("__repr__", &PyPeer::repr);
}
