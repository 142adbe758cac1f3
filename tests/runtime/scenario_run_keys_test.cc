// The keys of a scenario's run-time sections (faults, checkpoint, codistillation, transport):
// their defaults, their refusals (file and JSON path), and what the transport is compiled to.
#include <catch2/catch.hpp>
#include <string>

#include "engine/fault_injection.h"
#include "scenario/compile.h"
#include "scenario/scenario.h"
#include "tests/runtime/scenario_testing.h"

namespace starling::runtime {
namespace {

using namespace scenario_testing;
using Catch::Matchers::Contains;

TEST_CASE("faults: the keys, their defaults and their refusals", "[runtime][unit]") {
  const auto plain = scenario::parseScenario(kGood, "s.json", ".");
  REQUIRE(plain.isOk());
  CHECK(plain->faults.onPeerLoss ==
        engine::OnPeerLoss::kStop);  // today's clear stop is the default
  CHECK(plain->faults.repair == engine::RepairKind::kReconnect);
  CHECK(plain->faults.script.empty());
  const std::string alg = R"("step_size": 0.3}})";
  const auto withFaults = [&](const std::string& faults) {
    return with(alg, R"("step_size": 0.3}, "faults": )" + faults + "}");
  };
  const auto s =
      scenario::parseScenario(withFaults(R"({"on_peer_loss": "continue", "repair": "none",
      "agreement_rounds": 9, "script": [{"kill": 2, "at_round": 30}, {"kill": 1, "at_round": 5}]})"),
                              "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  CHECK(s->faults.onPeerLoss == engine::OnPeerLoss::kContinue);
  CHECK(s->faults.repair == engine::RepairKind::kNone);
  CHECK(s->faults.agreementRounds == 9);
  REQUIRE(s->faults.script.size() == 2);
  CHECK(s->faults.script[0].kill == 1);  // sorted by round
  CHECK(s->faults.script[1].atRound == 30);

  CHECK_THAT(refusal(withFaults(R"({"on_peer_loss": "retry"})")),
             Contains("s.json: /faults/on_peer_loss: unknown") && Contains("stop, continue"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 4, "at_round": 1}]})")),
             Contains("/faults/script/0/kill: must be between 0 and 3"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 40}]})")),
             Contains("/faults/script/0/at_round: must be between 0 and 39"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 3},
                                                {"kill": 1, "at_round": 9}]})")),
             Contains("/faults/script/1/kill: rank 1 is killed twice"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 0, "at_round": 1}, {"kill": 1, "at_round": 1},
      {"kill": 2, "at_round": 1}, {"kill": 3, "at_round": 1}]})")),
             Contains("/faults/script: the script kills every node"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 3, "signal": 9}]})")),
             Contains("/faults/script/0/signal: unknown key"));
  CHECK_THAT(refusal(withFaults(R"({"script": {"kill": 1}})")),
             Contains("/faults/script: expected an array"));
  const auto links =
      scenario::parseScenario(withFaults(R"({"script": [{"corrupt": 0.25, "from_round": 3,
      "to_round": 9, "link": [0, 2]}, {"delay_ms": 40}]})"),
                              "s.json", ".");
  INFO(links.status().toString());
  REQUIRE(links.isOk());
  REQUIRE(links->faults.script.size() == 2);
  CHECK(links->faults.script[1].kind ==
        engine::FaultEvent::Kind::kCorrupt);  // sorted by first round
  CHECK(links->faults.script[1].probability == 0.25);
  CHECK(links->faults.script[1].linkB == 2);
  CHECK(links->faults.script[0].delayMs == 40);
  CHECK(links->faults.script[0].toRound == 40);  // to the end by default
  CHECK_THAT(refusal(withFaults(R"({"script": [{"corrupt": 0.5, "kill": 1, "at_round": 2}]})")),
             Contains("/faults/script/0: a fault event has exactly one of"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"corrupt": 1.5}]})")),
             Contains("/faults/script/0/corrupt"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"delay_ms": 5, "link": [1, 1]}]})")),
             Contains("/faults/script/0/link: expected [A, B]: two different ranks of 0..3"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"delay_ms": 5, "from_round": 9, "to_round": 3}]})")),
             Contains("/faults/script/0/to_round: must be between 9 and 40"));
}

