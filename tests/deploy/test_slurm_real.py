"""A real Slurm on this host runs a 2-node job through the shipped prolog, TaskProlog and
epilog: munged, slurmctld and two slurmd (`NodeName=n1,n2 NodeHostname=localhost`, each
`slurmd -N NAME` on its own port), all in a temporary folder with their own free ports.

The job starts a plain TCP server on torchrun's default port 29500 (as its rendezvous would)
and probes it throughout, while one task a node copies a rank of samples/gloo_ddp_2rank into
$COMMSCOPE_TRACE_DIR over time. The job id is 9500, whose aggregator the old per-job formula
(20000 + id mod 10000) put on 29500. Checked: the prolog started the collectors and the
aggregator (the direct launcher: this host has no systemd), the final report lands in the
user's folder as the docs say and equals `commscope report` of the same files, the epilog
removed the job's traces, state and daemons within its bound, and the server on 29500 was
bound and answered every probe.

Needs root (slurmd) and Debian's slurm-wlm and munge; skipped with the reason otherwise,
unless COMMSCOPE_REQUIRE_TOOLS names slurmctld. Every daemon is stopped (SIGTERM, a bounded
wait, SIGKILL) even when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deploycheck import DEPLOY, REPO
from service.harness import normalised, offline
from tools import require_tool

SAMPLE = REPO / "samples" / "gloo_ddp_2rank"
JOB = 9500  # the first job id: 20000 + 9500 mod 10000 was 29500, torchrun's port
ZMQ_PORT, METRICS_PORT = 20500, 25000  # 20000 / 24500 + 9500 mod 4500
TORCHRUN_PORT = 29500
NODES = ("n1", "n2")
EPILOG_BOUND_S = 90  # the epilog's documented worst case (COMMSCOPE_EPILOG_TIMEOUT)
COMMSCOPE = Path(sys.executable).parent / "commscope"

# Each task: its rank's two iterations copied into the trace folder in pieces, over time.
WRITER = """
import os, pathlib, sys, time
rank = int(os.environ["SLURM_PROCID"])
out = pathlib.Path(os.environ["COMMSCOPE_TRACE_DIR"])
for step in ("iteration_4", "iteration_8"):
    data = (pathlib.Path(sys.argv[1]) / step / f"rank{rank}_trace.json.gz").read_bytes()
    (out / step).mkdir(exist_ok=True)
    with (out / step / f"rank{rank}_trace.json.gz").open("wb") as handle:
        half = len(data) // 2
        for piece in (data[:half], data[half:]):
            handle.write(piece)
            handle.flush()
            time.sleep(0.5)
print(f"rank {rank} on {os.environ['SLURMD_NODENAME']} wrote to {out}")
"""

# torchrun's rendezvous stands-in: a TCP echo server on 29500, and a prober that connects,
# sends and reads back every 0.2 s until told to stop; each answer or refusal is a line.
SERVER = """
import socket, sys, threading
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("bound", flush=True)
def serve(conn):
    with conn:
        conn.sendall(conn.recv(64))
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
PROBE = """
import os, socket, sys, time
stop = sys.argv[2]
while not os.path.exists(stop):
    try:
        with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as conn:
            conn.sendall(b"ping")
            print("answered" if conn.recv(64) == b"ping" else "garbled", flush=True)
    except OSError as exc:
        print(f"refused {exc}", flush=True)
    time.sleep(0.2)
"""

JOB_SCRIPT = """#!/bin/bash
set -u
T={tmp}
env | grep '^COMMSCOPE_' | sort >"$T/job-env"
{python} "$T/server.py" {port} >"$T/server.out" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q bound "$T/server.out" && break; sleep 0.1; done
{python} "$T/probe.py" {port} "$T/stop-probe" >"$T/probe.out" 2>&1 &
probe=$!
srun -N2 -n2 --ntasks-per-node=1 {python} "$T/writer.py" {sample} >"$T/writer.out" 2>&1
# the daemons the prolog started, while they run (the epilog removes the pid files)
for n in n1 n2; do cp -r "$T/var/$n/commscope-run/$SLURM_JOB_ID" "$T/pids-$n" 2>/dev/null; done
sleep 2
touch "$T/stop-probe"
wait "$probe"
kill "$server"
"""

