#include "runtime/simulator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/line_file.h"
#include "engine/fault_injection.h"
#include "engine/membership.h"
#include "engine/membership_gossip.h"
#include "engine/session.h"
#include "runtime/node_stack.h"
#include "runtime/progress.h"
#include "scenario/compile.h"
#include "transport/inproc/inproc_transport.h"

namespace starling::runtime {
namespace {

template <typename T>
core::Result<SimulateResult> simulateAs(const scenario::Experiment& e, const SimulateOptions& opt) {
  const scenario::Scenario& s = e.scenario;
  const int n = s.nodes;

  auto hub = transport::inproc::createHub(n);
  std::vector<std::unique_ptr<transport::Transport>> owned;  // in-process, and fault wrappers
  std::vector<transport::Transport*> transports;             // what node i uses
  std::vector<engine::FaultInjector*> injectors(n, nullptr);
  std::vector<NodeStack<T>> stacks;
  std::vector<engine::Node<T>*> nodes;
  for (int i = 0; i < n; ++i) {
    owned.push_back(transport::inproc::createTransport(*hub, i, /*vouch=*/true));
    if (engine::FaultInjector::wanted(
            s.faults.script)) {  // scripted link faults, applied as a peer applies them
      auto injector = std::make_unique<engine::FaultInjector>(
          *owned.back(), s.faults.script, s.seed, engine::kModelChannel, /*realTime=*/false);
      injectors[i] = injector.get();
      owned.push_back(std::move(injector));
    }
    transports.push_back(owned.back().get());
    auto stack = buildNode<T>(e, i, *transports.back(), /*simulated=*/true);
    if (!stack) return stack.status();
    stacks.push_back(std::move(*stack));
    nodes.push_back(stacks.back().node.get());
  }

  std::unique_ptr<MetricsLog> log;
  if (!opt.outDir.empty()) {
    auto created = MetricsLog::create(opt.outDir);
    if (!created) return created.status();
    log = std::move(*created);
  }

  SimulateResult result;
  const auto start = std::chrono::steady_clock::now();
  // Peer loss (docs/algorithms.md §18) and scripted faults: every node is an engine::Session, as
  // a peer process is, over the in-process transport. A killed rank's endpoint is closed
  // (inproc::closeRank): its neighbours' receives fail as a dead peer's do, they stand in for it,
  // agree on the change by the membership gossip and apply it at the same round, restarting
  // their algorithms from their own models, with the very code of `run`.
  const bool continueOnLoss = s.faults.onPeerLoss == engine::OnPeerLoss::kContinue;
  std::vector<bool> running(n, true);
  // The optimum the metrics measure against once a node is out: that of the nodes still running,
  // from the round it left (not only from the membership change), as the merge of a run's peer
  // logs has it (PeerLogMerger::poll).
  std::unique_ptr<SurvivorProblem> survivors;
  std::vector<bool> survivorsOf;  // the running mask `survivors` is for
  std::unique_ptr<core::LineFile> membershipLog;
  if (!opt.outDir.empty() && !s.faults.script.empty()) {
    auto created = core::LineFile::create(opt.outDir / "membership.jsonl");
    if (!created) return created.status();
    membershipLog = std::move(*created);
  }
  // The sessions' loss and membership lines (their peer logs in `run`): membership.jsonl has each
  // loss and each change once, as the merge of a run's peer logs writes it (MembershipReports).
  std::set<std::pair<int, uint64_t>> lossesNoted;  // (rank, round)
  std::set<uint64_t> epochsNoted;
  core::Status tapFailure = core::Status::ok();
  auto tap = [&](int reporter, const std::string& line) {
    if (line.find("\"lost\"") == std::string::npos &&
        line.find("\"membership\"") == std::string::npos) {
      return;
    }
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !running[reporter]) return;
    bool news = false;
    if (j.contains("lost")) {
      news = lossesNoted.insert({j["lost"]["rank"].get<int>(), j["lost"]["round"].get<uint64_t>()})
                 .second;
    } else if (j.contains("membership")) {
      const auto& m = j["membership"];
      news = epochsNoted.insert(m["epoch"].get<uint64_t>()).second;
      if (news) {
        engine::MembershipChange c;
        c.round = m["round"].get<uint64_t>();
        c.epoch = m["epoch"].get<uint64_t>();
        if (m.contains("left")) c.left = m["left"].get<std::vector<int>>();
        if (m.contains("joined")) c.joined = m["joined"].get<std::vector<int>>();
        if (m.contains("why")) c.why = m["why"].get<std::string>();
        result.changes.push_back(std::move(c));
      }
    }
    if (news && membershipLog && tapFailure.isOk()) tapFailure = membershipLog->append(line);
  };
  engine::Options run = scenario::engineOptions(s);
  // In one process every message is deposited before anyone waits, and a dead rank's receives
  // fail at once (closeRank): no round waits for the clock, however long n nodes take to compute.
  // The sessions' deadlines (a day) only bound a bug that left a receive unmatched.
  run.roundTimeoutMs = run.connectTimeoutMs = 24ull * 3600 * 1000;
  std::vector<std::unique_ptr<engine::Session<T>>> sessions;
  auto leftFlags = std::make_unique<bool[]>(n);
  for (int i = 0; i < n; ++i) {
    engine::SessionOptions so;
    so.engine.rank = i;
    so.engine.log = [](const std::string&) {};  // what a peer says about its losses: in the lines
    so.engine.tap = [&tap, i](const std::string& line) { tap(i, line); };
    so.who = "simulate rank " + std::to_string(i);
    so.faults = injectors[i];
    so.leftRun = &leftFlags[i];
    so.killProcess = false;
    sessions.push_back(std::make_unique<engine::Session<T>>(run, *e.schedule, *transports[i],
                                                            std::move(so)));
    STARLING_RETURN_IF_ERROR(sessions.back()->open());
    STARLING_RETURN_IF_ERROR(
        sessions.back()->add(*nodes[i], [&stack = stacks[i]](std::vector<T> x0) {
          return stack.algorithmFrom(stack.spec, x0);
        }));
  }
  struct Counters {
    uint64_t bytes = 0, corrupt = 0;
    double errSum = 0;
    uint64_t errCount = 0;
  };
  std::vector<Counters> lastLogged(n);
  std::vector<std::span<const T>> models;
  CompressionErrorMean compressionError;
  // `snapshot` (asynchronous gossip): every node's model and counters as it finished `round`,
  // taken when it did; the nodes' current ones otherwise.
  struct Snapshot {
    std::vector<std::vector<T>> models;
    std::vector<Counters> counters;
    int taken = 0;
  };
  auto measure = [&](uint64_t round, const Snapshot* snapshot = nullptr) -> core::Status {
    const bool anyOut = std::find(running.begin(), running.end(), false) != running.end();
    if (anyOut && survivorsOf != running) {
      auto problem = survivorProblem(e, running);
      if (!problem) return problem.status();
      survivors = std::make_unique<SurvivorProblem>(std::move(*problem));
      survivorsOf = running;
    }
    // Wall time when the round finished, before the metrics themselves are computed.
    if (opt.onRoundEnd) opt.onRoundEnd(round);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    models.clear();
    for (int i = 0; i < n; ++i) {
      if (snapshot) {
        models.push_back(snapshot->models[i]);
      } else if (running[i]) {
        models.push_back(nodes[i]->model());
      }
    }
    RoundMetrics m = measureModels<T>(e, models, result.xMean, anyOut ? survivors.get() : nullptr);
    {
      std::vector<std::vector<optim::MethodMetric>> reports;
      for (int i = 0; i < n; ++i) {
        if (!running[i]) continue;
        nodes[i]->algorithm().methodMetrics(reports.emplace_back());
      }
      m.methods = meanMethodMetrics(reports);
    }
    m.round = round;
    m.wallS = wall;
    double errSum = 0;
    uint64_t errCount = 0;
    for (int i = 0; i < n; ++i) {
      // A killed node counts with what it had sent at its last logged round (what its peer log
      // says in `run`).
      if (snapshot) {
        lastLogged[i] = snapshot->counters[i];
      } else if (running[i]) {
        lastLogged[i] = {nodes[i]->bytesSent(), nodes[i]->corruptMessages(),
                         nodes[i]->compressionErrorSum(), nodes[i]->compressionErrorCount()};
      }
      m.bytesSent += lastLogged[i].bytes;
      m.corruptMessages += lastLogged[i].corrupt;
      errSum += lastLogged[i].errSum;
      errCount += lastLogged[i].errCount;
    }
    m.compressionError = compressionError.next(errSum, errCount);
    result.last = m;
    if (opt.onLog) opt.onLog(m);
    if (log) return log->append(m);
    return core::Status::ok();
  };

