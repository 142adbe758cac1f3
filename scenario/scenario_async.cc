// /algorithm/asynchronous: asynchronous gossip with bounded staleness (docs/algorithms.md §26,
// scenarios/README.md), and what it refuses.
#include <string>
#include <utility>
#include <vector>

#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {

namespace {

// "speeds": one relative speed per node, each in [1e-6, 1e6] (a round of virtual time stays a
// finite, positive double).
std::vector<double> parseSpeeds(Obj& o, const Scenario& s) {
  std::vector<double> speeds(static_cast<size_t>(s.nodes), 1.0);
  const json* v = o.get("speeds");
  if (v == nullptr) return speeds;
  const std::string at = o.at("speeds");
  if (!v->is_array() || v->size() != static_cast<size_t>(s.nodes)) {
    throw ScenarioError{
        at, "expected an array of " + std::to_string(s.nodes) +
                " positive numbers (one relative speed per node), got " +
                (v->is_array() ? std::to_string(v->size()) + " values" : typeName(*v))};
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& x = (*v)[i];
    if (!x.is_number() || !(x.get<double>() >= 1e-6 && x.get<double>() <= 1e6)) {
      throw ScenarioError{at + "/" + std::to_string(i),
                          "expected a relative speed in [1e-06, 1e+06], got " + x.dump()};
    }
    speeds[i] = x.get<double>();
  }
  return speeds;
}

// DiLoCo's peers of different speed: "asynchronous" gives simulate the nodes' speeds for its
// by_time inner steps; the outer rounds stay synchronous (docs/algorithms.md §29).
void parseDilocoSpeeds(Obj& alg, Obj& o, Scenario& s) {
  optim::DilocoSpec& d = s.algorithm.diloco;
  if (d.seconds <= 0) {
    throw ScenarioError{alg.at("asynchronous"),
                        "diloco takes \"asynchronous\" for the speeds of its by_time inner steps "
                        "(\"inner_steps\": {\"kind\": \"by_time\", \"seconds\": s}); its inner "
                        "steps are counted here"};
  }
  if (o.has("max_staleness") && o.integer<uint64_t>("max_staleness", 0, kMaxRounds) != 0) {
    throw ScenarioError{o.at("max_staleness"),
                        "diloco's outer rounds are synchronous: each waits for the neighbours' "
                        "messages of its round; leave max_staleness out (or 0)"};
  }
  if (o.has("compute_ms")) {
    throw ScenarioError{o.at("compute_ms"),
                        "diloco by_time measures each peer's real speed in run; speeds emulate "
                        "it in simulate (step_seconds / speed a step); leave compute_ms out"};
  }
  if (o.has("speeds") && !d.speeds.empty()) {
    throw ScenarioError{o.at("speeds"), "the speeds are given in /algorithm/inner_steps/speeds "
                                        "too; give them once"};
  }
  if (o.has("speeds")) d.speeds = parseSpeeds(o, s);
  o.finish();
}

}  // namespace

void parseAsynchronous(Obj& alg, Scenario& s) {
  Obj o = alg.object("asynchronous");
  if (s.algorithm.kind == optim::AlgorithmKind::kDiloco) {
    parseDilocoSpeeds(alg, o, s);
    return;
  }
  AsyncConfig& a = s.asynchronous;
  a.enabled = true;
  a.maxStaleness = o.integer<uint64_t>("max_staleness", 0, kMaxRounds);
  a.computeMs = o.number("compute_ms", 0.0, 3.6e6, 0.0);
  a.speeds = parseSpeeds(o, s);
  o.finish();
}

void checkAsynchronous(const Scenario& s) {
  if (!s.asynchronous.enabled) return;
  const std::string why = " (asynchronous gossip, docs/algorithms.md §26)";
  // Each message must be a self-contained model that may be mixed late and more than once:
  // DSGD's psi_j. The tracking and primal-dual methods need every message of every round.
  if (s.algorithm.kind != optim::AlgorithmKind::kDsgd) {
    throw ScenarioError{"/algorithm/asynchronous",
                        std::string("needs \"kind\": \"dsgd\" (self-contained model messages); ") +
                            optim::algorithmKindName(s.algorithm.kind) +
                            " needs every neighbour's message of every round" + why};
  }
  if (s.algorithm.combine == optim::AlgorithmSpec::Combine::kAdasum) {
    throw ScenarioError{"/algorithm/combine",
                        "\"adasum\" combines the updates of one round; use \"average\"" + why};
  }
  // AdaScale's statistics are tracked by consensus over every round's messages, Leader SGD's
  // elections compare candidates of one round, and codistillation skips rounds: none of them
  // survives messages mixed out of their round.
  for (const auto& [on, key] : {std::pair{s.algorithm.adascale.has_value(), "adascale"},
                                std::pair{s.algorithm.leader.has_value(), "leader"},
                                std::pair{s.algorithm.codistillation.has_value(), "codistillation"}}) {
    if (on) {
      throw ScenarioError{std::string("/algorithm/") + key,
                          std::string("\"") + key + "\" needs every neighbour's message of each "
                          "round; leave out \"asynchronous\"" + why};
    }
  }
  if (s.topology.schedule.kind != topology::ScheduleKind::kStatic) {
    throw ScenarioError{"/topology/schedule/kind",
                        "needs a static topology: a neighbour's newest message may be from a "
                        "round whose graph differs" +
                            why};
  }
  if (!compression::sendsIdentityOnly(s.compression)) {
    throw ScenarioError{"/compression/kind",
                        "sends uncompressed models: codec frames are summed or decoded per round"
                        " (Count-Sketch's shared hashes, error feedback's reference)" +
                            why};
  }
  if (s.faults.onPeerLoss == engine::OnPeerLoss::kContinue) {
    throw ScenarioError{"/faults/on_peer_loss",
                        "\"continue\" agrees on membership changes at a common round, which "
                        "peers without a barrier do not share; use \"stop\"" +
                            why};
  }
  if (!s.faults.script.empty()) {
    throw ScenarioError{"/faults/script", "fault scripts are not supported yet" + why};
  }
  if (s.checkpoint.every > 0) {
    throw ScenarioError{"/checkpoint",
                        "a checkpoint would also have to hold the neighbours' newest messages; "
                        "not supported yet" +
                            why};
  }
}

}  // namespace starling::scenario::scenario_detail
