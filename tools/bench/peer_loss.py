#!/usr/bin/env python3
"""What a lost peer costs: time from its death to the survivors' first round at the new
membership, and the rounds until the error is back at its level before the fault.

Runs `node-launcher run` of exact diffusion (logistic regression, 8 peers on a ring, UCX over
loopback) with faults.on_peer_loss "continue" and rank 3 SIGKILLed by the fault script at round
K, logging every round, and reads the merged metrics and membership.jsonl:
  - death to new membership: wall_s of the change round minus wall_s of round K (the last round
    the killed peer finished), i.e. detection (its sockets close; the transport fails receives
    500 ms later) plus the agreement rounds;
  - recovery: rounds after the change until rel_error (now against the survivors' optimum) is
    back at or below its value at round K.
With --restart (faults.restart) the killed peer comes back (docs/algorithms.md §19), and it also
reports the round it rejoined at, the wall time from its death to that round, and the rounds after
the return until rel_error (against everyone's optimum again) is back at its value at round K.

    python3 tools/bench/peer_loss.py [--launcher build-release/tools/node-launcher] [--kill-at 300]
                                     [--nodes 16] [--restart]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", default=os.path.join(ROOT, "build-release/tools/node-launcher"))
    ap.add_argument("--kill-at", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--restart", action="store_true", help="faults.restart: the peer rejoins")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="starling-peer-loss-") as tmp:
        scenario = {
            "schema_version": 1, "name": "peer-loss-bench", "nodes": args.nodes, "seed": 7,
            "rounds": args.rounds, "log_every": 1, "topology": {"kind": "ring"},
            "problem": {"kind": "logistic", "l2": 0.01, "partition": "contiguous",
                        "data": {"synthetic": {"samples": 4000, "features": 50,
                                               "heterogeneity": 1.0}}},
            "algorithm": {"kind": "exact_diffusion", "step_size": 0.5},
            "transport": {"kind": "ucx"},
            "faults": {"on_peer_loss": "continue", "restart": args.restart,
                       "script": [{"kill": 3, "at_round": args.kill_at}]},
        }
        path = os.path.join(tmp, "s.json")
        with open(path, "w") as f:
            json.dump(scenario, f)
        out = os.path.join(tmp, "run")
        r = subprocess.run([args.launcher, "run", path, "--out", out], capture_output=True,
                           text=True)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        metrics = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        by_round = {m["round"]: m for m in metrics}
        change, rejoined = None, None
        for line in open(os.path.join(out, "membership.jsonl")):
            j = json.loads(line)
            if "membership" in j and j["membership"].get("joined"):
                rejoined = j["membership"]["round"]
            elif "membership" in j:
                change = j["membership"]["round"]
        k = args.kill_at
        before = by_round[k]["rel_error"]
        back = next((m["round"] for m in metrics
                     if m["round"] >= change and m["rel_error"] <= before and
                     (rejoined is None or m["round"] < rejoined)), None)
        per_round = (by_round[k]["wall_s"] - by_round[0]["wall_s"]) / k
        print(f"| peers | killed at | change at round | death to new membership | "
              f"normal round | rel_error at kill | back at that level |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {args.nodes} | {k} | {change} | "
              f"{(by_round[change]['wall_s'] - by_round[k]['wall_s']) * 1e3:.0f} ms | "
              f"{per_round * 1e3:.2f} ms | {before:.2e} | "
              f"{'round ' + str(back) + ' (' + str(back - change) + ' rounds after the change)' if back else 'not before the return' if rejoined else 'not within the run'} |")
        if rejoined is not None:
            again = next((m["round"] for m in metrics
                          if m["round"] >= rejoined and m["rel_error"] <= before), None)
            print()
            print("| rejoined at round | death to return | rel_error at return | back at the level at kill |")
            print("|---:|---:|---:|---:|")
            print(f"| {rejoined} | "
                  f"{(by_round[rejoined]['wall_s'] - by_round[k]['wall_s']) * 1e3:.0f} ms | "
                  f"{by_round[rejoined]['rel_error']:.2e} | "
                  f"{'round ' + str(again) + ' (' + str(again - rejoined) + ' rounds after the return)' if again else 'not within the run'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
