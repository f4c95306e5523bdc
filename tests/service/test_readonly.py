"""The collector and `commscope report` under a read-only root, as a Kubernetes sidecar with
`readOnlyRootFilesystem: true` and no /tmp runs them: a private mount namespace (`unshare -m`,
we are root) where `/` (and /tmp, /var/tmp when they are mounts of their own) is remounted
read-only, only the folders a command must write bound writable, TMPDIR unset and the working
directory `/`. The workers start without a temporary folder, so nothing is lost and the
reports equal `commscope report` run normally (JSON without `provenance`); a folder that
cannot be written, or workers that cannot start, are one line; a file the collector cannot
read is counted on its /metrics, named in the report, and makes it exit 6. Skipped, with the
reason, where unshare or mount is not permitted. Every wait bounded; processes cleaned up.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any, Final

import pytest

from service.harness import (
    COMMSCOPE,
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    only_report,
    sample_value,
    wait_for,
)

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
NO_TEMP: Final = "unset TMPDIR TEMP TMP && cd /"
# uid 0 without the capabilities that bypass file permissions: a mode-000 file is unreadable
UNPRIVILEGED: Final = (
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
)


@functools.cache
def _namespace_refused() -> str | None:
    """Why a read-only root cannot be made here (None: it can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is not installed"
    script = "mount --make-rprivate / && mount -o remount,bind,ro / && ! test -w /"
    try:
        done = run(["unshare", "-m", "sh", "-c", script])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0:
        return f"a private read-only mount namespace is not permitted: {done.stderr.strip()}"
    return None


@pytest.fixture(autouse=True)
def _read_only_root_possible() -> None:
    """Skip, saying why, where the namespace cannot be made (fail when CI requires it:
    COMMSCOPE_REQUIRE_TOOLS names unshare)."""
    refused = _namespace_refused()
    if refused is None:
        return
    required = os.environ.get("COMMSCOPE_REQUIRE_TOOLS", "")
    if required == "1" or "unshare" in required.split(","):
        pytest.fail(f"{refused}, and COMMSCOPE_REQUIRE_TOOLS requires unshare")
    pytest.skip(refused)


def read_only_root(*argv: str, writable: tuple[Path, ...] = (), shm: bool = True) -> list[str]:
    """`argv` in a namespace whose root is read-only but the `writable` folders (made first);
    `shm` False: /dev/shm read-only too (no POSIX semaphore can be made)."""
    steps = ["mount --make-rprivate /"]
    steps += [f"mount --bind {shlex.quote(str(w))} {shlex.quote(str(w))}" for w in writable]
    steps.append("mount -o remount,bind,ro /")
    read_only = ["/tmp", "/var/tmp", *([] if shm else ["/dev/shm"])]
    steps += [f"{{ ! mountpoint -q {m} || mount -o remount,bind,ro {m}; }}" for m in read_only]
    script = " && ".join([*steps, NO_TEMP, 'exec "$@"'])
    return ["unshare", "-m", "sh", "-c", script, "sh", *argv]


def report_command(traces: Path, out: Path, *extra: str) -> list[str]:
    return [*COMMSCOPE[:2], "commscope.service.cli", "report", str(traces), "--out", str(out),
            *extra]  # fmt: skip


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def json_report(out: Path) -> dict[str, Any]:
    (found,) = out.glob("*.json")
    return normalised(json.loads(found.read_text()))


@pytest.mark.parametrize("shm", [True, False])
def test_report_with_workers_under_a_read_only_root_is_the_normal_report(
    tmp_path: Path, shm: bool
) -> None:
    """No /tmp to write, and without `shm` no /dev/shm either: the workers run over pipes
    (no forkserver socket, no POSIX semaphore), and the report is the one a writable root
    gives."""
    if not shm and not Path("/dev/shm").is_mount():
        pytest.skip("/dev/shm is not a mount of its own here")
    here, there = tmp_path / "normal", tmp_path / "read-only"
    there.mkdir()
    assert run(report_command(SAMPLE, here, "--jobs", "2")).returncode == 0
    argv = report_command(SAMPLE, there, "--jobs", "2")
    done = run(read_only_root(*argv, writable=(there,), shm=shm))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert json_report(there) == json_report(here)


def test_an_out_folder_on_a_read_only_mount_is_one_line(tmp_path: Path) -> None:
    """Even as root (who may write any folder a mode allows): checked before the analysis."""
    out = tmp_path / "out"
    out.mkdir()
    script = f'mount --make-rprivate / && mount -o bind,ro {out} {out} && exec "$@"'
    done = run(["unshare", "-m", "sh", "-c", script, "sh", *report_command(SAMPLE, out)])
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"commscope: error: cannot write {out}: Read-only file system ({out})\n"


def test_an_out_folder_with_no_space_left_is_one_line_and_keeps_no_part(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = f'mount --make-rprivate / && mount -t tmpfs -o size=16k tmpfs {out} && exec "$@"'
    done = run(["unshare", "-m", "sh", "-c", script, "sh", *report_command(SAMPLE, out)])
    assert done.returncode == 1
    assert (
        done.stderr.splitlines()[-1]
        == f"commscope: error: cannot write {out}: No space left on device"
    )
    assert "Traceback" not in done.stderr


def watch_of(tmp_path: Path) -> Path:
    """The bundled sample and an empty trace (skipped with its reason, live as offline)."""
    watch = tmp_path / "traces"
    shutil.copytree(SAMPLE, watch, ignore=shutil.ignore_patterns("LICENSE"))
    (watch / "iteration_4" / "rank2_trace.json").write_bytes(b'{"traceEvents": []}')
    return watch


def start_collector(
    procs: Processes, aggregate: Aggregate, watch: Path, state: Path, *extra: str,
    prefix: tuple[str, ...] = (), shm: bool = True,
) -> Any:  # fmt: skip
    state.mkdir()
    args = collector_args(watch, aggregate.endpoint, "n1", state, "--jobs", "2", *extra)
    argv = read_only_root(*prefix, *COMMSCOPE, *args, writable=(state,), shm=shm)
    return procs.spawn("collector", *argv)


def test_the_collector_under_a_read_only_root_loses_nothing(
    procs: Processes, tmp_path: Path
) -> None:
    """Its workers start by spawn (said at start), each whole file is reduced in one, and the
    final report is `commscope report`'s, the empty trace skipped alike."""
    watch = watch_of(tmp_path)
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))
    server = aggregate.start()
    collector = start_collector(procs, aggregate, watch, tmp_path / "state", "--once")
    assert collector.wait(120) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    (hello,) = [line for line in collector.lines() if line.get("msg") == "collector starting"]
    (end,) = [line for line in collector.lines() if line.get("msg") == "end of run acknowledged"]
    assert (hello["workers"], end["files_in_workers"], end["files_lost"]) == ("spawn", 5, 0)
    out = tmp_path / "offline"
    assert run(report_command(watch, out)).returncode == 3  # the empty trace: skipped
    assert normalised(aggregate.report()) == json_report(out)