TEST_CASE("checkpoint: the keys, their defaults and their refusals", "[runtime][unit]") {
  const auto plain = scenario::parseScenario(kGood, "s.json", ".");
  REQUIRE(plain.isOk());
  CHECK(plain->checkpoint.every == 0);  // off
  const std::string alg = R"("step_size": 0.3}})";
  const auto withCheckpoint = [&](const std::string& c) {
    return with(alg, R"("step_size": 0.3}, "checkpoint": )" + c + "}");
  };
  const auto s = scenario::parseScenario(withCheckpoint(R"({"every": 10})"), "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  CHECK(s->checkpoint.every == 10);
  CHECK(s->checkpoint.keep == 2);
  const auto kept =
      scenario::parseScenario(withCheckpoint(R"({"every": 1, "keep": 5})"), "s.json", ".");
  REQUIRE(kept.isOk());
  CHECK(kept->checkpoint.keep == 5);
  CHECK_THAT(refusal(withCheckpoint(R"({})")),
             Contains("s.json: /checkpoint: missing required key \"every\""));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": 0})")),
             Contains("s.json: /checkpoint/every: must be between 1 and"));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": 5, "keep": 1})")),
             Contains("s.json: /checkpoint/keep: must be between 2 and 1000000, got 1"));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": 5, "dir": "x"})")),
             Contains("s.json: /checkpoint/dir: unknown key; expected one of every, keep"));
  CHECK_THAT(refusal(withCheckpoint(R"({"every": "5"})")),
             Contains("s.json: /checkpoint/every: expected an integer, got a string"));
  CHECK_THAT(refusal(withCheckpoint(R"(10)")),
             Contains("s.json: /checkpoint: expected an object, got an integer"));
  // A trainer's scenario (no problem) has nobody to write them.
  const std::string trainer = R"({"schema_version": 1, "nodes": 4, "topology": {"kind": "ring"},
      "algorithm": {"kind": "dsgd", "step_size": 0.1}, "checkpoint": {"every": 5}})";
  CHECK_THAT(refusal(trainer), Contains("s.json: /checkpoint: checkpoints are written by the peers"));
}

