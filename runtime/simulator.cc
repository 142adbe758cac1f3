#include "runtime/simulator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>

#include "core/line_file.h"
#include "engine/fault_injection.h"
#include "engine/membership.h"
#include "runtime/node_stack.h"
#include "runtime/progress.h"
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
    auto stack = buildNode<T>(e, i, *transports.back());
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
  // Peer loss (docs/algorithms.md §18), as `run` does it: a killed node stops before its round;
  // the others stand in for it at once (its neighbours' receives would fail that round), and the
  // membership changes `agreement` rounds later, when every survivor restarts its algorithm from
  // its own model over the repaired graph.
  const bool continueOnLoss = s.faults.onPeerLoss == engine::OnPeerLoss::kContinue;
  engine::Membership membership(n);
  engine::SurvivorSchedule survivorSchedule(*e.schedule, s.faults.repair);
  std::vector<bool> running(n, true);
  std::vector<int> killedBefore;  // ranks lost in earlier rounds (what a detector knows)
  std::map<uint64_t, std::vector<int>> changes;  // effective round -> ranks
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
  for (engine::Node<T>* node : nodes) node->setTolerateLoss(continueOnLoss);
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

  // Dropped messages (docs/algorithms.md §18, "Dropped messages"), as `run` has them. The sender
  // of a dropped message knows its receiver will take it for lost: it proposes its own departure
  // in that round's gossip and leaves as soon as its messages of the round are sent
  // (takeLeavers, after every node has sent). The receiver's receive fails (FaultInjector) and it
  // stands in for the sender; the sender's other neighbours have its message of that round, and
  // every neighbour has its proposal, so from the next round none sends to it. It is lost in
  // round r and the change comes D rounds later, as for a kill.
  auto takeLeavers = [&](uint64_t r) {
    std::map<int, std::string> leaving;  // rank -> why
    for (int i = 0; i < n; ++i) {
      if (!injectors[i]) continue;
      const auto drops = injectors[i]->takeDropped();
      if (running[i] && !drops.empty()) {
        leaving[i] = engine::FaultInjector::dropMessage(i, drops.front().to, r);
        running[i] = false;  // no finishRound: it has gone
      }
    }
    return leaving;
  };
  auto settleLeavers = [&](uint64_t r, std::map<int, std::string> leaving) -> core::Status {
    for (int i = 0; i < n; ++i) {
      if (!running[i]) continue;
      for (int peer : nodes[i]->takeNewlyLost()) {
        if (!leaving.count(peer) && running[peer]) {
          // (Not seen in a simulation so far: a receive fails only for a dropped message.)
          leaving[peer] = "no message from rank " + std::to_string(peer) + " for round " +
                          std::to_string(r);
          running[peer] = false;
        }
      }
    }
    std::vector<int> left;
    for (const auto& [rank, why] : leaving) {
      left.push_back(rank);
      for (int i = 0; i < n; ++i) {
        if (running[i]) nodes[i]->setLost(rank);
      }
      std::vector<int> known = killedBefore;
      known.push_back(rank);
      changes[r + engine::agreementRounds(s.faults.agreementRounds, e.schedule->support(), known)]
          .push_back(rank);
      if (membershipLog) {
        STARLING_RETURN_IF_ERROR(membershipLog->append(engine::membershipLostLine(r, rank, why)));
      }
    }
    killedBefore.insert(killedBefore.end(), left.begin(), left.end());
    if (std::find(running.begin(), running.end(), true) == running.end()) {
      return core::unavailable("every node was lost; nobody finished the run");
    }
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
  auto wavefrontRound = [&](uint64_t r, const topology::RoundTopology& topo, double step,
                            transport::Clock::time_point deadline) -> core::Status {
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
      const auto st = nodes[t]->startRound(r, topo, step, deadline);
      if (!st.isOk())
        return scenario::explainRoundFailure(s.algorithm, st, "node " + std::to_string(t));
      for (int b = bucketStart[t]; b < bucketStart[t + 1]; ++b) {
        const int i = completeOrder[b];
        core::Status st2 = core::Status::ok();
        while (st2.isOk() && !nodes[i]->roundComplete()) {
          auto ran = transports[i]->progress(deadline);
          if (!ran) st2 = ran.status();
        }
        if (st2.isOk()) {
          st2 = nodes[i]->finishRound();
          if (!st2.isOk())
            st2 = scenario::explainRoundFailure(s.algorithm, st2, "node " + std::to_string(i));
        }
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
    const auto topo = e.schedule->at(0);  // static (scenario_async.cc)
    const auto deadline = transport::Clock::now() + std::chrono::hours(24);  // never expires
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
        const uint64_t r = round[i];
        const auto st = nodes[i]->startRound(r, *topo, s.algorithm.stepSize.at(r), deadline);
        if (!st.isOk())
          return scenario::explainRoundFailure(s.algorithm, st, "node " + std::to_string(i));
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
        const auto st = nodes[i]->finishRound();
        if (!st.isOk())
          return scenario::explainRoundFailure(s.algorithm, st, "node " + std::to_string(i));
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
  // In process every message is deposited before anyone waits, so a generous deadline is only a
  // guard against a bug leaving a receive unmatched.
  const auto kRoundDeadline = std::chrono::seconds(60);
  if (s.asynchronous.enabled) STARLING_RETURN_IF_ERROR(asyncRun());
  for (uint64_t r = 0; r < s.rounds && !s.asynchronous.enabled; ++r) {
    std::vector<int> killedNow;
    for (const engine::FaultEvent& ev : s.faults.script) {
      // (A rank that already left, after a dropped message, has no process left to kill.)
      if (ev.kind != engine::FaultEvent::Kind::kKill || ev.atRound != r || !running[ev.kill])
        continue;
      const std::string why = "killed by the fault script before round " + std::to_string(r);
      if (!continueOnLoss) {
        return core::peerGone("rank " + std::to_string(ev.kill) + " was " + why +
                              " (faults.on_peer_loss is \"stop\")");
      }
      running[ev.kill] = false;
      killedNow.push_back(ev.kill);
      for (int i = 0; i < n; ++i) {
        if (running[i]) nodes[i]->loseThisRound(ev.kill);
      }
      // A peer that notices this loss knows of those before it, not of others in this round.
      std::vector<int> known = killedBefore;
      known.push_back(ev.kill);
      changes[r + engine::agreementRounds(s.faults.agreementRounds, e.schedule->support(), known)]
          .push_back(ev.kill);
      if (membershipLog) {
        STARLING_RETURN_IF_ERROR(
            membershipLog->append(engine::membershipLostLine(r, ev.kill, why)));
      }
    }
    killedBefore.insert(killedBefore.end(), killedNow.begin(), killedNow.end());
    if (auto it = changes.find(r); it != changes.end()) {
      membership.remove(it->second);
      auto support = survivorSchedule.support(membership);
      if (!support) return support.status();
      for (int i = 0; i < n; ++i) {
        if (!running[i]) continue;
        const auto x = nodes[i]->model();
        const std::vector<T> x0(x.begin(), x.end());
        nodes[i]->restartAlgorithm(stacks[i].algorithmFrom(s.algorithm, x0));
        nodes[i]->setSupport(*support);
      }
      std::string why;
      for (int rank : it->second) {
        why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " lost";
      }
      engine::MembershipChange change{r, membership.epoch(), it->second, {}, why};
      if (membershipLog)
        STARLING_RETURN_IF_ERROR(membershipLog->append(engine::membershipChangeLine(change)));
      result.changes.push_back(change);
    }
    auto topo = survivorSchedule.at(r, membership);
    if (!topo) return topo.status().withContext("round " + std::to_string(r));
    const double step = s.algorithm.stepSize.at(r);
    const auto deadline = transport::Clock::now() + kRoundDeadline;
    if (wavefront) {
      STARLING_RETURN_IF_ERROR(wavefrontRound(r, **topo, step, deadline));
      const uint64_t done = r + 1;
      if (done % s.logEvery == 0 || done == s.rounds) STARLING_RETURN_IF_ERROR(logRound(done));
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (!running[i]) continue;
      const auto st = nodes[i]->startRound(r, **topo, step, deadline);
      if (!st.isOk())
        return scenario::explainRoundFailure(s.algorithm, st, "node " + std::to_string(i));
    }
    // Every node has sent: messages held back for reordering go now (a peer lets them go when it
    // waits; here a node driven before their sender would wait for them in vain).
    for (engine::FaultInjector* injector : injectors) {
      if (injector) injector->releaseHeld();
    }
    if (!continueOnLoss) {
      // A dropped message stops the run, as its sender stops a peer at once (runtime/peer.cc).
      for (int i = 0; i < n; ++i) {
        if (!injectors[i]) continue;
        for (const engine::FaultInjector::Drop& d : injectors[i]->takeDropped()) {
          return core::unavailable(engine::FaultInjector::dropStopMessage(i, d.to, d.tag.round));
        }
      }
    }
    std::map<int, std::string> leavers;
    if (continueOnLoss) leavers = takeLeavers(r);
    for (int i = 0; i < n; ++i) {
      if (!running[i]) continue;
      while (!nodes[i]->roundComplete()) {
        auto ran = transports[i]->progress(deadline);
        if (!ran) return ran.status();
      }
      const auto st = nodes[i]->finishRound();
      if (!st.isOk())
        return scenario::explainRoundFailure(s.algorithm, st, "node " + std::to_string(i));
    }
    if (continueOnLoss) STARLING_RETURN_IF_ERROR(settleLeavers(r, std::move(leavers)));
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
