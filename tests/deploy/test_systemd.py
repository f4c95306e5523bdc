"""The systemd units: the commands they run, how they stop, and what systemd-analyze says."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from commscope.service.cli import EXIT_FAILED, EXIT_LOST, EXIT_USAGE
from deploycheck import DEPLOY, FLAGS, REQUIRED, env_file, require_tool

SYSTEMD = DEPLOY / "systemd"
COLLECTOR = SYSTEMD / "commscope-collector@.service"
AGGREGATOR = SYSTEMD / "commscope-aggregator@.service"
BINARY = "/usr/local/bin/commscope"

UNITS = {"collect": COLLECTOR, "aggregate": AGGREGATOR}
EXTRA_ARGS = {"collect": "COMMSCOPE_COLLECT_ARGS", "aggregate": "COMMSCOPE_AGGREGATE_ARGS"}


def directives(unit: Path, section: str) -> list[tuple[str, str]]:
    """(key, value) pairs of one section, in order, repeated keys kept (systemd allows them)."""
    pairs, current = [], None
    for raw in unit.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section:
            key, _, value = line.partition("=")
            pairs.append((key.strip(), value.strip()))
    return pairs


def setting(unit: Path, key: str, section: str = "Service") -> str:
    values = [v for k, v in directives(unit, section) if k == key]
    assert len(values) == 1, f"{unit.name}: {key} set {len(values)} times"
    return values[0]


def exec_start(unit: Path) -> list[str]:
    return shlex.split(setting(unit, "ExecStart"))


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)\s*(s|min)?", value)
    assert match, value
    return int(match[1]) * (60 if match[2] == "min" else 1)


@pytest.mark.parametrize("command", ["collect", "aggregate"])
def test_execstart_runs_the_subcommand_with_known_flags(command: str) -> None:
    argv = exec_start(UNITS[command])
    assert argv[:2] == [BINARY, command]
    flags = {a for a in argv if a.startswith("--")}
    assert flags <= FLAGS[command], flags - FLAGS[command]
    assert flags >= REQUIRED[command]
    # Extra flags come from one whitespace-split variable, last.
    assert argv[-1] == f"${EXTRA_ARGS[command]}"


@pytest.mark.parametrize("command", ["collect", "aggregate"])
def test_documented_extra_args_are_known_flags(command: str) -> None:
    extra = shlex.split(env_file(SYSTEMD / "example.env")[EXTRA_ARGS[command]])
    flags = {a for a in extra if a.startswith("--")}
    assert flags
    assert flags <= FLAGS[command] - REQUIRED[command]


@pytest.mark.parametrize("command", ["collect", "aggregate"])
def test_every_variable_of_execstart_is_documented(command: str) -> None:
    unit = UNITS[command]
    used = set(re.findall(r"\$\{?(\w+)\}?", setting(unit, "ExecStart")))
    documented = set(env_file(SYSTEMD / "example.env"))
    assert used <= documented, used - documented


def test_collector_reads_the_job_env_file_and_needs_it() -> None:
    assert setting(COLLECTOR, "EnvironmentFile") == "/etc/commscope/%i.env"


def test_aggregator_env_file_is_optional_and_defaults_are_complete() -> None:
    assert setting(AGGREGATOR, "EnvironmentFile") == "-/etc/commscope/%i.env"
    defaults = {
        v.partition("=")[0] for k, v in directives(AGGREGATOR, "Service") if k == "Environment"
    }
    used = set(re.findall(r"\$\{?(\w+)\}?", setting(AGGREGATOR, "ExecStart")))
    assert used <= defaults


@pytest.mark.parametrize(("command", "state"), [("collect", "commscope/%i"), ("aggregate", None)])
def test_state_flag_points_into_a_state_directory(command: str, state: str | None) -> None:
    unit = UNITS[command]
    argv = exec_start(unit)
    dirs = setting(unit, "StateDirectory").split()
    if state is not None:
        assert dirs == [state]
    assert argv[argv.index("--state") + 1] in {f"%S/{d}" for d in dirs}
    if command == "aggregate":
        assert argv[argv.index("--out") + 1] in {f"%S/{d}" for d in dirs}
        assert argv[argv.index("--job") + 1] == "%i"


@pytest.mark.parametrize("unit", [COLLECTOR, AGGREGATOR], ids=lambda u: u.name)
def test_stop_is_a_bounded_sigterm_and_failures_restart(unit: Path) -> None:
    assert setting(unit, "KillSignal") == "SIGTERM"
    assert setting(unit, "KillMode") == "mixed"
    assert seconds(setting(unit, "TimeoutStopSec")) >= 60
    assert setting(unit, "Restart") == "on-failure"


@pytest.mark.parametrize("unit", [COLLECTOR, AGGREGATOR], ids=lambda u: u.name)
def test_no_restart_on_a_code_a_restart_cannot_change(unit: Path) -> None:
    """6 (files lost, the reports written) and 2 (usage) are never restarted; 1 is (a crash,
    or a collector's key refused until it is allowed: the prolog relies on that)."""
    prevented = {int(code) for code in setting(unit, "RestartPreventExitStatus").split()}
    assert prevented == {EXIT_USAGE, EXIT_LOST}
    assert EXIT_FAILED not in prevented


def test_collector_hardening_leaves_trace_folders_readable() -> None:
    assert setting(COLLECTOR, "ProtectHome") == "read-only"
    assert setting(COLLECTOR, "PrivateTmp") == "no"
    assert setting(COLLECTOR, "CapabilityBoundingSet") == "CAP_DAC_READ_SEARCH"
    assert setting(COLLECTOR, "ProtectSystem") == "strict"
    assert not [k for k, _ in directives(COLLECTOR, "Service") if k == "DynamicUser"]


def size_bytes(value: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)", value)
    assert match, value
    return int(match[1]) * 1024 ** " KMG".index(match[2] or " ")


def test_the_collector_s_memory_is_capped_above_what_its_workers_need() -> None:
    """MemoryMax (the hard cap) above MemoryHigh (throttling), and room under MemoryHigh for
    the default --jobs workers at 256 MiB each (a 2 GB trace peaks near 200 MB) plus the
    main process."""
    high, top = (
        size_bytes(setting(COLLECTOR, "MemoryHigh")),
        size_bytes(setting(COLLECTOR, "MemoryMax")),
    )
    assert 0 < high < top
    argv = exec_start(COLLECTOR)
    assert argv[argv.index("--jobs") + 1] == "${COMMSCOPE_COLLECT_JOBS}"
    defaults = dict(
        v.partition("=")[::2] for k, v in directives(COLLECTOR, "Service") if k == "Environment"
    )
    jobs = int(defaults["COMMSCOPE_COLLECT_JOBS"])
    assert high >= (jobs + 1) * 256 * 2**20
    assert env_file(SYSTEMD / "example.env")["COMMSCOPE_COLLECT_JOBS"] == str(jobs)


@pytest.fixture
def runnable_units(tmp_path: Path) -> list[Path]:
    """Copies whose ExecStart binary exists (verify insists), with a job instance of each."""
    instances = []
    for unit in (COLLECTOR, AGGREGATOR):
        text = unit.read_text(encoding="utf-8").replace(BINARY, "/bin/true")
        (tmp_path / unit.name).write_text(text, encoding="utf-8")
        instance = tmp_path / unit.name.replace("@.", "@4242.")
        instance.symlink_to(unit.name)
        instances.append(instance)
    return instances


# What systemd-analyze verify may say that is not about these units:
# - the per-job EnvironmentFile does not exist: the prolog (or an admin) writes it at job start;
# - lines that do not name a commscope unit concern the host's own units that ours reach through
#   After=/Wants= (network-online.target...), which this repository does not ship.
# On Debian 12's systemd 252, in this container as on a booted host, verify prints nothing.
BENIGN = (re.compile(r"/etc/commscope/\S*\.env"), re.compile(r"^(?!.*commscope).*$"))


def test_systemd_analyze_verify_accepts_the_units(runnable_units: list[Path]) -> None:
    tool = require_tool("systemd-analyze")
    done = subprocess.run(
        [tool, "verify", "--man=no", "--recursive-errors=no", *map(str, runnable_units)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    unexpected = [line for line in lines if not any(b.search(line) for b in BENIGN)]
    assert not unexpected, "\n".join(unexpected)
    assert done.returncode == 0 or lines, done


@pytest.mark.parametrize("index", [0, 1], ids=["collector", "aggregator"])
def test_systemd_analyze_security_rates_the_units_ok(
    runnable_units: list[Path], index: int
) -> None:
    """Exposure at most 3.5 of 10 ("OK"); both are about 2-2.6 today."""
    tool = require_tool("systemd-analyze")
    done = subprocess.run(
        [tool, "security", "--offline=true", "--threshold=35", str(runnable_units[index])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if "unrecognized option" in done.stderr:
        pytest.skip("this systemd-analyze has no --offline (systemd < 250)")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr


@pytest.mark.parametrize(
    ("unit", "credential"),
    [(COLLECTOR, "node.key_secret"), (AGGREGATOR, "aggregator.key_secret")],
    ids=["collector", "aggregator"],
)
def test_the_secret_key_arrives_as_a_systemd_credential(unit: Path, credential: str) -> None:
    """--keys is the unit's credentials folder (%d), holding exactly the one secret key."""
    argv = exec_start(unit)
    assert argv[argv.index("--keys") + 1] == "%d"
    name, _, source = setting(unit, "LoadCredential").partition(":")
    assert name == credential
    assert source == f"/etc/commscope/keys/{credential}"


def test_public_keys_are_read_in_place_from_documented_defaults() -> None:
    collector, aggregator = exec_start(COLLECTOR), exec_start(AGGREGATOR)
    assert collector[collector.index("--server-key") + 1] == "${COMMSCOPE_SERVER_KEY}"
    assert aggregator[aggregator.index("--allow") + 1] == "${COMMSCOPE_ALLOW_DIR}"
    env = env_file(SYSTEMD / "example.env")
    assert env["COMMSCOPE_SERVER_KEY"] == "/etc/commscope/keys/aggregator.key"
    assert env["COMMSCOPE_ALLOW_DIR"] == "/etc/commscope/keys/allow"


@pytest.mark.parametrize("unit", [COLLECTOR, AGGREGATOR], ids=lambda u: u.name)
def test_the_open_file_limit_is_raised_above_the_default_1024(unit: Path) -> None:
    """A flood of connections never exhausts the aggregator's descriptors (it raises its
    soft limit to this hard one at start)."""
    assert int(setting(unit, "LimitNOFILE")) >= 65536