TEST_CASE("faults: drop, duplicate and reorder events", "[runtime][unit]") {
  const std::string alg = R"("step_size": 0.3}})";
  const auto withFaults = [&](const std::string& faults) {
    return with(alg, R"("step_size": 0.3}, "faults": )" + faults + "}");
  };
  const auto s = scenario::parseScenario(withFaults(R"({"on_peer_loss": "continue", "script": [
      {"drop": 0.01, "link": [1, 3], "from_round": 5, "to_round": 6},
      {"duplicate": 0.5}, {"reorder": 1, "from_round": 2, "link": [0, 1]}]})"),
                                         "s.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  REQUIRE(s->faults.script.size() == 3);
  // Sorted by first round: duplicate (0), reorder (2), drop (5).
  CHECK(s->faults.script[0].kind == engine::FaultEvent::Kind::kDuplicate);
  CHECK(s->faults.script[0].probability == 0.5);
  CHECK(s->faults.script[0].linkA == -1);
  CHECK(s->faults.script[0].toRound == 40);
  CHECK(s->faults.script[1].kind == engine::FaultEvent::Kind::kReorder);
  CHECK(s->faults.script[1].probability == 1.0);
  CHECK(s->faults.script[1].fromRound == 2);
  CHECK(s->faults.script[2].kind == engine::FaultEvent::Kind::kDrop);
  CHECK(s->faults.script[2].probability == 0.01);
  CHECK(s->faults.script[2].linkA == 1);
  CHECK(s->faults.script[2].linkB == 3);
  CHECK(s->faults.script[2].toRound == 6);
  CHECK(engine::FaultInjector::wanted(s->faults.script));

  // Exactly one kind per event; the message names them all.
  CHECK_THAT(refusal(withFaults(R"({"script": [{"drop": 0.5, "duplicate": 0.5}]})")),
             Contains("s.json: /faults/script/0: a fault event has exactly one of \"kill\", "
                      "\"corrupt\", \"delay_ms\", \"drop\", \"duplicate\" or \"reorder\""));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"link": [0, 1]}]})")),
             Contains("/faults/script/0: a fault event has exactly one of"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"kill": 1, "at_round": 2, "reorder": 0.5}]})")),
             Contains("/faults/script/0: a fault event has exactly one of"));
  // Probabilities in [0, 1].
  CHECK_THAT(refusal(withFaults(R"({"script": [{"drop": 1.5}]})")),
             Contains("s.json: /faults/script/0/drop: must be in [0, 1], got 1.5"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"duplicate": -0.1}]})")),
             Contains("/faults/script/0/duplicate: must be in [0, 1]"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"reorder": "often"}]})")),
             Contains("/faults/script/0/reorder: expected a number, got a string"));
  // Rounds and links as for the other link faults; no stray keys.
  CHECK_THAT(refusal(withFaults(R"({"script": [{"drop": 0.5, "from_round": 40}]})")),
             Contains("/faults/script/0/from_round: must be between 0 and 39"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"reorder": 0.5, "link": [0, 4]}]})")),
             Contains("/faults/script/0/link: expected [A, B]: two different ranks of 0..3"));
  CHECK_THAT(refusal(withFaults(R"({"script": [{"duplicate": 0.5, "at_round": 3}]})")),
             Contains("/faults/script/0/at_round: unknown key"));
}


// {"kind": KIND, "step_size": 0.1, MORE "codistillation": {KEYS}}
std::string codistilling(const std::string& keys, const std::string& more = "",
                         const std::string& kind = "dsgd") {
  return R"({"kind": ")" + kind + R"(", "step_size": 0.1, )" + more + R"("codistillation": {)" +
         keys + "}}";
}

TEST_CASE("codistillation: the keys, their defaults and their refusals", "[runtime][unit]") {
  const auto defaults = scenario::parseScenario(mlpScenario(codistilling("")), "s.json", ".");
  INFO(defaults.status().toString());
  REQUIRE(defaults.isOk());
  REQUIRE(defaults->algorithm.codistillation.has_value());
  const optim::CodistillationConfig& d = *defaults->algorithm.codistillation;
  CHECK(d.loss.alpha == 1.0);
  CHECK(d.loss.distance == optim::CodistillationSpec::Distance::kCrossEntropy);
  CHECK(d.period == 1);
  CHECK(d.burnIn == 0);
  const auto given = scenario::parseScenario(
      mlpScenario(codistilling(R"("alpha": 0.5, "distance": "kl", "period": 10, "burn_in": 100)"),
                  R"(, "compression": {"kind": "fp16"})"),
      "s.json", ".");
  INFO(given.status().toString());
  REQUIRE(given.isOk());
  const optim::CodistillationConfig& g = *given->algorithm.codistillation;
  CHECK(g.loss.alpha == 0.5);
  CHECK(g.loss.distance == optim::CodistillationSpec::Distance::kKl);
  CHECK(g.period == 10);
  CHECK(g.burnIn == 100);
  const auto plain =
      scenario::parseScenario(mlpScenario(R"({"kind": "dsgd", "step_size": 0.1})"), "s.json", ".");
  REQUIRE(plain.isOk());
  CHECK_FALSE(plain->algorithm.codistillation.has_value());

  const std::string co = R"("period": 4)";
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("period": 0)"))),
             Contains("/algorithm/codistillation/period: must be between 1"));
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("alpha": -1)"))),
             Contains("/algorithm/codistillation/alpha"));
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("distance": "mse")"))),
             Contains("/algorithm/codistillation/distance"));
  CHECK_THAT(refusal(mlpScenario(codistilling(R"("tau": 3)"))),
             Contains("/algorithm/codistillation"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co, "", "choco"))),
             Contains("s.json: /algorithm/codistillation: codistillation replaces dsgd's "
                      "averaging"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co, R"("combine": "adasum", )"))),
             Contains("/algorithm/combine: codistillation never combines"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co, R"("gamma": 0.5, )"))),
             Contains("/algorithm/gamma: codistillation never averages models"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co), "", R"({"kind": "full"})")),
             Contains("/problem/estimator/batch: codistillation compares predictions on the "
                      "node's minibatch"));
  CHECK_THAT(refusal(with("\"kind\": \"exact_diffusion\", \"step_size\": 0.3",
                          "\"kind\": \"dsgd\", \"step_size\": 0.3, \"codistillation\": {}")),
             Contains("/problem/kind: codistillation compares a classifier's predictions"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co), R"(, "compression": {"kind": "topk",
                                     "ratio": 0.1, "error_feedback": true})")),
             Contains("/compression/error_feedback: codistillation sends whole models"));
  CHECK_THAT(refusal(mlpScenario(codistilling(co), R"(, "faults": {"on_peer_loss": "continue"})")),
             Contains("/faults/on_peer_loss: codistillation does not restart"));
}


