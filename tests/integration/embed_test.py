#!/usr/bin/env python3
"""The C++ front door as a user meets it (issue 11, part 1, 3 and 6).

`meson install` into a temporary folder; examples/cpp built with nothing but `pkg-config starling`
pointing there; 4 of its trainers run by `node-launcher run SCENARIO -- trainer`; their models
checked against the exact central solution (rational arithmetic, from the same data) and against
`node-launcher simulate` of the built-in least-squares scenario on the same data.

usage: embed_test.py BUILD_DIR SOURCE_DIR NODE_LAUNCHER
"""
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction

STEPS = 300
NODES = 4


def run(cmd, env=None, check=True, **kw):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def expect(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def exact_solution(libsvm):
    """argmin sum_j (a_j^T x - b_j)^2 over every sample, in exact rational arithmetic."""
    rows = []
    for line in open(libsvm):
        parts = line.split()
        b = Fraction(parts[0])
        a = {int(k): Fraction(v) for k, v in (p.split(":") for p in parts[1:])}
        rows.append((a, b))
    d = max(max(a) for a, _ in rows)
    m = [[Fraction(0)] * d for _ in range(d)]
    v = [Fraction(0)] * d
    for a, b in rows:
        for p, ap in a.items():
            v[p - 1] += ap * b
            for q, aq in a.items():
                m[p - 1][q - 1] += ap * aq
    for c in range(d):  # Gauss-Jordan, exact
        piv = next(r for r in range(c, d) if m[r][c] != 0)
        m[c], m[piv] = m[piv], m[c]
        v[c], v[piv] = v[piv], v[c]
        for r in range(d):
            if r != c and m[r][c] != 0:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
                v[r] -= f * v[c]
    return [float(v[c] / m[c][c]) for c in range(d)]


def rel(x, ref):
    num = sum((a - b) ** 2 for a, b in zip(x, ref))
    den = sum(b * b for b in ref)
    return (num / den) ** 0.5


def files_under(folder):
    """Every file below `folder`, hidden folders too (glob's ** skips them, and an install under
    $HOME/.local lies in one)."""
    return [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names]


def main():
    build, source, launcher = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="starling-embed-")
    # A hidden folder on the way, as in an install under $HOME/.local.
    dest = os.path.join(tmp, ".local-inst")

    # 1. Install: the library, the public headers and starling.pc, nothing internal.
    run(["meson", "install", "-C", build, "--no-rebuild", "--tags", "runtime,devel",
         "--destdir", dest])
    pcs = [p for p in files_under(dest) if p.endswith(os.path.join("pkgconfig", "starling.pc"))]
    expect(len(pcs) == 1, "meson install wrote one starling.pc")
    headers = sorted(os.path.relpath(p, dest) for p in files_under(dest) if p.endswith(".h"))
    expect([os.path.basename(h) for h in headers] == ["peer.h", "status.h"] and
           all(os.path.basename(os.path.dirname(h)) == "starling" for h in headers),
           f"only include/starling/peer.h and status.h are installed ({headers})")

    # 2. Build examples/cpp with pkg-config starling and nothing else.
    env = dict(os.environ)
    env["PKG_CONFIG_LIBDIR"] = os.path.dirname(pcs[0])  # no other .pc file is visible
    env.pop("PKG_CONFIG_PATH", None)
    env["PKG_CONFIG_SYSROOT_DIR"] = dest
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    run(["make", "-s", "-C", os.path.join(source, "examples", "cpp"), "OUT=" + bindir], env=env)
    trainer = os.path.join(bindir, "trainer")
    expect(os.access(trainer, os.X_OK), "examples/cpp builds against the installed package")
    # An internal header is out of reach of a trainer built that way.
    probe = os.path.join(tmp, "probe.cc")
    with open(probe, "w") as f:
        f.write('#include "engine/node.h"\nint main() { return 0; }\n')
    cflags = run(["pkg-config", "--cflags", "starling"], env=env).stdout.split()
    p = run(["c++", "-std=c++20", "-fsyntax-only", probe] + cflags, env=env, check=False,
            cwd=tmp)
    expect(p.returncode != 0 and "engine/node.h" in p.stderr,
           "an internal header does not compile against the installed package")

    # 3. Four trainers under the launcher.
    scenario = os.path.join(source, "examples", "cpp", "scenario.json")
    out = os.path.join(tmp, "run")
    p = run([launcher, "run", scenario, "--out", out, "--", trainer, "--steps", str(STEPS)],
            timeout=300)
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    expect([l["round"] for l in lines] == list(range(STEPS + 1)),
           "metrics.jsonl has every round 0..%d" % STEPS)
    expect(all("loss" in l and "dist_to_central" in l for l in lines[1:]),
           "the trainers' own metrics are merged into metrics.jsonl")
    expect(lines[-1]["consensus_distance"] < 1e-20 < lines[1]["consensus_distance"],
           "consensus distance falls to %.1e" % lines[-1]["consensus_distance"])
    summary = json.load(open(os.path.join(out, "summary.json")))
    expect(summary["rounds"] == STEPS and len(summary["x_mean"]) == 8,
           "summary.json: %d rounds and x_mean" % STEPS)

    # 4. The independent reference: the exact central solution of the same data.
    data = os.path.join(tmp, "data.svm")
    run([trainer, "--write-libsvm", data, str(NODES)])
    xstar = exact_solution(data)
    for r in range(NODES):
        x = [float(v) for v in open(os.path.join(out, f"model-rank-{r}.txt"))]
        expect(rel(x, xstar) < 1e-8, f"rank {r} is {rel(x, xstar):.1e} from the central solution")

    # 5. The same problem as a built-in scenario, simulated.
    builtin = {
        "schema_version": 1, "name": "cpp-example-builtin", "nodes": NODES, "seed": 1,
        "rounds": STEPS, "log_every": STEPS, "topology": {"kind": "ring"},
        "problem": {"kind": "least_squares", "l2": 0, "partition": "contiguous",
                    "data": {"format": "libsvm", "path": data}},
        "algorithm": json.load(open(scenario))["algorithm"],
    }
    path = os.path.join(tmp, "builtin.json")
    json.dump(builtin, open(path, "w"))
    run([launcher, "simulate", path, "--out", os.path.join(tmp, "sim")], timeout=300)
    sim = json.load(open(os.path.join(tmp, "sim", "summary.json")))
    expect(sim["rel_error"] < 1e-8 and rel(sim["x_mean"], xstar) < 1e-8,
           "simulate of the built-in scenario reaches the same optimum")
    expect(rel(summary["x_mean"], sim["x_mean"]) < 1e-8,
           "the trainers' mean model agrees with simulate's to %.1e"
           % rel(summary["x_mean"], sim["x_mean"]))

    # 6. A trainer that fails is named, with its last lines; the others are stopped.
    failing = ["sh", "-c", 'if [ "$STARLING_RANK" = 2 ]; then echo "rank two gives up" >&2; '
               'exit 3; fi; exec "$0" "$@"', trainer, "--steps", "100000"]
    p = run([launcher, "run", scenario, "--out", os.path.join(tmp, "fail"), "--"] + failing,
            check=False, timeout=300)
    expect(p.returncode == 1 and "peer 2" in p.stderr and "rank two gives up" in p.stderr,
           "a failing trainer is named with its last lines")

    # 7. Without a trainer such a scenario cannot run.
    p = run([launcher, "simulate", scenario, "--out", os.path.join(tmp, "nosim")], check=False)
    expect(p.returncode == 2 and 'no "problem"' in p.stderr and "-- COMMAND" in p.stderr,
           "simulate of a scenario without a problem says it needs a trainer (exit 2)")
    print("all passed")


if __name__ == "__main__":
    main()
