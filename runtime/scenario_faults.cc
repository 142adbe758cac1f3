// /faults: what a run does when it loses peers, and the fault script (scenarios/README.md).
#include <algorithm>
#include <set>

#include "runtime/scenario_reader.h"

namespace starling::runtime::scenario_detail {

void parseFaults(Obj& o, Scenario& s) {
  FaultsConfig& f = s.faults;
  f.onPeerLoss = static_cast<OnPeerLoss>(
      o.choice("on_peer_loss", "reaction to a lost peer", {"stop", "continue"}, 0));
  f.repair = static_cast<RepairKind>(
      o.choice("repair", "graph repair", {"reconnect", "none"}, 0));
  f.agreementRounds = o.integer<uint64_t>("agreement_rounds", 1, 1000000, 0);
  if (o.has("script")) {
    const json& list = *o.get("script");
    const std::string at = o.at("script");
    if (!list.is_array()) throw ScenarioError{at, "expected an array of fault events"};
    std::set<int> killed;
    for (size_t k = 0; k < list.size(); ++k) {
      Obj ev(list[k], at + "/" + std::to_string(k));
      FaultEvent e;
      e.kill = ev.integer<int>("kill", 0, std::max(0, s.nodes - 1));
      const uint64_t last = s.rounds > 0 ? s.rounds - 1 : 0;
      e.atRound = ev.integer<uint64_t>("at_round", 0, last);
      ev.finish();
      if (!killed.insert(e.kill).second) {
        throw ScenarioError{ev.path() + "/kill",
                            "rank " + std::to_string(e.kill) + " is killed twice"};
      }
      f.script.push_back(e);
    }
    if (static_cast<int>(killed.size()) >= s.nodes) {
      throw ScenarioError{at, "the script kills every node; at least one must survive"};
    }
    std::stable_sort(f.script.begin(), f.script.end(),
                     [](const FaultEvent& a, const FaultEvent& b) { return a.atRound < b.atRound; });
  } else {
    o.get("script");
  }
  o.finish();
  if (!f.script.empty() && !s.hasProblem) {
    throw ScenarioError{o.at("script"), "a fault script needs the scenario's own problem (an "
                                        "embedded run's trainers kill themselves)"};
  }
}

}  // namespace starling::runtime::scenario_detail
