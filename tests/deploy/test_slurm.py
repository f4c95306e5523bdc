"""The Slurm prolog, epilog and TaskProlog, run against stub `systemctl`/`scontrol`/`logger`/
`runuser` commands.

Both run with a clean environment, as slurmd runs them; the stubs come first on PATH, so the
real systemctl of the machine running the tests is never called.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from commscope.service import curve
from deploycheck import DEPLOY, FLAGS, env_file, require_tool

SLURM = DEPLOY / "slurm"
PROLOG = SLURM / "prolog.sh"
EPILOG = SLURM / "epilog.sh"
TASK_PROLOG = SLURM / "task_prolog.sh"
SCRIPTS = [PROLOG, EPILOG, TASK_PROLOG]
JOB = "4242"
# Per-job ports by default: 20000 + 4242 mod 4500 (ZeroMQ), 24500 + the same (/metrics).
PORT, METRICS_PORT = 24242, 28742

# systemctl: logs its arguments; exits $STUB_SYSTEMCTL_RC; `is-active UNIT` succeeds while
# $STUB_DIR/active/UNIT holds a number above 0, counting it down; $STUB_HANG makes it hang.
SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >>"$STUB_DIR/calls"
[[ -n "${STUB_HANG:-}" ]] && exec sleep 60
if [[ "$1" == is-active ]]; then
    f="$STUB_DIR/active/${!#}"
    [[ -f "$f" ]] || exit 3
    n=$(<"$f")
    ((n > 0)) || exit 3
    echo $((n - 1)) >"$f"
    exit 0
fi
exit "${STUB_SYSTEMCTL_RC:-0}"
"""
SCONTROL = """#!/bin/bash
echo "scontrol $*" >>"$STUB_DIR/calls"
[[ -n "${STUB_HANG:-}" ]] && exec sleep 60
[[ "${STUB_SCONTROL_RC:-0}" == 0 ]] || exit "$STUB_SCONTROL_RC"
[[ "$1 $2" == "show hostnames" ]] && printf '%s\\n' $STUB_NODES
exit 0
"""
LOGGER = """#!/bin/bash
echo "logger $*" >>"$STUB_DIR/calls"
"""
# runuser -u USER -- COMMAND...: logged, then COMMAND run as the caller (the test's user).
RUNUSER = """#!/bin/bash
echo "runuser $1 $2" >>"$STUB_DIR/calls"
shift 3
exec "$@"
"""
# commscope: the real CLI (`commscope keys` makes a real pair), its calls logged.
COMMSCOPE = f"""#!/bin/bash
echo "commscope $*" >>"$STUB_DIR/calls"
exec {sys.executable} -m commscope.service.cli "$@"
"""


