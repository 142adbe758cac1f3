// /faults: what a run does when it loses peers, and the fault script (scenarios/README.md).
#include <algorithm>
#include <set>

#include "scenario/scenario_reader.h"

namespace starling::scenario::scenario_detail {

void parseFaults(Obj& o, Scenario& s) {
  FaultsConfig& f = s.faults;
  f.onPeerLoss = static_cast<engine::OnPeerLoss>(
      o.choice("on_peer_loss", "reaction to a lost peer", {"stop", "continue"}, 0));
  f.repair =
      static_cast<engine::RepairKind>(o.choice("repair", "graph repair", {"reconnect", "none"}, 0));
  f.agreementRounds = o.integer<uint64_t>("agreement_rounds", 1, 1000000, 0);
  f.restart = o.boolean("restart", false);
  f.maxRestarts = o.integer<int>("max_restarts", 1, 1000, kDefaultMaxRestarts);
  if (f.restart && f.onPeerLoss != engine::OnPeerLoss::kContinue) {
    throw ScenarioError{o.at("restart"), "restarting lost peers needs \"on_peer_loss\": "
                                         "\"continue\" (with \"stop\" a loss ends the run)"};
  }
  if (o.has("script")) {
    const json& list = *o.get("script");
    const std::string at = o.at("script");
    if (!list.is_array()) throw ScenarioError{at, "expected an array of fault events"};
    std::set<int> killed;
    for (size_t k = 0; k < list.size(); ++k) {
      Obj ev(list[k], at + "/" + std::to_string(k));
      engine::FaultEvent e;
      // An embedded run's trainers own the number of rounds (0 here): any round may be named.
      const uint64_t end = s.rounds > 0 ? s.rounds : kMaxRounds;
      const uint64_t last = end - 1;
      // The link faults that take a probability, by key.
      static const std::pair<const char*, engine::FaultEvent::Kind> kChances[] = {
          {"corrupt", engine::FaultEvent::Kind::kCorrupt},
          {"drop", engine::FaultEvent::Kind::kDrop},
          {"duplicate", engine::FaultEvent::Kind::kDuplicate},
          {"reorder", engine::FaultEvent::Kind::kReorder},
      };
      int kinds = ev.has("kill") + ev.has("delay_ms");
      for (const auto& [key, kind] : kChances) kinds += ev.has(key);
      if (kinds != 1) {
        throw ScenarioError{ev.path(), "a fault event has exactly one of \"kill\", \"corrupt\", "
                                       "\"delay_ms\", \"drop\", \"duplicate\" or \"reorder\""};
      }
      if (!ev.has("kill")) {
        const auto chance = std::find_if(std::begin(kChances), std::end(kChances),
                                         [&](const auto& c) { return ev.has(c.first); });
        if (chance != std::end(kChances)) {
          e.kind = chance->second;
          e.probability = ev.number(chance->first, 0.0, 1.0, std::nullopt);
        } else {
          e.kind = engine::FaultEvent::Kind::kDelay;
          e.delayMs = ev.integer<uint64_t>("delay_ms", 0, 3600000);
        }
        e.fromRound = ev.integer<uint64_t>("from_round", 0, last, 0);
        e.toRound = ev.integer<uint64_t>("to_round", e.fromRound, end, end);
        if (ev.has("link")) {
          const json& l = *ev.get("link");
          if (!l.is_array() || l.size() != 2 || !l[0].is_number_integer() ||
              !l[1].is_number_integer() || l[0].get<int64_t>() < 0 || l[1].get<int64_t>() < 0 ||
              l[0].get<int64_t>() >= s.nodes || l[1].get<int64_t>() >= s.nodes ||
              l[0] == l[1]) {
            throw ScenarioError{ev.at("link"), "expected [A, B]: two different ranks of 0.." +
                                                   std::to_string(s.nodes - 1)};
          }
          e.linkA = l[0].get<int>();
          e.linkB = l[1].get<int>();
        } else {
          ev.get("link");
        }
        ev.finish();
        f.script.push_back(e);
        continue;
      }
      e.kill = ev.integer<int>("kill", 0, std::max(0, s.nodes - 1));
      e.atRound = ev.integer<uint64_t>("at_round", 0, last);
      ev.finish();
      // With restarts a rank may die again after it rejoined (at another round).
      const bool again =
          f.restart &&
          std::none_of(f.script.begin(), f.script.end(), [&](const engine::FaultEvent& x) {
            return x.kind == engine::FaultEvent::Kind::kKill && x.kill == e.kill &&
                   x.atRound == e.atRound;
          });
      if (!killed.insert(e.kill).second && !again) {
        throw ScenarioError{ev.path() + "/kill",
                            "rank " + std::to_string(e.kill) + " is killed twice"};
      }
      f.script.push_back(e);
    }
    if (static_cast<int>(killed.size()) >= s.nodes) {
      throw ScenarioError{at, "the script kills every node; at least one must survive"};
    }
    std::stable_sort(
        f.script.begin(), f.script.end(),
        [](const engine::FaultEvent& a, const engine::FaultEvent& b) {
          return (a.kind == engine::FaultEvent::Kind::kKill ? a.atRound : a.fromRound) <
                 (b.kind == engine::FaultEvent::Kind::kKill ? b.atRound : b.fromRound);
        });
  } else {
    o.get("script");
  }
  o.finish();

}

}  // namespace starling::scenario::scenario_detail
