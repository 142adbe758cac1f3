#include "runtime/peer.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/line_file.h"
#include "engine/fault_injection.h"
#include "engine/session.h"
#include "runtime/checkpoint.h"
#include "runtime/metrics.h"
#include "runtime/node_stack.h"
#include "scenario/compile.h"
#include "scenario/scenario_writer.h"
#include "transport/factory.h"

namespace starling::runtime {
namespace {

// Everything a peer carries from one round to the next, visited in one function so that a
// checkpoint's save and load cannot disagree (core/state.h): wall time and the transport's
// corrupt-message count so far (both logged), the node (algorithm, codec streams, counters), the
// gradient oracle's stream and tables, and the session's (the fault injector's stream; with
// on_peer_loss "continue" the membership and the proposals of the membership gossip).
template <typename T>
struct PeerState {
  NodeStack<T>& stack;
  engine::Session<T>& session;
  double wallS = 0;
  uint64_t transportCorrupt = 0;

  void visit(core::StateVisitor& v) {
    v.scalar("wall_s", wallS);
    v.scalar("transport_corrupt_messages", transportCorrupt);
    {
      core::StateVisitor::Scope scope(v, "node");
      stack.node->visitState(v);
    }
    {
      core::StateVisitor::Scope scope(v, "oracle");
      stack.oracle->visitState(v);
    }
    session.visitState(v);
  }
};

// The peer process: one engine::Session over the scenario's problem, a round after another, with
// its round lines, checkpoints and resume.
template <typename T>
core::Status runAs(const scenario::Experiment& e, const PeerOptions& opt, transport::Transport& net,
                   engine::FaultInjector* faults, const std::string& address) {
  const scenario::Scenario& s = e.scenario;
  if (opt.rejoin && s.faults.onPeerLoss != engine::OnPeerLoss::kContinue) {
    return core::invalidArgument("--rejoin: a lost peer can come back only with "
                                 "faults.on_peer_loss \"continue\"");
  }
  if (opt.rejoin && opt.resumeRound) {
    return core::invalidArgument("--rejoin and --resume-round exclude each other");
  }
  auto built = buildNode<T>(e, opt.rank, net);
  if (!built) return built.status();
  NodeStack<T> stack = std::move(*built);
  engine::Node<T>& node = *stack.node;
  const uint64_t hash = scenario::scenarioHash(s);
  const std::string who = "node-launcher peer " + std::to_string(opt.rank);
  engine::SessionOptions so;
  so.engine.rank = opt.rank;
  so.engine.outDir = opt.outDir;
  so.engine.logHeader = scenario::peerLogHeader(s, opt.rank, address);
  so.engine.stop = opt.stop;
  so.engine.log = opt.log;
  so.who = who;
  so.faults = faults;
  so.leftRun = opt.leftRun;
  engine::Session<T> session(scenario::engineOptions(s), *e.schedule, net, std::move(so));
  engine::Engine<T>& engine = session.engine();
  PeerState<T> state{stack, session};

  std::string resumedFrom;
  if (opt.resumeRound) {
    const auto path = checkpointPath(opt.outDir, opt.rank, *opt.resumeRound);
    auto ck = readCheckpoint(path);
    if (!ck) return ck.status();
    const CheckpointHeader& h = ck->header;
    if (h.scenarioHash != hash || h.rank != opt.rank || h.round != *opt.resumeRound) {
      return core::invalidArgument(path.string() + ": written by rank " + std::to_string(h.rank) +
                                   " at round " + std::to_string(h.round) + " of scenario hash " +
                                   scenario::scenarioHashHex(h.scenarioHash) + "; this is rank " +
                                   std::to_string(opt.rank) + " resuming at round " +
                                   std::to_string(*opt.resumeRound) + " of scenario hash " +
                                   scenario::scenarioHashHex(hash));
    }
    if (h.round > s.rounds) {
      return core::invalidArgument(path.string() + ": round " + std::to_string(h.round) +
                                   " is past the scenario's " + std::to_string(s.rounds));
    }
    CheckpointReader reader(ck->payload, path.string());
    state.visit(reader);
    STARLING_RETURN_IF_ERROR(reader.finish());
    engine.resumeAt(h.round, h.peerLogBytes, state.wallS);
    resumedFrom = path.string();
  }
  // A restarted process of a lost rank (engine/rejoin.h): the neighbours' state, not a replay.
  std::optional<engine::JoinState> joined;
  if (opt.rejoin) {
    auto got = session.rejoin(e.modelDim(), [&](const std::string& line) {
      if (opt.log) {
        opt.log(who + ": " + line);
      } else {
        std::fprintf(stderr, "%s: %s\n", who.c_str(), line.c_str());
      }
    });
    if (!got) return got.status();
    if (got->round == 0) {
      session.say(who + ": the run ends before the others could take this peer back; nothing "
                  "to do");
      return core::Status::ok();
    }
    std::vector<T> x0(got->model.begin(), got->model.end());
    node.restartAlgorithm(stack.algorithmFrom(stack.spec, x0));
    // And what the neighbour's algorithm carries across a restart (DiLoCo's outer momentum).
    if (auto st = node.carryState(got->carried); !st.isOk()) {
      return core::corruption("rejoin: the join state's carried values: " + st.message());
    }
    joined = std::move(*got);
  }
  if (!opt.resumeRound && !opt.rejoin && !opt.outDir.empty()) {
    // A fresh start: checkpoints an earlier run left here belong to a peer log this one replaces
    // (and newer ones would outlive this run's when the newest `keep` are kept).
    std::error_code ec;
    std::filesystem::remove_all(checkpointDir(opt.outDir, opt.rank), ec);
    if (ec) return core::ioError("cannot remove " + checkpointDir(opt.outDir, opt.rank).string() +
                                 ": " + ec.message());
  }
  const uint64_t transportCorruptBefore = state.transportCorrupt;
  STARLING_RETURN_IF_ERROR(session.open());

  // A checkpoint of `done` completed rounds: the peer log on disk first (the checkpoint records
  // its length), then the state, durably (runtime/checkpoint.h).
  auto checkpoint = [&](uint64_t done) -> core::Status {
    STARLING_RETURN_IF_ERROR(engine.syncLog());
    state.wallS = engine.wallSeconds();
    state.transportCorrupt = transportCorruptBefore + net.stats().corruptMessages;
    CheckpointWriter writer;
    state.visit(writer);
    STARLING_RETURN_IF_ERROR(writer.status());
    CheckpointHeader h;
    h.scenarioHash = hash;
    h.rank = opt.rank;
    h.round = done;
    h.peerLogBytes = engine.logBytes();
    return writeCheckpoint(opt.outDir, h, writer.payload(), s.checkpoint.keep);
  };

  auto record = [&](uint64_t round) -> core::Status {
    nlohmann::ordered_json j;
    j["round"] = round;
    j["bytes_sent"] = node.bytesSent();
    j["corrupt_messages"] =
        node.corruptMessages() + transportCorruptBefore + net.stats().corruptMessages;
    j["compression_error_sum"] = node.compressionErrorSum();
    j["compression_error_count"] = node.compressionErrorCount();
    j["wall_s"] = engine.wallSeconds();
    std::vector<optim::MethodMetric> methods;
    node.algorithm().methodMetrics(methods);
    if (!methods.empty()) {
      nlohmann::ordered_json mj = nlohmann::ordered_json::object();
      for (const auto& mm : methods) mj[mm.name] = mm.value;
      j["methods"] = std::move(mj);
    }
    if (s.asynchronous.enabled) {
      // The staleness this peer mixed with in its last round, and the largest so far (§26).
      j["staleness"] = node.lastStaleness();
      j["staleness_max"] = node.maxStalenessSeen();
    }
    const auto x = node.model();
    // Large models: a sketch every logged round, the model itself at the first and the last
    // (metrics.h).
    if (x.size() > kFullModelLogMaxDim && round != 0 && round != s.rounds) {
      j["sketch"] = modelSketch<T>(x, sketchSeed(s));
      // The merge cannot evaluate a sketch: the peer evaluates its own model (the first 1,000
      // test images, as simulate's test_accuracy_peers_*).
      if (const double a = peerTestAccuracy<T>(e, x); !std::isnan(a)) j["test_accuracy_own"] = a;
    } else {
      j["x"] = std::vector<double>(x.begin(), x.end());
    }
    // A diverged model holds NaN: JSON has none, so such values are written as null.
    return engine.append(
        j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  };

  session.say(who + ": listening on " + address + " (" + std::to_string(s.nodes) + " nodes, " +
              std::to_string(s.rounds) + " rounds, " + s.name + ")");
  if (opt.resumeRound) {
    session.say(who + ": resuming at round " + std::to_string(*opt.resumeRound) + " from " +
                resumedFrom);
  } else if (joined) {
    session.say(who + ": rejoined at round " + std::to_string(joined->round) +
                " (membership epoch " + std::to_string(joined->epoch) + ")" +
                (joined->carried.empty()
                     ? std::string()
                     : ", with its neighbour's carried state (" +
                           std::to_string(joined->carried.size()) + " values)"));
    // Its log says so (membership.jsonl has the survivors' line of the same change). Its model
    // is logged at the rounds the others log, so that the merge finds every round complete.
    if (joined->round % s.logEvery == 0) STARLING_RETURN_IF_ERROR(record(joined->round));
  } else {
    STARLING_RETURN_IF_ERROR(record(0));
  }
  // A survivor sends its model to a neighbour that rejoins (its join state).
  session.setJoinSource([&node] {
    const auto x = node.model();
    return std::vector<double>(x.begin(), x.end());
  });
  session.setJoinCarried([&node] { return node.carriedState(); });
  STARLING_RETURN_IF_ERROR(session.add(node, [&](std::vector<T> x0) {
    return stack.algorithmFrom(stack.spec, x0);
  }));
  while (engine.rounds() < s.rounds) {
    if (s.asynchronous.enabled && s.asynchronous.computeMs > 0 &&
        !session.killedBefore(engine.rounds())) {
      // A peer of relative speed v computes compute_ms / v longer per round (§26), here before
      // its message is sent; the transport keeps taking in the neighbours' messages meanwhile.
      const auto until = transport::Clock::now() +
                         std::chrono::duration_cast<transport::Clock::duration>(
                             std::chrono::duration<double, std::milli>(
                                 s.asynchronous.computeMs / s.asynchronous.speeds[opt.rank]));
      while (transport::Clock::now() < until) {
        if (opt.stop && opt.stop->load()) {
          return engine.fail(core::cancelled("stopped by a signal"), nullptr);
        }
        auto ran =
            net.progress(std::min(until, transport::Clock::now() + std::chrono::milliseconds(200)));
        if (!ran) return engine.fail(ran.status(), &node);
      }
    }
    // A failure is in the log already.
    STARLING_RETURN_IF_ERROR(session.round(node));
    const uint64_t done = engine.rounds();
    if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(record(done));
    if (s.checkpoint.every > 0 && (done % s.checkpoint.every == 0 || done == s.rounds)) {
      if (auto st = checkpoint(done); !st.isOk()) return engine.fail(st, nullptr);
    }
  }
  // The neighbours still need this peer's last messages: hand them all to the network before
  // the transport is closed (its close flushes what is in flight).
  STARLING_RETURN_IF_ERROR(session.flush());
  char done[160];
  std::snprintf(done, sizeof done, "%s: done, %llu rounds, %.1f MB sent, %.2f s", who.c_str(),
                static_cast<unsigned long long>(s.rounds),
                static_cast<double>(node.bytesSent()) / 1e6, engine.wallSeconds());
  session.say(done + session.faultSummary());
  return core::Status::ok();
}

}  // namespace

core::Status checkBeforeStart(const scenario::Scenario& s, bool local) {
  const std::string file = s.file.empty() ? std::string("scenario") : s.file;
  if (s.security.keyFile.empty()) {
    const char* env = std::getenv(scenario::kKeyFileEnv);
    if (env != nullptr && *env != '\0') {
      if (auto key = transport::auth::loadKeyFile(env); !key) {
        return core::invalidArgument(std::string(scenario::kKeyFileEnv) + ": " +
                                     key.status().message());
      }
    } else if (s.security.encrypt) {
      return core::invalidArgument(file +
                                   ": /security/encrypt: needs the cluster's key, and "
                                   "neither /security/key_file nor the environment variable " +
                                   std::string(scenario::kKeyFileEnv) + " names one");
    }
  }
  if (!local || !s.peers.explicitAddresses) return core::Status::ok();
  // Every rank listens here: its host must be this machine's, and its port free.
  for (size_t r = 0; r < s.peers.addresses.size(); ++r) {
    const std::string& address = s.peers.addresses[r];
    const auto colon = address.rfind(':');
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string where = file + ": /peers/addresses/" + std::to_string(r) + ": " + address;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
      return core::invalidArgument(where + ": the host does not resolve");
    }
    int err = 0;
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
    } else {
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0) err = errno;
      ::close(fd);
    }
    freeaddrinfo(found);
    if (err == EADDRNOTAVAIL) {
      return core::invalidArgument(where + ": no interface of this machine holds " + host +
                                   " (`run` starts every rank here; start peers on other hosts "
                                   "with `node-launcher peer`, srun or mpirun)");
    }
    if (err == EADDRINUSE) {
      return core::invalidArgument(where + ": another process already listens on this port");
    }
    if (err != 0) return core::invalidArgument(where + ": cannot listen there: " + strerror(err));
  }
  return core::Status::ok();
}

