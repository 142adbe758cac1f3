"""The shipped example, examples/pytorch/train.py, with faults.restart (issue 33, item 17): 4 ranks
on a ring, the fault script kills rank 2 at round 20, the launcher starts it again, and the example's
`optimizer.restore()` takes a neighbour's model and the round the run is at. Checked: the launcher
exits 0; membership.jsonl has exactly the departure and the return of rank 2; every rank, the
returned one too, stops at the same last step (400) and logs it; metrics.jsonl ends at round 400
with no other loss; the four final models agree (relative consensus distance below 1e-2) and
each reaches 78% test accuracy.

Before the example restored, the returned rank started its loop from step 0 and trained on past
the others' last step: it reached round 458 alone and "lost" all three at round 400."""

import json
import os
import sys

import harness

harness.require("numpy", "torch", "starling")

import numpy as np  # noqa: E402
import torch  # noqa: E402

NODES = 4
STEPS = 400
KILLED = 2
MIN_ACCURACY = 0.78


def main():
    root = harness.source_root()
    train_py = os.path.join(root, "examples", "pytorch", "train.py")
    sys.path.insert(0, os.path.dirname(train_py))
    sys.path.insert(0, os.path.join(root, "examples", "data"))
    import train
    from idx import load_fashion_mnist

    with harness.TempDir("python-torch-restart") as tmp:
        scenario = harness.embedded_scenario(tmp, "python-torch-restart", NODES, extra={
            "log_every": 25,
            "transport": {"kind": "ucx", "round_timeout_ms": 5000},
            "faults": {"on_peer_loss": "continue", "restart": True,
                       "script": [{"kill": KILLED, "at_round": 20}]}})
        saved = os.path.join(tmp, "models")
        out = os.path.join(tmp, "run")
        rc, output = harness.run_launcher(scenario, out, [
            sys.executable, train_py, "--steps", str(STEPS), "--epochs", "100",
            "--train-samples", str(4000 * NODES), "--test-samples", "500",
            "--save", saved, "--save-every", "100", "--log-every", "25"], timeout=300)
        print(output)
        harness.check(rc == 0, f"node-launcher exited {rc}")
        harness.check(f"peer {KILLED} restarted" in output, "the launcher did not restart rank 2")
        harness.check(f"rank {KILLED}: rejoined the run at step" in output,
                      "the restarted example did not say where it rejoined")
        news = [json.loads(l) for l in open(os.path.join(out, "membership.jsonl"))]
        changes = [n["membership"] for n in news if "membership" in n]
        harness.check(len(changes) == 2 and changes[0]["left"] == [KILLED] and
                      changes[1]["left"] == [] and changes[1].get("joined") == [KILLED],
                      f"expected rank 2 out and back, nothing else: {news}")
        for r in range(NODES):
            harness.check(f"rank {r}: {STEPS} steps" in output,
                          f"rank {r} did not stop at step {STEPS}")
            rounds = [json.loads(l).get("round") for l in
                      open(os.path.join(out, "peers", f"rank-{r}.jsonl")) if '"round"' in l]
            harness.check(max(r_ for r_ in rounds if r_ is not None) == STEPS,
                          f"rank {r}'s log ends at round {max(x for x in rounds if x is not None)}")
        metrics = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        harness.check(metrics[-1]["round"] == STEPS,
                      f"metrics.jsonl ends at round {metrics[-1]['round']}, expected {STEPS}")
        summary = json.load(open(os.path.join(out, "summary.json")))
        harness.check(summary["rounds"] == STEPS, f"summary.json: {summary['rounds']} rounds")
        harness.check(all(v == STEPS for v in summary.get("last_round_by_rank", {}).values()),
                      f"summary.json: last rounds {summary.get('last_round_by_rank')}")

        _, _, test_x, test_y = load_fashion_mnist()
        test_x, test_y = torch.from_numpy(test_x[:2000]), torch.from_numpy(test_y[:2000])
        model = train.make_model("mlp")
        models = [np.load(os.path.join(saved, f"rank-{r}-step-{STEPS}.npy")) for r in range(NODES)]
        mean = np.mean(models, axis=0)
        consensus = float(np.mean([np.sum((m - mean) ** 2) for m in models]) / np.sum(mean ** 2))
        accuracies = []
        for m in models:
            torch.nn.utils.vector_to_parameters(torch.from_numpy(m), model.parameters())
            accuracies.append(train.accuracy(model, test_x, test_y))
        print(f"final relative consensus distance {consensus:.3g}; test accuracy "
              f"{[round(a, 4) for a in accuracies]}")
        harness.check(consensus < 1e-2, f"final relative consensus distance {consensus:.3g}")
        harness.check(min(accuracies) >= MIN_ACCURACY, f"accuracy below {MIN_ACCURACY}: {accuracies}")
    print("python torch restart: the restarted example rejoined and stopped with the others")


if __name__ == "__main__":
    main()