def test_a_collector_whose_pool_cannot_start_says_dev_shm_and_loses_nothing(
    procs: Processes, tmp_path: Path
) -> None:
    """/dev/shm read-only too: the pool's semaphores cannot be made, the collector says so once
    naming /dev/shm, reads every file in its threads, and the report is `commscope report`'s."""
    if not Path("/dev/shm").is_mount():
        pytest.skip("/dev/shm is not a mount of its own here")
    watch = watch_of(tmp_path)
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))
    server = aggregate.start()
    collector = start_collector(procs, aggregate, watch, tmp_path / "state", "--once", shm=False)
    assert collector.wait(120) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    lines = collector.lines()
    (refused,) = [line for line in lines if line.get("msg", "").startswith("worker processes")]
    assert refused["reason"] == "/dev/shm: Read-only file system"
    (hello,) = [line for line in lines if line.get("msg") == "collector starting"]
    (end,) = [line for line in lines if line.get("msg") == "end of run acknowledged"]
    assert (hello["workers"], end["files_in_workers"], end["files_lost"]) == (None, 0, 0)
    out = tmp_path / "offline"
    assert run(report_command(watch, out)).returncode == 3  # the empty trace: skipped
    assert normalised(aggregate.report()) == json_report(out)


def test_a_file_the_collector_cannot_read_is_counted_named_and_exits_6(
    procs: Processes, tmp_path: Path
) -> None:
    """A mode-000 trace, a collector without the capabilities that bypass modes: three reads
    fail, /metrics counts the loss by reason, SIGTERM ends the run, the collector exits 6 and
    the report is `commscope report`'s (run alike) but for the reason, which says so."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    watch = watch_of(tmp_path)
    refused = watch / "iteration_8" / "rank1_trace.json.gz"
    refused.chmod(0)
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))
    server = aggregate.start()
    port = free_port()
    metrics = ("--metrics-port", str(port), "--metrics-addr", "127.0.0.1")
    collector = start_collector(
        procs, aggregate, watch, tmp_path / "state", *metrics, prefix=UNPRIVILEGED
    )
    url = f"http://127.0.0.1:{port}/metrics"
    lost = wait_for("the lost file on /metrics", lambda: _lost(url, collector), 90)
    assert lost == 1.0
    collector.terminate()
    assert collector.wait(60) == 6, collector.tail()
    assert server.wait(60) == 6, server.tail()  # the report is written, a file is lost
    assert [line["msg"] for line in collector.lines()].count("file lost") == 1
    out = tmp_path / "offline"
    assert run([*UNPRIVILEGED, *report_command(watch, out)]).returncode == 3
    expected = json_report(out)
    for skip in expected["inputs"]["skipped"]:
        if skip["path"] == str(refused):
            skip["reason"] = f"lost after 3 reads: {skip['reason']}"
    assert normalised(only_report(tmp_path / "out")) == expected


def _lost(url: str, collector: Any) -> float | None:
    if collector.popen.poll() is not None:
        raise AssertionError(f"collector exited:\n{collector.tail()}")
    with urllib.request.urlopen(url, timeout=2) as response:
        text = response.read().decode()
    value = sample_value(text, "commscope_collector_files_lost_total", reason="unreadable")
    return value or None  # a new series is served at 0 first (exporters/firstzero.py)
