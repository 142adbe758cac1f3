"""What a trainer run shows and merges (tests/python/outputs_worker.py under `node-launcher run
SCENARIO -- python3 ...`, real processes over UCX):

1. Trainers that log at different rounds (rank 0 once, at round 7; rank 2 at every round; all at
   every log_every): metrics.jsonl takes each rank's log as far as it goes (a round one rank
   skipped is a line with a gap, not the end of the merge: before, the merge stopped at round 7),
   and summary.json says the last round each rank reached.
2. consensus_distance of mix() trainers is measured on the mixed models at every round: two
   ranks of a complete graph hold the same average after each mix, so it is 0 at each round,
   though each changes its model before the next mix (measuring then would give 1/4 or more).
3. A restarted trainer that exits with a status of its own is a failure, named with its last
   lines, although the loss policy is "continue".
"""

import json
import os
import sys

import harness

harness.require("numpy", "starling")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outputs_worker.py")


def metrics(out):
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def case_gaps(tmp):
    scenario = harness.embedded_scenario(tmp, "gaps", 3, extra={"log_every": 5,
                                                                "topology": {"kind": "complete"}})
    out = os.path.join(tmp, "gaps")
    rc, output = harness.run_launcher(scenario, out, [sys.executable, WORKER],
                                      env={"STARLING_TEST_CASE": "gaps"})
    print(output)
    harness.check(rc == 0, f"node-launcher exited {rc}")
    lines = {m["round"]: m for m in metrics(out)}
    # Rounds 0, 5, 10, 15, 20 (log_every) and every round of rank 2's: 0 to 20, none cut short.
    harness.check(sorted(lines) == list(range(21)), f"merged rounds {sorted(lines)}")
    # Round 7: ranks 0 and 2 logged it (rank 1 did not): a gap, with both losses averaged.
    harness.check(lines[7].get("logged_ranks") == 2 and lines[7]["loss"] == 7.0,
                  f"round 7: {lines[7]}")
    harness.check(lines[7]["consensus_distance"] is None, f"round 7: {lines[7]}")
    # Round 13: rank 2 alone.
    harness.check(lines[13].get("logged_ranks") == 1 and lines[13]["loss"] == 13.0,
                  f"round 13: {lines[13]}")
    # Round 10: all three logged it (log_every), with rank 2's loss the only one.
    harness.check("logged_ranks" not in lines[10] and lines[10]["loss"] == 10.0 and
                  lines[10]["consensus_distance"] is not None, f"round 10: {lines[10]}")
    summary = json.load(open(os.path.join(out, "summary.json")))
    harness.check(summary["rounds"] == 20, f"summary rounds {summary['rounds']}")
    harness.check(summary["last_round_by_rank"] == {"0": 20, "1": 20, "2": 20},
                  f"last_round_by_rank {summary['last_round_by_rank']}")
    harness.check("20 rounds on 3 trainer processes" in output and "stopped short" not in output,
                  "the final line")
    # Each rank's output is streamed with its rank.
    harness.check("[rank 1] rank 1: done after 20 rounds" in output, "rank 1's output")


def case_consensus(tmp):
    scenario = harness.embedded_scenario(tmp, "consensus", 2,
                                         extra={"log_every": 1, "topology": {"kind": "complete"}})
    out = os.path.join(tmp, "consensus")
    rc, output = harness.run_launcher(scenario, out, [sys.executable, WORKER],
                                      env={"STARLING_TEST_CASE": "consensus"})
    print(output)
    harness.check(rc == 0, f"node-launcher exited {rc}")
    lines = metrics(out)
    harness.check([m["round"] for m in lines] == list(range(21)), "every round merged")
    # Round 0: the models the trainers start from (1 and 2: 1/2 ||x_i - mean||^2 summed over
    # 8 coordinates = 8 * 0.25). Each later round: the mixed models, identical.
    harness.check(abs(lines[0]["consensus_distance"] - 2.0) < 1e-12, f"round 0: {lines[0]}")
    for m in lines[1:]:
        harness.check(m["consensus_distance"] == 0.0, f"round {m['round']}: {m}")


def case_restart(tmp):
    scenario = harness.embedded_scenario(
        tmp, "restart", 3, algorithm={"kind": "dsgd", "step_size": 0.1},
        extra={"faults": {"on_peer_loss": "continue", "restart": True,
                          "script": [{"kill": 1, "at_round": 5}]},
               "transport": {"kind": "ucx", "round_timeout_ms": 5000}})
    out = os.path.join(tmp, "restart")
    rc, output = harness.run_launcher(scenario, out, [sys.executable, WORKER],
                                      env={"STARLING_TEST_CASE": "restart"})
    print(output)
    harness.check(rc == 1, f"node-launcher exited {rc}, expected 1 (a failed trainer)")
    harness.check("peer 1 exited with status 3" in output, "the failure is named")
    harness.check("back after a restart, and crashing on purpose" in output, "its last lines")
    harness.check("carry on without it" in output.split("restarted")[0], "the kill was a loss")


def main():
    with harness.TempDir("trainer-outputs") as tmp:
        case_gaps(tmp)
        case_consensus(tmp)
        case_restart(tmp)
    print("trainer outputs: 3 cases passed")


if __name__ == "__main__":
    main()