core::Status runPeer(const scenario::Experiment& e, const PeerOptions& opt) {
  const scenario::Scenario& s = e.scenario;
  if (opt.rank < 0 || opt.rank >= s.nodes) {
    return core::invalidArgument("rank " + std::to_string(opt.rank) + " is not in 0.." +
                                 std::to_string(s.nodes - 1));
  }
  auto options = scenario::networkOptions(s, opt.rank, opt.addresses);
  if (!options) return options.status();
  transport::NetworkOptions& no = *options;
  no.log = opt.log;
  auto net = transport::createNetworkTransport(no);
  if (!net) return net.status().withContext("rank " + std::to_string(opt.rank));
  const std::string& address = no.addresses[opt.rank];
  transport::Transport* use = net->get();
  std::unique_ptr<engine::FaultInjector> faults;  // scripted link faults (engine/fault_injection.h)
  if (engine::FaultInjector::wanted(s.faults.script)) {
    faults = std::make_unique<engine::FaultInjector>(**net, s.faults.script, s.seed,
                                                     engine::kModelChannel,
                                                     /*realTime=*/true);
    use = faults.get();
  }
  if (s.precision == scenario::Precision::kFloat32) {
    return runAs<float>(e, opt, *use, faults.get(), address);
  }
  return runAs<double>(e, opt, *use, faults.get(), address);
}

}  // namespace starling::runtime