@dataclass
class Node:
    """A fake node: stub commands, an /etc/commscope and a trace root in a temporary folder."""

    root: Path

    @property
    def calls_file(self) -> Path:
        return self.root / "calls"

    @property
    def env_dir(self) -> Path:
        return self.root / "etc-commscope"

    @property
    def trace_root(self) -> Path:
        return self.root / "traces"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def allow(self) -> Path:
        return self.root / "shared-allow"

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def file_sd(self) -> Path:
        return self.root / "file_sd"

    @property
    def state_root(self) -> Path:
        """The units' StateDirectory root (/var/lib)."""
        return self.root / "var-lib"

    @property
    def reports(self) -> Path:
        """The aggregator unit's report folders (/var/lib/commscope-reports)."""
        return self.root / "commscope-reports"

    @property
    def user_reports(self) -> Path:
        return self.root / "shared" / getpass.getuser()

    def calls(self, command: str = "systemctl") -> list[str]:
        if not self.calls_file.exists():
            return []
        lines = self.calls_file.read_text().splitlines()
        return [line.removeprefix(f"{command} ") for line in lines if line.startswith(command)]

    def environment(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.root / 'bin'}:/usr/bin:/bin",
            "STUB_DIR": str(self.root),
            "STUB_NODES": "node001 node002 node003",
            "SLURM_JOB_ID": JOB,
            "SLURM_JOB_USER": getpass.getuser(),
            "SLURM_JOB_NODELIST": "node[001-003]",
            "SLURMD_NODENAME": "node001",
            "COMMSCOPE_SLURM_CONF": str(self.conf),
            "COMMSCOPE_ENV_DIR": str(self.env_dir),
            "COMMSCOPE_TRACE_ROOT": str(self.trace_root),
            "COMMSCOPE_BIN": str(self.root / "bin" / "commscope"),
            "COMMSCOPE_KEYS_DIR": str(self.keys),
            "COMMSCOPE_ALLOW_DIR": str(self.allow),
            "COMMSCOPE_FILE_SD_DIR": str(self.file_sd),
            "COMMSCOPE_REPORTS_DIR": str(self.reports),
            "COMMSCOPE_REPORT_DEST": f"{self.root}/shared/%u/commscope-%j",
            "COMMSCOPE_LAUNCHER": "systemd",
            "COMMSCOPE_STATE_ROOT": str(self.state_root),
            "COMMSCOPE_LOG_DIR": str(self.root / "log"),
        }
        env.update(extra)
        return env

    def run(
        self, script: Path, env: dict[str, str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/bash", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def aggregator_active_for(self, polls: int) -> None:
        active = self.root / "active"
        active.mkdir(exist_ok=True)
        (active / f"commscope-aggregator@{JOB}.service").write_text(f"{polls}\n")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {"systemctl": SYSTEMCTL, "scontrol": SCONTROL, "logger": LOGGER, "commscope": COMMSCOPE,
             "runuser": RUNUSER}  # fmt: skip
    for name, text in stubs.items():
        stub = bin_dir / name
        stub.write_text(text)
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    made = Node(tmp_path)
    made.keys.mkdir(mode=0o700)
    for name in ("aggregator.key", "aggregator.key_secret"):  # the site's pair, made once
        (made.keys / name).write_text("stands for the site's aggregator pair\n")
    return made


# ---- both scripts


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_shellcheck_clean(script: Path) -> None:
    shellcheck = require_tool("shellcheck")
    done = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_executable(script: Path) -> None:
    assert os.access(script, os.X_OK)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize(
    "conf",
    ["exit 3", "false", "COMMSCOPE_AGGREGATOR_WAIT=abc; COMMSCOPE_IDLE_TIMEOUT=$nope"],
    ids=["exit", "false", "unbound"],
)
def test_broken_site_settings_never_fail_the_script(node: Node, script: Path, conf: str) -> None:
    node.conf.write_text(conf + "\n")
    node.aggregator_active_for(5)
    done = node.run(script, fast(node))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", [PROLOG, EPILOG], ids=lambda p: p.name)
@pytest.mark.parametrize("job", ["", "../etc", "12; rm -rf /"], ids=["empty", "path", "shell"])
def test_unusable_job_id_does_nothing(node: Node, script: Path, job: str) -> None:
    done = node.run(script, node.environment(SLURM_JOB_ID=job))
    assert done.returncode == 0
    assert node.calls() == []
    assert not node.env_dir.exists()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_empty_environment_exits_0(node: Node, script: Path) -> None:
    done = node.run(
        script, {"PATH": f"{node.root / 'bin'}:/usr/bin:/bin", "STUB_DIR": str(node.root)}
    )
    assert done.returncode == 0, done.stderr


# ---- prolog


def test_prolog_on_the_first_node_writes_the_env_file_and_starts_both(node: Node) -> None:
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0, done.stderr
    watch = node.trace_root / JOB
    assert env_file(node.env_dir / f"{JOB}.env") == {
        "COMMSCOPE_WATCH_DIR": str(watch),
        "COMMSCOPE_AGGREGATOR": f"tcp://node001:{PORT}",
        "COMMSCOPE_NODE": "node001",
        "COMMSCOPE_COLLECT_ARGS": "--drain 20",
        "COMMSCOPE_LISTEN": f"tcp://0.0.0.0:{PORT}",
        "COMMSCOPE_METRICS_PORT": str(METRICS_PORT),
        "COMMSCOPE_AGGREGATE_ARGS": "--expect-nodes 3 --idle-timeout 1800 --linger 15",
        "COMMSCOPE_SERVER_KEY": str(node.keys / "aggregator.key"),
        "COMMSCOPE_ALLOW_DIR": str(node.allow),
    }
    assert node.calls() == [
        f"start commscope-aggregator@{JOB}.service",
        f"start commscope-collector@{JOB}.service",
    ]
    assert node.calls("scontrol") == ["show hostnames node[001-003]", "show node -o node001"]
    assert stat.S_IMODE(watch.stat().st_mode) == 0o700
    assert watch.stat().st_uid == os.getuid()


def test_prolog_on_another_node_starts_only_the_collector(node: Node) -> None:
    done = node.run(PROLOG, node.environment(SLURMD_NODENAME="node003"))
    assert done.returncode == 0, done.stderr
    env = env_file(node.env_dir / f"{JOB}.env")
    assert env["COMMSCOPE_NODE"] == "node003"
    assert env["COMMSCOPE_AGGREGATOR"] == f"tcp://node001:{PORT}"
    assert node.calls() == [f"start commscope-collector@{JOB}.service"]
    assert not node.file_sd.exists()  # only the aggregator's node has a target to publish


def test_prolog_site_settings_reach_the_env_file(node: Node) -> None:
    node.conf.write_text(
        "COMMSCOPE_PORT=6000\n"
        "COMMSCOPE_COLLECT_ARGS='--poll --poll-interval 2'\n"
        "COMMSCOPE_AGGREGATE_ARGS='--config /etc/commscope/llama3_8b.toml'\n"
    )
    node.run(PROLOG, node.environment(SLURMD_NODENAME="node002"))
    env = env_file(node.env_dir / f"{JOB}.env")
    assert env["COMMSCOPE_AGGREGATOR"] == "tcp://node001:6000"
    assert env["COMMSCOPE_COLLECT_ARGS"] == "--drain 20 --poll --poll-interval 2"
    assert env["COMMSCOPE_AGGREGATE_ARGS"] == (
        "--expect-nodes 3 --idle-timeout 1800 --linger 15 --config /etc/commscope/llama3_8b.toml"
    )


def test_prolog_env_file_holds_documented_variables_and_known_flags(node: Node) -> None:
    node.run(PROLOG, node.environment())
    env = env_file(node.env_dir / f"{JOB}.env")
    assert set(env) <= set(env_file(DEPLOY / "systemd" / "example.env"))
    for var, command in (
        ("COMMSCOPE_COLLECT_ARGS", "collect"),
        ("COMMSCOPE_AGGREGATE_ARGS", "aggregate"),
    ):
        assert {a for a in shlex.split(env[var]) if a.startswith("--")} <= FLAGS[command]


def test_prolog_with_a_central_aggregator_starts_only_the_collector(node: Node) -> None:
    node.conf.write_text("COMMSCOPE_AGGREGATOR_HOST=monitor01\n")
    node.run(PROLOG, node.environment())
    env = env_file(node.env_dir / f"{JOB}.env")
    assert env["COMMSCOPE_AGGREGATOR"] == "tcp://monitor01:5555"
    assert node.calls() == [f"start commscope-collector@{JOB}.service"]


@pytest.mark.parametrize(
    ("here", "aggregator", "args", "starts"),
    [  # five nodes in blocks of two: node001-002 (s0), node003-004 (s1), node005 (s2)
        ("node003", "node003", "--expect-nodes 2 --shard s1", ["aggregator", "collector"]),
        ("node004", "node003", "--expect-nodes 2 --shard s1", ["collector"]),
        ("node005", "node005", "--expect-nodes 1 --shard s2", ["aggregator", "collector"]),
        ("node002", "node001", "--expect-nodes 2 --shard s0", ["collector"]),
    ],
)
def test_prolog_with_shards_runs_an_aggregator_per_block_of_nodes(
    node: Node, here: str, aggregator: str, args: str, starts: list[str]
) -> None:
    node.conf.write_text("COMMSCOPE_SHARD_NODES=2\n")
    nodes = "node001 node002 node003 node004 node005"
    done = node.run(PROLOG, node.environment(STUB_NODES=nodes, SLURMD_NODENAME=here))
    assert done.returncode == 0, done.stderr
    env = env_file(node.env_dir / f"{JOB}.env")
    assert env["COMMSCOPE_AGGREGATOR"] == f"tcp://{aggregator}:{PORT}"
    assert env["COMMSCOPE_AGGREGATE_ARGS"] == f"{args} --idle-timeout 1800 --linger 15"
    assert node.calls() == [f"start commscope-{unit}@{JOB}.service" for unit in starts]


@pytest.mark.parametrize(
    ("here", "args"),
    [  # five nodes in blocks of two, 8 ranks a node: s0 ranks 0-15, s1 16-31, s2 32-39
        ("node001", "--expect-nodes 2 --shard s0 --ranks 0-15"),
        ("node004", "--expect-nodes 2 --shard s1 --ranks 16-31"),
        ("node005", "--expect-nodes 1 --shard s2 --ranks 32-39"),
    ],
)
def test_prolog_with_shards_and_ranks_per_node_gives_each_block_its_ranks(
    node: Node, here: str, args: str
) -> None:
    node.conf.write_text("COMMSCOPE_SHARD_NODES=2\nCOMMSCOPE_RANKS_PER_NODE=8\n")
    nodes = "node001 node002 node003 node004 node005"
    done = node.run(PROLOG, node.environment(STUB_NODES=nodes, SLURMD_NODENAME=here))
    assert done.returncode == 0, done.stderr
    env = env_file(node.env_dir / f"{JOB}.env")
    assert env["COMMSCOPE_AGGREGATE_ARGS"] == f"{args} --idle-timeout 1800 --linger 15"


def test_prolog_with_unusable_ranks_per_node_starts_nothing_and_exits_0(node: Node) -> None:
    node.conf.write_text("COMMSCOPE_SHARD_NODES=2\nCOMMSCOPE_RANKS_PER_NODE=eight\n")
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0
    assert node.calls() == []
    assert "unusable COMMSCOPE_RANKS_PER_NODE 'eight'" in done.stderr


@pytest.mark.parametrize("setting", ["-1", "two", "1234567"])
def test_prolog_with_unusable_shard_nodes_starts_nothing_and_exits_0(
    node: Node, setting: str
) -> None:
    node.conf.write_text(f"COMMSCOPE_SHARD_NODES={setting}\n")
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0
    assert node.calls() == []
    assert f"unusable COMMSCOPE_SHARD_NODES '{setting}'" in done.stderr


def test_prolog_disabled_does_nothing(node: Node) -> None:
    node.conf.write_text("COMMSCOPE_ENABLE=0\n")
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0
    assert node.calls() == [] and node.calls("scontrol") == []


def test_prolog_without_the_node_list_starts_nothing_and_exits_0(node: Node) -> None:
    done = node.run(PROLOG, node.environment(STUB_SCONTROL_RC="1"))
    assert done.returncode == 0
    assert node.calls() == []
    assert not (node.env_dir / f"{JOB}.env").exists()
    assert "cannot list the job's nodes" in done.stderr


def test_prolog_exits_0_when_systemctl_fails(node: Node) -> None:
    done = node.run(PROLOG, node.environment(STUB_SYSTEMCTL_RC="1"))
    assert done.returncode == 0
    assert len(node.calls()) == 2
    assert "could not start" in done.stderr


# ---- epilog


def fast(node: Node, **extra: str) -> dict[str, str]:
    bounds = {
        "COMMSCOPE_COLLECTOR_STOP_TIMEOUT": "2",
        "COMMSCOPE_AGGREGATOR_WAIT": "2",
        "COMMSCOPE_AGGREGATOR_STOP_TIMEOUT": "2",
        "COMMSCOPE_QUERY_TIMEOUT": "2",
        "COMMSCOPE_POLL_INTERVAL": "0.1",
    }
    return node.environment(**{**bounds, **extra})


def test_epilog_exits_0_when_systemctl_and_scontrol_fail(node: Node) -> None:
    done = node.run(EPILOG, fast(node, STUB_SYSTEMCTL_RC="1", STUB_SCONTROL_RC="1"))
    assert done.returncode == 0, done.stderr
    assert f"stop commscope-collector@{JOB}.service" in node.calls()


def test_epilog_exits_0_in_bounded_time_when_systemctl_hangs(node: Node) -> None:
    start = time.monotonic()
    done = node.run(EPILOG, fast(node, STUB_HANG="1"), timeout=30)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 15


def test_epilog_stops_the_collector_and_lets_the_aggregator_finish(node: Node) -> None:
    (node.env_dir).mkdir()
    (node.env_dir / f"{JOB}.env").write_text("COMMSCOPE_NODE=node001\n")
    node.aggregator_active_for(3)  # finishes on its own after three polls
    done = node.run(EPILOG, fast(node, COMMSCOPE_AGGREGATOR_WAIT="30"))
    assert done.returncode == 0, done.stderr
    calls = node.calls()
    assert calls[0] == f"stop commscope-collector@{JOB}.service"
    assert f"stop commscope-aggregator@{JOB}.service" not in calls
    assert calls.count(f"is-active --quiet commscope-aggregator@{JOB}.service") == 4
    assert calls[-2:] == [
        f"clean --what=state commscope-collector@{JOB}.service",
        f"reset-failed commscope-collector@{JOB}.service commscope-aggregator@{JOB}.service",
    ]
    assert not (node.env_dir / f"{JOB}.env").exists()


def test_epilog_stops_an_aggregator_that_keeps_waiting(node: Node) -> None:
    node.aggregator_active_for(1_000_000)
    done = node.run(EPILOG, fast(node, COMMSCOPE_AGGREGATOR_WAIT="1"))
    assert done.returncode == 0, done.stderr
    calls = node.calls()
    stops = [c for c in calls if c.startswith("stop ")]
    assert stops == [
        f"stop commscope-collector@{JOB}.service",
        f"stop commscope-aggregator@{JOB}.service",
    ]
    assert "stopping it" in done.stderr


def test_epilog_on_a_node_without_the_aggregator_only_stops_the_collector(node: Node) -> None:
    done = node.run(EPILOG, fast(node, SLURMD_NODENAME="node002"))
    assert done.returncode == 0
    assert [c for c in node.calls() if c.startswith("stop ")] == [
        f"stop commscope-collector@{JOB}.service"
    ]


# ---- keys


def test_prolog_makes_the_node_s_pair_once_and_publishes_its_public_key(node: Node) -> None:
    """The pair is a real one, issued to this node; the allow-list names it by the node."""
    done = node.run(PROLOG, node.environment(SLURMD_NODENAME="node002"))
    assert done.returncode == 0, done.stderr
    pair = curve.load_pair(node.keys, "node")
    assert (pair.name, pair.path.name) == ("node002", "node.key_secret")
    assert stat.S_IMODE(pair.path.stat().st_mode) == 0o600
    assert curve.load_allow(node.allow) == {pair.public: "node002"}
    assert node.calls() == [f"start commscope-collector@{JOB}.service"]
    node.run(PROLOG, node.environment(SLURMD_NODENAME="node002"))  # the next job
    assert curve.load_pair(node.keys, "node") == pair
    assert len(node.calls("commscope")) == 1
    assert not [p for p in node.keys.iterdir() if p.name.startswith(".new")]


def test_prolog_without_the_site_s_aggregator_key_starts_nothing(node: Node) -> None:
    (node.keys / "aggregator.key").unlink()
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0
    assert node.calls() == []
    assert "no " + str(node.keys / "aggregator.key") in done.stderr


def test_prolog_without_the_aggregator_s_secret_starts_only_the_collector(node: Node) -> None:
    (node.keys / "aggregator.key_secret").unlink()
    done = node.run(PROLOG, node.environment())
    assert node.calls() == [f"start commscope-collector@{JOB}.service"]
    assert "aggregator not started" in done.stderr


def test_prolog_told_not_to_make_keys_starts_nothing_without_a_pair(node: Node) -> None:
    node.conf.write_text("COMMSCOPE_MAKE_KEYS=0\n")
    done = node.run(PROLOG, node.environment())
    assert node.calls() == [] and node.calls("commscope") == []
    assert "COMMSCOPE_MAKE_KEYS=0" in done.stderr


# ---- per-job ports, file_sd, reports, TaskProlog


@pytest.mark.parametrize(
    ("job", "port"), [("4243", 24243), ("8742", 24242), ("9500", 20500), ("4499", 24499)]
)
def test_ports_are_the_job_s_own(node: Node, job: str, port: int) -> None:
    """20000 + id mod 4500: jobs 4242 and 4243 on one first node never share a port."""
    node.run(PROLOG, node.environment(SLURM_JOB_ID=job))
    env = env_file(node.env_dir / f"{job}.env")
    assert env["COMMSCOPE_LISTEN"] == f"tcp://0.0.0.0:{port}"
    assert env["COMMSCOPE_METRICS_PORT"] == str(port + 4500)


def test_every_node_of_a_job_computes_the_same_port(node: Node) -> None:
    for here in ("node001", "node002", "node003"):
        node.run(PROLOG, node.environment(SLURMD_NODENAME=here))
        env = env_file(node.env_dir / f"{JOB}.env")
        assert env["COMMSCOPE_AGGREGATOR"] == f"tcp://node001:{PORT}"


def no_ephemeral(node: Node) -> Path:
    """An ip_local_port_range with no port below 65535 in it: any port may be bound."""
    path = node.root / "ip_local_port_range"
    path.write_text("65535\t65535\n")
    return path


def test_a_port_in_use_keeps_the_aggregator_from_starting_not_the_collector(node: Node) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        # base + 4242 mod range = busy: the job's ZeroMQ port is the one taken
        node.conf.write_text(f"COMMSCOPE_PORT_BASE={busy - 4242}\n")
        done = node.run(PROLOG, node.environment(COMMSCOPE_EPHEMERAL_FILE=str(no_ephemeral(node))))
    assert done.returncode == 0
    assert node.calls() == [f"start commscope-collector@{JOB}.service"]
    assert f"port {busy} is in use on node001" in done.stderr
    assert not node.file_sd.exists()


def test_unusable_port_settings_start_nothing(node: Node) -> None:
    node.conf.write_text("COMMSCOPE_PORT_BASE=62000\n")  # 62000 + 4242 = 66242 > 65535
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0 and node.calls() == []
    assert "port '66242' is not a number in 1..65535" in done.stderr


def test_the_aggregator_s_node_publishes_a_file_sd_target(node: Node) -> None:
    done = node.run(PROLOG, node.environment())
    assert done.returncode == 0, done.stderr
    targets = json.loads((node.file_sd / f"{JOB}.json").read_text())
    assert targets == [{"targets": [f"node001:{METRICS_PORT}"], "labels": {"slurm_job_id": JOB}}]


def test_each_shard_s_aggregator_publishes_its_own_target(node: Node) -> None:
    node.conf.write_text("COMMSCOPE_SHARD_NODES=2\n")
    nodes = "node001 node002 node003 node004 node005"
    node.run(PROLOG, node.environment(STUB_NODES=nodes, SLURMD_NODENAME="node003"))
    (target,) = json.loads((node.file_sd / f"{JOB}-s1.json").read_text())
    assert target["targets"] == [f"node003:{METRICS_PORT}"]


def _finished_aggregator(node: Node, shard: str = "") -> None:
    """What the aggregator's node holds after the run: its reports and its env file."""
    (node.reports / JOB).mkdir(parents=True)
    (node.reports / JOB / "report.txt").write_text("the report\n")
    node.env_dir.mkdir()
    args = f"--expect-nodes 2{f' --shard {shard}' if shard else ''} --idle-timeout 1800"
    (node.env_dir / f"{JOB}.env").write_text(f'COMMSCOPE_AGGREGATE_ARGS="{args}"\n')
    node.file_sd.mkdir()
    (node.file_sd / f"{JOB}{f'-{shard}' if shard else ''}.json").write_text("[]\n")
    (node.file_sd / "4243.json").write_text("[]\n")  # another job's: left alone


@pytest.mark.parametrize("shard", ["", "s1"])
def test_epilog_copies_the_reports_as_the_user_and_removes_the_target(
    node: Node, shard: str
) -> None:
    _finished_aggregator(node, shard)
    done = node.run(EPILOG, fast(node))
    assert done.returncode == 0, done.stderr
    dest = (
        node.user_reports / f"commscope-{JOB}" / shard
        if shard
        else node.user_reports / f"commscope-{JOB}"
    )
    assert (dest / "report.txt").read_text() == "the report\n"
    assert node.calls("runuser") == [f"-u {getpass.getuser()}"]
    assert sorted(p.name for p in node.file_sd.iterdir()) == ["4243.json"]


def test_epilog_leaves_the_reports_in_place_when_told_to(node: Node) -> None:
    _finished_aggregator(node)
    done = node.run(EPILOG, fast(node, COMMSCOPE_REPORT_DEST=""))
    assert done.returncode == 0
    assert node.calls("runuser") == [] and "reports left in" in done.stderr
    assert (node.reports / JOB / "report.txt").exists()


def test_epilog_says_so_when_the_copy_fails(node: Node) -> None:
    _finished_aggregator(node)
    (node.root / "shared").write_text("a file where the folder should be\n")
    done = node.run(EPILOG, fast(node))
    assert done.returncode == 0
    assert "cannot copy the reports" in done.stderr


def test_task_prolog_exports_the_trace_folder_and_the_report_folder(node: Node) -> None:
    node.run(PROLOG, node.environment())  # makes the trace folder
    done = node.run(TASK_PROLOG, node.environment())
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"export COMMSCOPE_TRACE_DIR={node.trace_root / JOB}",
        f"export COMMSCOPE_REPORT_DIR={node.user_reports / f'commscope-{JOB}'}",
    ]


def test_task_prolog_and_epilog_name_the_same_report_folder(node: Node) -> None:
    """`%h` (the home) as well: both expand COMMSCOPE_REPORT_DEST the same way."""
    node.run(PROLOG, node.environment())
    template = "%h/x/%u/%j"
    done = node.run(TASK_PROLOG, node.environment(COMMSCOPE_REPORT_DEST=template))
    home = os.path.expanduser(f"~{getpass.getuser()}")
    expected = f"{home}/x/{getpass.getuser()}/{JOB}"
    assert f"export COMMSCOPE_REPORT_DIR={expected}" in done.stdout.splitlines()
    # the epilog's copy goes there too (the stub runuser shows the destination it was given)
    _stub_copy = node.root / "bin" / "runuser"
    _stub_copy.write_text('#!/bin/bash\necho "runuser $*" >>"$STUB_DIR/calls"\n')
    (node.reports / JOB).mkdir(parents=True)
    node.run(EPILOG, fast(node, COMMSCOPE_REPORT_DEST=template))
    (call,) = node.calls("runuser")
    assert f" _ {expected} {node.reports / JOB}" in call


def test_task_prolog_says_nothing_for_a_job_commscope_does_not_watch(node: Node) -> None:
    done = node.run(TASK_PROLOG, node.environment())
    assert done.returncode == 0 and done.stdout == ""


# ---- ports clear of the training job's and of the ephemeral range


def prolog_ports(*jobs: int, **env: str) -> dict[int, tuple[int, int] | None]:
    """`prolog.sh --ports J...`: each job's (ZeroMQ, /metrics) ports, None when refused."""
    done = subprocess.run(
        ["/bin/bash", str(PROLOG), "--ports", *map(str, jobs)],
        env={"PATH": "/usr/bin:/bin", "COMMSCOPE_SLURM_CONF": "/nonexistent", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found: dict[int, tuple[int, int] | None] = {}
    for line in done.stdout.splitlines():
        job, *ports = line.split()
        found[int(job)] = None if ports == ["refused"] else (int(ports[0]), int(ports[1]))
    return found


def ephemeral_start() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_every_job_s_ports_avoid_torchrun_and_the_ephemeral_range() -> None:
    """Every job id (every residue of the 4,500-port range, and the largest ids): ZeroMQ in
    20000-24499, /metrics in 24500-28999, so no port is in 29400-29600 (torchrun's
    rendezvous 29400, MASTER_PORT 29500), none in the ephemeral range, and no job's ZeroMQ
    port is any job's /metrics port."""
    jobs = [*range(4500), 9500, 2**26 - 1, 2**32 - 1, 10**18 - 1]
    ports = prolog_ports(*jobs)
    assert set(ports) == set(jobs)
    zmq = {p[0] for p in ports.values() if p}
    metrics = {p[1] for p in ports.values() if p}
    assert None not in ports.values()
    assert zmq == set(range(20000, 24500)) and metrics == set(range(24500, 29000))
    assert all(p < 29400 and p < ephemeral_start() for p in zmq | metrics)
    assert ports[9500] == ports[500] == (20500, 25000)  # 20000 + 9500 mod 10000 was 29500


@pytest.mark.parametrize(
    ("setting", "refused"),
    [
        ({"COMMSCOPE_PORT": "29500"}, "in COMMSCOPE_RESERVED_PORTS (29400-29600"),
        ({"COMMSCOPE_METRICS_PORT_BASE": "25200"}, "in COMMSCOPE_RESERVED_PORTS (29400-29600"),
        ({"COMMSCOPE_PORT_BASE": "30000"}, "in the ephemeral range (from 30500)"),
        ({"COMMSCOPE_METRICS_PORT": "24242"}, "would share port 24242"),
    ],
)
def test_a_port_for_the_training_job_or_the_kernel_starts_nothing(
    node: Node, setting: dict[str, str], refused: str
) -> None:
    node.conf.write_text("".join(f"{k}={v}\n" for k, v in setting.items()))
    ephemeral = node.root / "ip_local_port_range"
    ephemeral.write_text("30500\t60999\n")  # a site whose ephemeral range starts lower
    done = node.run(PROLOG, node.environment(COMMSCOPE_EPHEMERAL_FILE=str(ephemeral)))
    assert done.returncode == 0
    assert node.calls() == [] and not (node.env_dir / f"{JOB}.env").exists()
    assert refused in done.stderr


def test_ports_follow_the_ephemeral_range_read_at_run_time(tmp_path: Path) -> None:
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("24000 60999\n")  # the metrics block is inside it: refused
    assert prolog_ports(4242, COMMSCOPE_EPHEMERAL_FILE=str(ephemeral)) == {4242: None}
    ephemeral.write_text("not numbers\n")  # unreadable: 32768, Linux's default
    assert prolog_ports(4242, COMMSCOPE_EPHEMERAL_FILE=str(ephemeral)) == {4242: (24242, 28742)}


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("family", "address"),
    [
        (socket.AF_INET, "127.0.0.2"),
        pytest.param(
            socket.AF_INET6,
            "::1",
            marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here"),
        ),
    ],
)
def test_a_port_in_use_on_any_address_is_seen(
    node: Node, family: socket.AddressFamily, address: str
) -> None:
    """A listener on an address other than 127.0.0.1 (another loopback, IPv6) holds the port
    as much as one on every address: the job's aggregator must not start there."""
    with socket.socket(family) as taken:
        taken.bind((address, 0))
        taken.listen()
        busy = taken.getsockname()[1]
        node.conf.write_text(f"COMMSCOPE_PORT_BASE={busy - 4242}\n")
        done = node.run(PROLOG, node.environment(COMMSCOPE_EPHEMERAL_FILE=str(no_ephemeral(node))))
    assert node.calls() == [f"start commscope-collector@{JOB}.service"]
    assert f"port {busy} is in use on node001" in done.stderr


# ---- the direct launcher (no systemd) and the epilog's clean-up

# commscope for the direct launcher: `collect`/`aggregate` run until SIGTERM (then exit 0, as
# after a drain), or ignore it with $STUB_IGNORE_TERM; `keys` is the real CLI's.
DAEMON = f"""#!/bin/bash
if [[ "$1" == collect || "$1" == aggregate ]]; then
    echo "$$ $*" >>"$STUB_DIR/daemons"
    if [[ -n "${{STUB_IGNORE_TERM:-}}" ]]; then trap '' TERM; else trap 'exit 0' TERM; fi
    while :; do sleep 0.1; done
fi
exec {sys.executable} -m commscope.service.cli "$@"
"""


def direct(node: Node, **extra: str) -> dict[str, str]:
    (node.root / "bin" / "commscope").write_text(DAEMON)
    settings = {"COMMSCOPE_LAUNCHER": "direct", "COMMSCOPE_COLLECTOR_STOP_TIMEOUT": "3"}
    return fast(node, **{**settings, **extra})


def daemons(node: Node) -> dict[str, tuple[int, list[str]]]:
    """The stub daemons started so far: command -> (pid, arguments)."""
    found = {}
    path = node.root / "daemons"
    for line in path.read_text().splitlines() if path.exists() else []:
        pid, command, *args = line.split()
        found[command] = (int(pid), args)
    return found


def alive(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def reaper(node: Node) -> Iterator[Node]:
    """Kill whatever stub daemon a test left running."""
    yield node
    for pid, _ in daemons(node).values():
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_direct_launcher_starts_detached_daemons_with_the_units_flags(reaper: Node) -> None:
    node = reaper
    done = node.run(PROLOG, direct(node))
    assert done.returncode == 0, done.stderr
    assert node.calls() == []  # no systemctl
    started = daemons(node)
    assert set(started) == {"collect", "aggregate"}
    run = node.state_root / "commscope-run" / JOB
    for command, name in (("collect", "collector"), ("aggregate", "aggregator")):
        pid, _ = started[command]
        assert (run / f"{name}.pid").read_text().strip() == str(pid)
        assert os.getsid(pid) == pid  # its own session: slurmd's process group is not its
        assert os.readlink(f"/proc/{pid}/cwd") == "/"  # holds no folder of slurmd's
        assert (node.root / "log" / f"{JOB}-{name}.log").exists()
    collect = started["collect"][1]
    assert collect[collect.index("--state") + 1] == str(node.state_root / "commscope" / JOB)
    assert collect[collect.index("--drain") + 1] == "20"
    keys = Path(collect[collect.index("--keys") + 1])
    assert [p.name for p in keys.iterdir()] == ["node.key_secret"]
    aggregate = started["aggregate"][1]
    assert aggregate[aggregate.index("--listen") + 1] == f"tcp://0.0.0.0:{PORT}"
    assert aggregate[aggregate.index("--out") + 1] == str(node.reports / JOB)
    assert "direct" in done.stderr


@pytest.mark.parametrize(("mark", "systemctl"), [(True, True), (False, False)])
def test_auto_launcher_is_systemd_only_where_systemd_runs(
    reaper: Node, mark: bool, systemctl: bool
) -> None:
    node = reaper
    marker = node.root / "run-systemd-system"
    if mark:
        marker.mkdir()
    env = direct(node, COMMSCOPE_LAUNCHER="auto", COMMSCOPE_SYSTEMD_MARK=str(marker))
    node.run(PROLOG, env)
    assert bool(node.calls()) == systemctl
    assert bool(daemons(node)) != systemctl


def _job_left_files(node: Node) -> list[Path]:
    """Traces, state and pid files of the job on this node (what the epilog removes)."""
    roots = [
        node.trace_root / JOB,
        node.state_root / "commscope" / JOB,
        node.state_root / "commscope-aggregator" / JOB,
        node.state_root / "commscope-run" / JOB,
        node.env_dir / f"{JOB}.env",
    ]
    return [p for p in roots if p.exists()]


def test_direct_epilog_stops_both_and_removes_the_job_s_files(reaper: Node) -> None:
    node = reaper
    node.run(PROLOG, direct(node))
    for folder in ("commscope", "commscope-aggregator"):
        (node.state_root / folder / JOB).mkdir(parents=True, exist_ok=True)
    (node.trace_root / JOB / "rank0_trace.json").write_text("{}")
    (node.reports / JOB / "report.txt").write_text("the report\n")
    done = node.run(EPILOG, direct(node))
    assert done.returncode == 0, done.stderr
    assert not any(alive(pid) for pid, _ in daemons(node).values())
    assert _job_left_files(node) == []
    assert (node.reports / JOB / "report.txt").exists()  # kept where the docs say
    assert (node.user_reports / f"commscope-{JOB}" / "report.txt").exists()
    assert (node.root / "log" / f"{JOB}-collector.log").exists()


def test_epilog_keeps_the_traces_of_a_collector_it_had_to_kill(reaper: Node) -> None:
    node = reaper
    node.run(PROLOG, direct(node, STUB_IGNORE_TERM="1"))
    done = node.run(EPILOG, direct(node, COMMSCOPE_AGGREGATOR_WAIT="1"))
    assert done.returncode == 0
    assert not any(alive(pid) for pid, _ in daemons(node).values())  # SIGKILLed
    assert "did not end 3s after SIGTERM: killed" in done.stderr
    assert "trace folder" in done.stderr and (node.trace_root / JOB).exists()
    assert not (node.state_root / "commscope-run" / JOB).exists()


def test_epilog_never_outlives_its_bound(node: Node) -> None:
    """systemctl hangs: every step is cut at COMMSCOPE_EPILOG_TIMEOUT, the rest skipped."""
    node.aggregator_active_for(1_000_000)
    env = node.environment(COMMSCOPE_EPILOG_TIMEOUT="3", STUB_HANG="1")
    start = time.monotonic()
    done = node.run(EPILOG, env, timeout=60)
    assert done.returncode == 0
    assert time.monotonic() - start < 30  # 3 s, far below the steps' own bounds (30+25+20 s)
    assert "out of time (3s): skipped systemctl is-active" in done.stderr
    (took,) = re.findall(r"epilog done in (\d+)s", done.stderr)
    assert int(took) <= 5


def script_default(script: Path, name: str) -> int:
    """The default of setting `name` in `script` (its `: "${NAME:=N}"` line)."""
    match = re.search(rf'^: "\${{{name}:=(\d+)}}"', script.read_text(), re.M)
    assert match, name
    return int(match[1])


def test_the_epilog_s_bound_holds_its_steps_and_outwaits_what_the_prolog_gives() -> None:
    """The collector drains (--drain) within the epilog's stop timeout, the aggregator lingers
    (--linger) within its wait, and the steps' bounds fit in the 90 s the docs promise (a
    systemd unit's longer TimeoutStopSec goes on after the epilog, which keeps the traces)."""
    epilog = {
        name: script_default(EPILOG, f"COMMSCOPE_{name}")
        for name in ("EPILOG_TIMEOUT", "COLLECTOR_STOP_TIMEOUT", "AGGREGATOR_WAIT",
                     "AGGREGATOR_STOP_TIMEOUT", "COPY_TIMEOUT", "QUERY_TIMEOUT")
    }  # fmt: skip
    assert epilog["EPILOG_TIMEOUT"] == 90
    assert script_default(PROLOG, "COMMSCOPE_DRAIN") < epilog["COLLECTOR_STOP_TIMEOUT"]
    assert script_default(PROLOG, "COMMSCOPE_LINGER") < epilog["AGGREGATOR_WAIT"]
    steps = sum(v for k, v in epilog.items() if k not in ("EPILOG_TIMEOUT", "QUERY_TIMEOUT"))
    assert steps + epilog["QUERY_TIMEOUT"] <= epilog["EPILOG_TIMEOUT"]