  ProgressLine progress(s.name, s.rounds, opt.progress);
  auto logRound = [&](uint64_t done, const Snapshot* snapshot = nullptr) -> core::Status {
    STARLING_RETURN_IF_ERROR(measure(done, snapshot));
    progress.update(done, progressDetail(result.last));
    return core::Status::ok();
  };

  // Without faults a round runs as a wavefront: node t starts, then every node whose last
  // neighbour (in rank order) is t completes at once, while its neighbours' frames and its own
  // state are still in cache. Starting all n nodes before completing any (the order kept for
  // fault scripts, whose injectors release held messages only once everyone has sent) reads
  // every frame back from memory: on a 1,024-node ring with d = 1e4 that was most of the gap
  // between the engine and the bare arithmetic (docs/benchmarks.md, "bench-simulate"). Each
  // node's arithmetic depends only on its own state and its neighbours' frames of the round,
  // so the order changes no result; failures are reported as the start-all order reports them
  // (the first failing start in rank order, else the lowest-rank failing completion).
  const bool wavefront = s.faults.script.empty() && !continueOnLoss;
  std::vector<int> lastNeighbour(n);
  std::vector<int> bucketStart(n + 1);
  std::vector<int> completeOrder(n);
  auto wavefrontRound = [&](const topology::RoundTopology& topo) -> core::Status {
    // A node may complete once every rank it exchanges with this round has started: the round's
    // mixing row, and the support graph for algorithms that track every support neighbour.
    const topology::Graph& support = e.schedule->support();
    for (int i = 0; i < n; ++i) {
      int last = i;
      for (const auto& peer : topo.weights.rows[i].peers) last = std::max(last, peer.peer);
      if (i < support.nodes()) {
        for (int peer : support.neighbors(i)) last = std::max(last, peer);
      }
      lastNeighbour[i] = last;
    }
    std::fill(bucketStart.begin(), bucketStart.end(), 0);
    for (int i = 0; i < n; ++i) ++bucketStart[lastNeighbour[i] + 1];
    for (int t = 0; t < n; ++t) bucketStart[t + 1] += bucketStart[t];
    {
      std::vector<int> fill(bucketStart.begin(), bucketStart.end() - 1);
      for (int i = 0; i < n; ++i) completeOrder[fill[lastNeighbour[i]]++] = i;
    }
    int failedRank = n;  // the lowest rank whose completion failed, and why
    core::Status failed = core::Status::ok();
    for (int t = 0; t < n; ++t) {
      core::Status st = sessions[t]->prepare();
      if (st.isOk()) st = sessions[t]->begin(*nodes[t], topo);
      if (!st.isOk()) return st;
      for (int b = bucketStart[t]; b < bucketStart[t + 1]; ++b) {
        const int i = completeOrder[b];
        const core::Status st2 = sessions[i]->complete(*nodes[i]);
        if (!st2.isOk() && i < failedRank) {
          failedRank = i;
          failed = st2;
        }
      }
    }
    return failed;
  };

