"""An exception in the user's program: the launcher stops every rank, exits 1 and names the
rank that failed, with the Python traceback's last line (issue 11)."""

import os
import re
import sys

import harness

harness.require("numpy", "starling")


def main():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fail_worker.py")
    with harness.TempDir("python-failure") as tmp:
        scenario = harness.embedded_scenario(tmp, "python-failure", 4)
        rc, output = harness.run_launcher(scenario, os.path.join(tmp, "run"),
                                          [sys.executable, worker], timeout=120)
        print(output)
        harness.check(rc == 1, f"node-launcher exited {rc}, expected 1")
        harness.check(re.search(r"run failed: .*\b(peer|rank) 1\b", output),
                      "the launcher's failure line does not name rank 1")
        harness.check("user code failed on rank 1 at step 3" in output,
                      "the launcher's report does not show the exception")
    print("python failure: the launcher named rank 1")


if __name__ == "__main__":
    main()