# The site settings every node's prolog, TaskProlog and epilog read (a bash fragment): two
# "nodes" on one host, so each node's folders are named after it.
SITE = """N="${{SLURMD_NODENAME:-n1}}"
COMMSCOPE_LAUNCHER=direct
COMMSCOPE_BIN={commscope}
COMMSCOPE_ENV_DIR={tmp}/etc/$N
COMMSCOPE_TRACE_ROOT={tmp}/traces/$N
COMMSCOPE_STATE_ROOT={tmp}/var/$N
COMMSCOPE_LOG_DIR={tmp}/log/$N
COMMSCOPE_KEYS_DIR={tmp}/keys/$N
COMMSCOPE_ALLOW_DIR={tmp}/allow
COMMSCOPE_FILE_SD_DIR={tmp}/file_sd
COMMSCOPE_REPORTS_DIR={tmp}/reports
COMMSCOPE_REPORT_DEST={tmp}/home/%u/commscope/%j
COMMSCOPE_COLLECT_JOBS=1
"""

# Slurm runs these; each sets where the site settings are, times the shipped script and keeps
# its stderr (slurmd keeps none).
WRAPPER = """#!/bin/bash
start=$(date +%s.%N)
COMMSCOPE_SLURM_CONF={tmp}/commscope.conf {script} 2>>"{tmp}/{name}-$SLURMD_NODENAME.log"
rc=$?
echo "$SLURMD_NODENAME $rc $(date +%s.%N) $start" >>"{tmp}/{name}.times"
exit $rc
"""