  // Asynchronous gossip (docs/algorithms.md §26) in virtual time: a discrete-event loop, exactly
  // reproducible. Node i's round takes 1/speeds[i] units: it computes from the moment its last
  // round finished and sends when done (startRound at that time); from then on it waits until
  // every neighbour's newest message is recent enough (Node::roundComplete) and finishes the
  // round at the time of the send that made it so. Events are taken in (time, rank) order: at
  // each time, first every send due then, then every waiting node in rank order drains its
  // transport and finishes if it can. Messages take no time; a node mixes what was sent by the
  // moment it finishes, rounds <= its own only (Node).
  auto asyncRun = [&]() -> core::Status {
    constexpr double kNever = std::numeric_limits<double>::infinity();
    std::vector<uint64_t> round(n, 0);
    std::vector<double> sendAt(n), took(n);
    std::vector<bool> waiting(n, false);
    for (int i = 0; i < n; ++i) {
      took[i] = 1.0 / s.asynchronous.speeds[i];
      sendAt[i] = took[i];
    }
    result.asyncFinish.assign(n, 0.0);
    std::map<uint64_t, Snapshot> snapshots;  // logged round -> models as each node finished it
    int finished = 0;
    while (finished < n) {
      const double t = *std::min_element(sendAt.begin(), sendAt.end());
      if (t == kNever) return core::internalError("asynchronous simulation: every node waits");
      for (int i = 0; i < n; ++i) {
        if (sendAt[i] != t) continue;
        // (Its session's rounds have no deadline that could pass: simulate's are a day.)
        core::Status st = sessions[i]->prepare();
        if (st.isOk()) st = sessions[i]->begin(*nodes[i]);
        if (!st.isOk()) return st;
        waiting[i] = true;
        sendAt[i] = kNever;
      }
      for (int i = 0; i < n; ++i) {
        if (!waiting[i]) continue;
        for (;;) {
          auto ran = transports[i]->progress(transport::Clock::now());
          if (!ran) return ran.status();
          if (*ran == 0) break;
        }
        if (!nodes[i]->roundComplete()) continue;
        STARLING_RETURN_IF_ERROR(sessions[i]->complete(*nodes[i]));
        waiting[i] = false;
        result.maxStalenessSeen = std::max(result.maxStalenessSeen, nodes[i]->lastStaleness());
        const uint64_t done = ++round[i];
        if (done % s.logEvery == 0 || done == s.rounds) {
          Snapshot& snap = snapshots[done];
          if (snap.models.empty()) {
            snap.models.resize(n);
            snap.counters.resize(n);
          }
          const auto x = nodes[i]->model();
          snap.models[i].assign(x.begin(), x.end());
          snap.counters[i] = {nodes[i]->bytesSent(), nodes[i]->corruptMessages(),
                              nodes[i]->compressionErrorSum(), nodes[i]->compressionErrorCount()};
          // Every node finishes round r before r + 1, so logged rounds complete in order.
          if (++snap.taken == n) {
            STARLING_RETURN_IF_ERROR(logRound(done, &snap));
            snapshots.erase(done);
          }
        }
        if (done == s.rounds) {
          result.asyncFinish[i] = t;
          ++finished;
        } else {
          sendAt[i] = t + took[i];
        }
      }
    }
    return core::Status::ok();
  };

