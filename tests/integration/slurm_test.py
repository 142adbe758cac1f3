#!/usr/bin/env python3
"""A real Slurm (Debian's slurm-wlm 22.05) as a four-node cluster on this machine: each node a
network-namespace host (tools/netns.py) with its own address in 198.18.0.0/24, its own host name
and its own slurmd; slurmctld on node0; a private munged. `srun` from node0 launches
`node-launcher peer` with no addresses anywhere: each peer finds every rank's host from the step's
environment (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION). Block, cyclic,
plane and uneven layouts must all equal `simulate` bit for bit.

A user's trainer (tests/integration/slurm_trainer.py, starling.Peer.from_env) runs under srun the
same way, with nothing but STARLING_SCENARIO set.

Usage: slurm_test.py NODE_LAUNCHER SOURCE_ROOT [PYTHONPATH_OF_THE_BUILD]
Exits 77 (skipped) with the reason when Slurm, munge or network namespaces are missing.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LAUNCHER = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(sys.argv[2])
PYTHON_DIR = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
sys.path.insert(0, os.path.join(ROOT, "tools"))
import netns  # noqa: E402

NODES = 4
DEADLINE_S = 120
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def cgroup_setup():
    """What each node's mount namespace needs for slurmd's cgroup plugin. `ip netns exec` mounts a
    fresh /sys, which has no cgroup file systems: mount the hierarchies this machine uses again
    (cgroup v1 controllers, or the v2 tree), and tell Slurm which version it is."""
    lines = open("/proc/self/cgroup").read().split()
    v1 = []
    for line in lines:
        _, controllers, _ = line.split(":", 2)
        for c in controllers.split(","):
            if c and not c.startswith("name="):
                v1.append(c)
    if v1:
        mounts = "mount -t tmpfs none /sys/fs/cgroup; " + " ".join(
            f"mkdir -p /sys/fs/cgroup/{c}; mount -t cgroup -o {c} none /sys/fs/cgroup/{c};"
            for c in sorted(set(v1)))
        return mounts, "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
    return ("mount -t cgroup2 none /sys/fs/cgroup;",
            "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nCgroupMountpoint=/sys/fs/cgroup\n")


def slurm_conf(work, hosts):
    cpus = 2  # every node advertises 2 CPUs: 8 tasks on 4 nodes
    return f"""ClusterName=starlingtest