TEST_CASE("transport: DiLoCo's overlap sends eagerly, every other run keeps UCX's rendezvous",
          "[runtime][unit]") {
  const auto eager = [](const std::string& algorithm) {
    const auto s = scenario::parseScenario(
        with(R"("algorithm": {"kind": "exact_diffusion", "step_size": 0.3}})",
             R"("algorithm": )" + algorithm + "}"),
        "s.json", ".");
    INFO(s.status().toString());
    REQUIRE(s.isOk());
    const auto no = scenario::networkOptions(*s, 0, {});
    INFO(no.status().toString());
    REQUIRE(no.isOk());
    return no->eagerSends;
  };
  CHECK(eager(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 4, "overlap": true})"));
  CHECK_FALSE(eager(R"({"kind": "diloco", "step_size": 0.1, "inner_steps": 4})"));
  CHECK_FALSE(eager(R"({"kind": "dsgd", "step_size": 0.1})"));
}

TEST_CASE("transport: busy_poll, its default and its refusals", "[runtime][unit]") {
  const std::string alg = R"("step_size": 0.3}})";
  const auto withTransport = [&](const std::string& t) {
    return with(alg, R"("step_size": 0.3}, "transport": )" + t + "}");
  };
  using BusyPoll = scenario::TransportConfig::BusyPoll;
  const auto plain = scenario::parseScenario(withTransport(R"({"kind": "ucx"})"), "s.json", ".");
  INFO(plain.status().toString());
  REQUIRE(plain.isOk());
  CHECK(plain->transport.busyPoll == BusyPoll::kAuto);
  CHECK(plain->transport.spinUs == 50);
  for (const auto& [text, want] : {std::pair{"auto", BusyPoll::kAuto}, std::pair{"on", BusyPoll::kOn},
                                   std::pair{"off", BusyPoll::kOff}}) {
    const auto s = scenario::parseScenario(
        withTransport(R"({"kind": "ucx", "busy_poll": ")" + std::string(text) + "\"}"), "s.json",
        ".");
    REQUIRE(s.isOk());
    CHECK(s->transport.busyPoll == want);
  }
  CHECK_THAT(refusal(withTransport(R"({"kind": "ucx", "busy_poll": "always"})")),
             Contains("s.json: /transport/busy_poll:"));
  CHECK_THAT(refusal(withTransport(R"({"kind": "ucx", "busy_poll": true})")),
             Contains("s.json: /transport/busy_poll:"));
}

}  // namespace
}  // namespace starling::runtime