SLURM_CONF = """ClusterName=commscope
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={tmp}/munge/socket
CredType=cred/munge
StateSaveLocation={tmp}/slurm/state
SlurmdSpoolDir={tmp}/slurm/spool-%n
SlurmctldPidFile={tmp}/slurm/slurmctld.pid
SlurmdPidFile={tmp}/slurm/slurmd-%n.pid
SlurmctldLogFile={tmp}/slurm/slurmctld.log
SlurmdLogFile={tmp}/slurm/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
FirstJobId={job}
PrologFlags=Alloc
Prolog={tmp}/prolog.sh
Epilog={tmp}/epilog.sh
TaskProlog={tmp}/task_prolog.sh
NodeName=n1 NodeHostname=localhost Port={n1_port} CPUs=1
NodeName=n2 NodeHostname=localhost Port={n2_port} CPUs=1
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=10 State=UP
"""
# Slurm 22.05 always loads a cgroup plugin; nothing is constrained (task/none, linuxproc).
CGROUP_CONF = "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n"


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now, chosen by the OS (below or above: any free one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_free(port: int) -> bool:
    """Whether a server may bind `port` (as the job's does: connections in TIME_WAIT allowed)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, diagnose: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout_s:.0f}s\n{diagnose()}")
        time.sleep(0.5)


class Cluster:
    """munged, slurmctld and two slurmd, started in `tmp`; `stop` ends them all."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SLURM_CONF": str(tmp / "slurm.conf")}

    def write_config(self) -> None:
        ctld, slurmd, n1, n2 = free_ports(4)
        (self.tmp / "slurm" / "state").mkdir(parents=True)
        (self.tmp / "slurm.conf").write_text(
            SLURM_CONF.format(
                tmp=self.tmp, ctld_port=ctld, slurmd_port=slurmd, n1_port=n1, n2_port=n2, job=JOB
            )
        )
        (self.tmp / "cgroup.conf").write_text(CGROUP_CONF)
        munge = self.tmp / "munge"
        munge.mkdir(mode=0o700)
        (munge / "munge.key").write_bytes(os.urandom(1024))
        (munge / "munge.key").chmod(0o600)

    def start(self) -> None:
        munge = self.tmp / "munge"
        self.spawn(
            [
                "munged",
                "-F",
                "--force",
                f"--socket={munge / 'socket'}",
                f"--key-file={munge / 'munge.key'}",
                f"--pid-file={munge / 'pid'}",
                f"--log-file={munge / 'log'}",
                f"--seed-file={munge / 'seed'}",
            ],
            "munged",
        )
        wait_for("munged's socket", (munge / "socket").exists, 20, self.logs)
        conf = str(self.tmp / "slurm.conf")
        self.spawn(["slurmctld", "-D", "-f", conf], "slurmctld")
        for node in NODES:
            self.spawn(["slurmd", "-D", "-f", conf, "-N", node], f"slurmd-{node}")
        wait_for("both nodes idle", self.idle, 60, self.logs)

    def spawn(self, argv: list[str], name: str) -> None:
        with (self.tmp / f"{name}.out").open("wb") as out:
            self.procs.append(
                subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
                )
            )

    def slurm(self, *argv: str, timeout: float = 30) -> str:
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        return done.stdout + done.stderr

    def idle(self) -> bool:
        states = self.slurm("sinfo", "-h", "-N", "-o", "%N %t").split()
        return states == ["n1", "idle", "n2", "idle"]

    def logs(self) -> str:
        parts = []
        for path in sorted(
            [
                *self.tmp.glob("*.out"),
                *self.tmp.glob("*.log"),
                *(self.tmp / "slurm").glob("*.log"),
                *self.tmp.glob("log/*/*"),
            ]
        ):
            if path.is_file():
                parts.append(f"== {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """scancel what runs, then SIGTERM every daemon, a bounded wait, SIGKILL."""
        if self.procs:
            self.slurm("scancel", "--full", str(JOB), timeout=10)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def stop_daemons(tmp: Path) -> None:
    """The collectors and the aggregator, if the epilog left any (their pids, as the job saw)."""
    for pid_file in tmp.glob("pids-*/*.pid"):
        pid = int(pid_file.read_text())
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie left to an init that reaps none is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def write_files(tmp: Path) -> None:
    python, sample = sys.executable, str(SAMPLE)
    (tmp / "writer.py").write_text(WRITER)
    (tmp / "server.py").write_text(SERVER)
    (tmp / "probe.py").write_text(PROBE)
    (tmp / "job.sh").write_text(
        JOB_SCRIPT.format(tmp=tmp, python=python, port=TORCHRUN_PORT, sample=sample)
    )
    (tmp / "commscope.conf").write_text(SITE.format(tmp=tmp, commscope=COMMSCOPE))
    for name in ("prolog", "epilog", "task_prolog"):
        wrapper = tmp / f"{name}.sh"
        wrapper.write_text(
            WRAPPER.format(tmp=tmp, name=name, script=DEPLOY / "slurm" / f"{name}.sh")
        )
        wrapper.chmod(0o755)
    # The site's aggregator pair, made once and copied to every node; each node's own pair
    # the prolog makes on its first job.
    subprocess.run(
        [str(COMMSCOPE), "keys", "--out", str(tmp / "keys" / "n1"), "--name", "aggregator"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    shutil.copytree(tmp / "keys" / "n1", tmp / "keys" / "n2")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    for tool in ("slurmctld", "slurmd", "sbatch", "munged"):
        require_tool(tool)
    if os.geteuid() != 0:
        pytest.skip("slurmd runs as root: the real-Slurm test needs root")
    if not port_free(TORCHRUN_PORT):
        pytest.skip(
            f"port {TORCHRUN_PORT} is taken on this host: the job's stand-in cannot bind it"
        )
    tmp_path.chmod(0o755)  # munged checks the folders above its socket and key
    made = Cluster(tmp_path)
    made.write_config()
    write_files(tmp_path)
    try:
        made.start()
        yield made
    finally:
        made.stop()
        stop_daemons(tmp_path)


def run_job(cluster: Cluster) -> None:
    tmp = cluster.tmp
    out = cluster.slurm(
        "sbatch", "--wait", "-N2", "-o", str(tmp / "job.out"), str(tmp / "job.sh"), timeout=120
    )
    assert f"Submitted batch job {JOB}" in out, out + cluster.logs()
    # the nodes are COMPLETING while the epilogs run; idle again once both are done
    wait_for(
        "the epilogs",
        lambda: len(epilog_times(tmp)) == 2 and cluster.idle(),
        EPILOG_BOUND_S + 30,
        cluster.logs,
    )


def epilog_times(tmp: Path) -> dict[str, float]:
    """Each node's epilog: its duration in seconds (it exited 0)."""
    path = tmp / "epilog.times"
    found = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        node, rc, end, start = line.split()
        assert rc == "0", line
        found[node] = float(end) - float(start)
    return found


def test_a_two_node_job_runs_through_the_prolog_and_epilog(cluster: Cluster) -> None:
    tmp = cluster.tmp
    run_job(cluster)
    logs = cluster.logs

    # The prolog started a collector on each node and the aggregator on the first one, on
    # the job's ports (the old formula's 29500 is not among them).
    prolog_log = {n: (tmp / f"prolog-{n}.log").read_text() for n in NODES}
    for node in NODES:
        assert (
            f"job {JOB}: collector started on {node} (direct), aggregator tcp://localhost:{ZMQ_PORT}"
            in (prolog_log[node])
        ), logs()
    assert {p.name for p in (tmp / "pids-n1").glob("*.pid")} == {"collector.pid", "aggregator.pid"}
    assert {p.name for p in (tmp / "pids-n2").glob("*.pid")} == {"collector.pid"}
    env = (tmp / "etc").glob("*/*.env")
    assert not list(env), "the epilog removes the env files"
    job_env = (tmp / "job-env").read_text()
    assert f"COMMSCOPE_TRACE_DIR={tmp}/traces/n1/{JOB}" in job_env  # the TaskProlog's
    assert f"COMMSCOPE_REPORT_DIR={tmp}/home/root/commscope/{JOB}" in job_env

    # The report: copied where the TaskProlog said, and kept where the aggregator wrote it;
    # it is `commscope report` of the same files.
    dest = tmp / "home" / "root" / "commscope" / str(JOB)
    (report,) = dest.glob("*.json")
    assert {p.suffix for p in dest.iterdir()} >= {".json", ".txt"}
    assert sorted(p.name for p in (tmp / "reports" / str(JOB)).iterdir() if p.is_file()) == sorted(
        p.name for p in dest.iterdir() if p.is_file()
    )
    assert normalised(json.loads(report.read_text())) == normalised(offline(SAMPLE)), logs()

    # The epilog: within its bound; the job's traces, state, pid files and daemons gone.
    times = epilog_times(tmp)
    assert set(times) == set(NODES)
    assert "aggregator finished its reports" in (tmp / "epilog-n1.log").read_text(), logs()
    assert max(times.values()) < EPILOG_BOUND_S, times
    for node in NODES:
        var = tmp / "var" / node
        for left in (
            tmp / "traces" / node / str(JOB),
            var / "commscope" / str(JOB),
            var / "commscope-aggregator" / str(JOB),
            var / "commscope-run" / str(JOB),
        ):
            assert not left.exists(), f"{left} left behind\n{logs()}"
    for pid_file in tmp.glob("pids-*/*.pid"):
        assert not running(int(pid_file.read_text())), f"{pid_file} still runs"
    assert not list((tmp / "file_sd").iterdir())

    # torchrun's port: bound by the job's server, answered every probe, never refused.
    assert (tmp / "server.out").read_text().startswith("bound"), logs()
    answers = (tmp / "probe.out").read_text().splitlines()
    assert answers and set(answers) == {"answered"}, answers
    writers = sorted(re.findall(r"rank \d on n\d", (tmp / "writer.out").read_text()))
    assert writers == ["rank 0 on n1", "rank 1 on n2"]
