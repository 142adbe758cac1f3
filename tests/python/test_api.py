"""starling.Peer from Python (issue 11): step and mix on numpy arrays and torch tensors update
them in place (same data pointer), wrong arrays raise clear errors, Starling's errors raise
starling.Error, and mix() lets other Python threads run while it waits. Two real peer processes
under `node-launcher run SCENARIO -- python3 ...` (tests/python/api_worker.py)."""

import os
import sys

import harness

harness.require("numpy", "torch", "starling")


def main():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_worker.py")
    with harness.TempDir("python-api") as tmp:
        scenario = harness.embedded_scenario(tmp, "python-api", 2,
                                             extra={"topology": {"kind": "complete"}})
        # The large mix's Peers go over shared memory (frames in segments the neighbour maps).
        shm = harness.embedded_scenario(tmp, "python-api-shm", 2,
                                        extra={"topology": {"kind": "complete"},
                                               "transport": {"kind": "ucx", "tls": "shm"}})
        # Seven more Peers per rank, each a run of its own on these ports (api_worker.py).
        ports = harness.free_ports(14)
        pairs = ";".join(f"{ports[i]},{ports[i + 1]}" for i in range(0, 14, 2))
        rc, output = harness.run_launcher(scenario, os.path.join(tmp, "run"),
                                          [sys.executable, worker],
                                          env={"STARLING_TEST_PORTS": pairs,
                                               "STARLING_SHM_SCENARIO": shm})
        print(output)
        harness.check(rc == 0, f"node-launcher exited {rc}")
        for rank in range(2):
            harness.check(os.path.exists(os.path.join(tmp, "run", f"api-rank-{rank}.passed")),
                          f"rank {rank} did not finish its checks")
    print("python api: 2 peers passed")


if __name__ == "__main__":
    main()