  STARLING_RETURN_IF_ERROR(measure(0));
  if (s.asynchronous.enabled) STARLING_RETURN_IF_ERROR(asyncRun());
  // A rank out of the run (killed, or it left): its endpoint is closed, its node no longer
  // driven, and the metrics count it up to its last logged round.
  auto takeOut = [&](int i, const std::string& why) {
    running[i] = false;
    transport::inproc::closeRank(*hub, i, why);
  };
  for (uint64_t r = 0; r < s.rounds && !s.asynchronous.enabled; ++r) {
    if (wavefront) {
      STARLING_RETURN_IF_ERROR(wavefrontRound(*e.schedule->at(r)));
      const uint64_t done = r + 1;
      if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(logRound(done));
      continue;
    }
    // The fault script's kills before round r: those ranks' processes are gone.
    for (int i = 0; i < n; ++i) {
      if (!running[i] || !sessions[i]->killedBefore(r)) continue;
      const std::string why = "killed by the fault script before round " + std::to_string(r);
      if (!continueOnLoss) {
        return core::peerGone("rank " + std::to_string(i) + " was " + why +
                              " (faults.on_peer_loss is \"stop\")");
      }
      takeOut(i, "rank " + std::to_string(i) + " was " + why);
    }
    // Start all, then complete all: a membership change due now, each node's message and the
    // round's gossip first; a node whose message was dropped leaves once its other messages are
    // sent (Survival::begin), as its process would.
    for (int i = 0; i < n; ++i) {
      if (!running[i]) continue;
      core::Status st = sessions[i]->prepare();
      if (st.isOk()) st = sessions[i]->begin(*nodes[i]);
      if (st.isOk()) continue;
      if (!leftFlags[i]) return st;
      takeOut(i, st.message());
    }
    // Every node has sent: messages held back for reordering go now (a peer lets them go when it
    // waits; here a node driven before their sender would wait for them in vain).
    for (engine::FaultInjector* injector : injectors) {
      if (injector) injector->releaseHeld();
    }
    for (int i = 0; i < n; ++i) {
      if (!running[i]) continue;
      // Virtual time: every rank has sent its messages of round r, so what has not come for
      // this round will not, and its receives end as their deadlines would end them (a bridge
      // of the membership gossip whose other end did not find this rank). The liveness
      // channel's standing receives are not of a round.
      for (;;) {
        auto ran = transports[i]->progress(transport::Clock::now());
        if (!ran) return ran.status();
        if (*ran == 0) break;
      }
      if (!sessions[i]->engine().roundReady(*nodes[i])) {
        transport::inproc::expireWaiting(*hub, i, [r](int, const transport::Tag& tag) {
          return tag.round <= r && tag.channel != engine::kLivenessChannel;
        });
      }
      const core::Status st = sessions[i]->complete(*nodes[i]);
      if (st.isOk()) continue;
      if (!leftFlags[i]) return st;
      takeOut(i, st.message());
    }
    STARLING_RETURN_IF_ERROR(tapFailure);
    if (std::find(running.begin(), running.end(), true) == running.end()) {
      return core::unavailable("every node was lost; nobody finished the run");
    }
    const uint64_t done = r + 1;
    if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(logRound(done));
  }
  progress.finish();

  for (int i = 0; i < n; ++i) {
    if (running[i]) result.models.emplace_back(nodes[i]->model().begin(), nodes[i]->model().end());
  }
  if (log) {
    AsyncReport report{result.maxStalenessSeen, result.asyncFinish, "virtual"};
    STARLING_RETURN_IF_ERROR(log->writeSummary(s, result.last, result.xMean, "simulate",
                                               s.asynchronous.enabled ? &report : nullptr));
  }
  return result;
}

}  // namespace

core::Result<SimulateResult> simulate(const scenario::Experiment& e,
                                      const SimulateOptions& options) {
  if (e.scenario.precision == scenario::Precision::kFloat32) return simulateAs<float>(e, options);
  return simulateAs<double>(e, options);
}

}  // namespace starling::runtime