SlurmctldHost={hosts.hostname(0)}({hosts.address(0)})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={work}/munge/sock
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool/%n
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd-%n.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={hosts.hostname(0)[:-1]}[0-{NODES - 1}] NodeAddr=198.18.0.[1-{NODES}] CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={hosts.hostname(0)[:-1]}[0-{NODES - 1}] Default=YES MaxTime=10 State=UP OverSubscribe=YES
"""


class Cluster:
    def __init__(self, hosts, work):
        self.hosts, self.work = hosts, work
        self.env = dict(os.environ, SLURM_CONF=os.path.join(work, "slurm.conf"))
        self.procs = []
        self.munged_pid = None

    def start(self):
        w = self.work
        for d in ["munge", "state"] + [f"spool/{self.hosts.hostname(i)}" for i in range(NODES)]:
            os.makedirs(os.path.join(w, d), mode=0o700, exist_ok=True)
        key = os.path.join(w, "munge", "key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        subprocess.run(["munged", "--force", f"--socket={w}/munge/sock", f"--key-file={key}",
                        f"--pid-file={w}/munge/pid", f"--log-file={w}/munge/log",
                        f"--seed-file={w}/munge/seed"], check=True, timeout=30)
        self.munged_pid = int(open(f"{w}/munge/pid").read())
        mounts, cgroup_conf = cgroup_setup()
        with open(os.path.join(w, "cgroup.conf"), "w") as f:
            f.write(cgroup_conf)
        with open(os.path.join(w, "slurm.conf"), "w") as f:
            f.write(slurm_conf(w, self.hosts))
        # Each daemon in its host's network namespace, with the node's name as its host name (a
        # UTS namespace) and its own mounts (the cgroup hierarchies).
        def daemon(i, cmd, log):
            script = f"hostname {self.hosts.hostname(i)}; {mounts} exec {cmd}"
            self.procs.append(subprocess.Popen(
                [*self.hosts.exec_args(i), "unshare", "--uts", "--mount", "sh", "-c", script],
                env=self.env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
        daemon(0, "slurmctld -D -i", os.path.join(w, "slurmctld.out"))
        for i in range(NODES):
            daemon(i, f"slurmd -D -N {self.hosts.hostname(i)}", os.path.join(w, f"slurmd{i}.out"))
        end = time.monotonic() + 60
        state = ""
        while time.monotonic() < end:
            r = subprocess.run([*self.hosts.exec_args(0), "sinfo", "-h", "-o", "%T %D"],
                               env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=30)
            state = r.stdout.strip()
            if state == f"idle {NODES}":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the cluster did not come up in 60 s (sinfo: {state!r}); logs in {w}")

    def srun(self, args, log, env=None):
        with open(log, "w") as f:
            return subprocess.run([*self.hosts.exec_args(0), "srun", *args],
                                  env=dict(self.env, **(env or {})),
                                  stdout=f, stderr=subprocess.STDOUT, timeout=DEADLINE_S).returncode

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.munged_pid:
            try:
                os.kill(self.munged_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def scenario(name, nodes, base_port):
    return {
        "schema_version": 1, "name": name, "nodes": nodes, "seed": 3, "rounds": 200,
        "log_every": 20, "precision": "float64", "topology": {"kind": "ring"},
        "problem": {"kind": "logistic", "l2": 0.05,
                    "data": {"synthetic": {"samples": 480, "features": 12, "heterogeneity": 1.0}}},
        "algorithm": {"kind": "exact_diffusion", "step_size": 0.5},
        "transport": {"kind": "ucx", "tls": "tcp", "connect_timeout_ms": 20000},
        "peers": {"base_port": base_port},
    }


def metrics(path):
    rows = []
    for line in open(path):
        j = json.loads(line)
        j.pop("wall_s", None)
        rows.append(j)
    return rows


def run_case(cluster, work, name, nodes, srun_args, expect_hosts):
    d = os.path.join(work, name)
    os.makedirs(d)
    file = os.path.join(d, "s.json")
    with open(file, "w") as f:
        json.dump(scenario(name, nodes, 29400 + 20 * len(os.listdir(work))), f)
    out = os.path.join(d, "out")
    # Each task first says where Slurm put it ("where RANK NODE"), in the same step: another
    # step may place the tasks of a plane or overcommitted distribution differently.
    rc = cluster.srun([*srun_args, "-n", str(nodes), "sh", "-c",
                       'echo "where $SLURM_PROCID $SLURMD_NODENAME"; exec "$0" "$@"',
                       LAUNCHER, "peer", file, "--out", out],
                      os.path.join(d, "srun.log"))
    text = open(os.path.join(d, "srun.log")).read()
    if rc != 0:
        print(text[-3000:])
    check(rc == 0, f"{name}: srun {' '.join(srun_args)} -n {nodes} node-launcher peer exits 0")
    hosts = {}
    for line in text.splitlines():
        if "listening on " in line:
            rank = int(line.split("node-launcher peer ")[1].split(":")[0])
            hosts[rank] = line.split("listening on ")[1].split(":")[0]
    got = [hosts.get(r) for r in range(nodes)]
    # Where Slurm really put each task, as the tasks themselves said.
    truth = dict(line.split()[1:] for line in text.splitlines()
                 if len(line.split()) == 3 and line.split()[0] == "where"
                 and line.split()[1].isdigit())
    truth = [truth.get(str(r)) for r in range(nodes)]
    check(got == truth, f"{name}: ranks listen on {got}, where Slurm ran them")
    if expect_hosts is not None:
        check(got == expect_hosts, f"{name}: the layout is the documented one {expect_hosts}")
    check(text.count("addresses from the Slurm step") == nodes,
          f"{name}: every peer took its addresses from the Slurm step")
    m = subprocess.run([LAUNCHER, "merge", file, "--out", out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=DEADLINE_S)
    check(m.returncode == 0, f"{name}: merge exits 0 {m.stdout.strip()[-300:]}")
    sim = os.path.join(d, "sim")
    s = subprocess.run([LAUNCHER, "simulate", file, "--out", sim], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=DEADLINE_S)
    if m.returncode == 0 and s.returncode == 0:
        a, b = metrics(os.path.join(out, "metrics.jsonl")), metrics(os.path.join(sim, "metrics.jsonl"))
        check(a == b and len(a) == 11, f"{name}: {len(a)} merged rows equal simulate's bit for bit")


def run_trainer(cluster, work):
    probe = subprocess.run(["/usr/bin/python3", "-c", "import numpy, starling"],
                           env=dict(os.environ, PYTHONPATH=PYTHON_DIR or ""),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if PYTHON_DIR is None or probe.returncode != 0:
        print(f"SKIP trainer: no starling module with numpy ({probe.stdout.strip()[-200:]})")
        return
    d = os.path.join(work, "trainer")
    os.makedirs(d)
    file = os.path.join(d, "s.json")
    s = scenario("trainer", 4, 29370)
    del s["problem"], s["rounds"]
    s["topology"] = {"kind": "complete", "weights": "metropolis"}
    s["algorithm"] = {"kind": "dsgd", "step_size": 0.1}
    with open(file, "w") as f:
        json.dump(s, f)
    log = os.path.join(d, "srun.log")
    rc = cluster.srun(["-N", "4", "-n", "4", "/usr/bin/python3",
                       os.path.join(ROOT, "tests", "integration", "slurm_trainer.py")], log,
                      env={"PYTHONPATH": PYTHON_DIR, "STARLING_SCENARIO": file,
                           "STARLING_OUT": os.path.join(d, "out")})
    text = open(log).read()
    if rc != 0:
        print(text[-3000:])
    check(rc == 0 and text.count("mixed to 2.5") == 4,
          "trainer: 4 Python trainers under srun, one per node, from_env() with only "
          "STARLING_SCENARIO set, mix to the exact average 2.5")


def main():
    for tool in ("srun", "sinfo", "slurmctld", "slurmd", "munged", "unshare"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (Debian: slurmd slurmctld slurm-client munge)")
    try:
        netns.check_available()
    except netns.Unavailable as e:
        skip(str(e))
    work = tempfile.mkdtemp(prefix="starling-slurm-")
    os.chmod(work, 0o755)  # munged checks that its socket's directories are not world-writable
    cluster = None
    try:
        with netns.Hosts(NODES) as hosts:
            cluster = Cluster(hosts, work)
            cluster.start()
            print(f"-- a Slurm cluster of {NODES} nodes: {', '.join(hosts.names)}", flush=True)
            n = [hosts.hostname(i) for i in range(NODES)]
            cases = work + "/cases"
            os.makedirs(cases)
            run_case(cluster, cases, "block", 8, ["-N", "4"], [n[r // 2] for r in range(8)])
            run_case(cluster, cases, "cyclic", 8, ["-N", "4", "-m", "cyclic"],
                     [n[r % 4] for r in range(8)])
            # plane=2 on 2 nodes with more tasks than CPUs (-O): Slurm decides the counts per
            # node (5 and 3 here), blocks of two go round-robin while a node has room.
            run_case(cluster, cases, "plane", 8, ["-N", "2", "-O", "-m", "plane=2"], None)
            # 6 tasks on 4 nodes: Slurm gives 2, 2, 1, 1 (SLURM_STEP_TASKS_PER_NODE "2(x2),1(x2)").
            run_case(cluster, cases, "uneven", 6, ["-N", "4"], [n[0], n[0], n[1], n[1], n[2], n[3]])
            run_trainer(cluster, cases)
            # A step of another size than the scenario: each peer refuses, naming the variable.
            d = os.path.join(cases, "size")
            os.makedirs(d)
            with open(os.path.join(d, "s.json"), "w") as f:
                json.dump(scenario("size", 8, 29390), f)
            rc = cluster.srun(["-N", "2", "-n", "4", LAUNCHER, "peer", os.path.join(d, "s.json"),
                               "--out", os.path.join(d, "out")], os.path.join(d, "srun.log"))
            text = open(os.path.join(d, "srun.log")).read()
            check(rc != 0 and "SLURM_STEP_NUM_TASKS" in text,
                  f"size: a 4-task step for 8 nodes fails naming SLURM_STEP_NUM_TASKS (exit {rc}): "
                  + text.strip().splitlines()[0][:300] if text.strip() else "(no output)")
    except Exception as e:
        check(False, f"{type(e).__name__}: {e}")
    finally:
        if cluster:
            cluster.stop()
    if failures:
        print(f"{len(failures)} failed; work files kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
