"""The image scripts/image.sh builds (deploy/container/Containerfile): it runs as a non-root
user with a read-only root, and an aggregator and two collectors run as containers on
loopback write the report `commscope report` writes for the same traces.

Needs podman (with mmdebstrap, as root). When podman cannot run here the tests skip with the
reason; with podman in COMMSCOPE_REQUIRE_TOOLS (CI) they fail instead. The base tarball is
cached in .venv/image-cache between runs (COMMSCOPE_IMAGE_CACHE); the first build takes about
two minutes, a cached one about half a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploycheck import REPO
from service.harness import DLRM, free_port, normalised, offline
from tools import needs_shared, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE = "commscope:0.1.0"
CONTAINERS_CONF = REPO / "deploy" / "container" / "containers.conf"
SAMPLE = REPO / "samples" / "gloo_ddp_2rank"
UID = 10001
HOME = "/var/lib/commscope"


def unavailable(reason: str) -> None:
    """Skip (the reason printed), or fail where COMMSCOPE_REQUIRE_TOOLS names podman."""
    required = os.environ.get("COMMSCOPE_REQUIRE_TOOLS", "")
    if required == "1" or "podman" in required.split(","):
        pytest.fail(f"podman is required but cannot run: {reason}")
    pytest.skip(f"podman cannot run here: {reason}")


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def podman(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=environment(),
        check=False,
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The image, built by scripts/image.sh (once per test run)."""
    require_tool("podman")
    require_tool("mmdebstrap")
    if os.geteuid() != 0:
        unavailable("not root (mmdebstrap and podman run here as root)")
    info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout_s=60)
    if info.returncode != 0:
        unavailable(info.stderr.strip().splitlines()[-1] if info.stderr.strip() else "podman info")
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "image.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment(),
        check=False,
    )
    if built.returncode != 0:
        unavailable(f"scripts/image.sh failed:\n{built.stderr[-3000:]}")
    print(built.stdout.strip())  # the image's size and build time, in -s output
    return IMAGE


class Containers:
    """Containers started by one test, all removed at teardown."""

    def __init__(self) -> None:
        self.prefix = f"commscope-test-{uuid.uuid4().hex[:8]}"
        self.names: list[str] = []

    def start(self, name: str, *args: str) -> str:
        full = f"{self.prefix}-{name}"
        done = podman("run", "--detach", "--name", full, *args)
        assert done.returncode == 0, done.stderr
        self.names.append(full)
        return full

    def wait(self, name: str, timeout_s: float = 180) -> int:
        done = podman("wait", name, timeout_s=timeout_s)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())

    def logs(self, name: str) -> str:
        done = podman("logs", name)
        return (done.stdout + done.stderr)[-4000:]

    def remove(self) -> None:
        for name in self.names:
            podman("rm", "--force", "--time", "0", name)


@pytest.fixture
def containers() -> Iterator[Containers]:
    started = Containers()
    yield started
    started.remove()


def run_once(
    image: str, *args: str, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`podman run` of the image with a read-only root and no network (`options` before it)."""
    return podman("run", "--rm", "--read-only", "--network", "none", *options, image, *args)


def writable(folder: Path) -> str:
    """A host folder the image's user (uid 10001) may write: a volume for state or reports."""
    folder.mkdir(parents=True)
    os.chown(folder, UID, UID)
    return str(folder)


def readable(folder: Path) -> str:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(folder)


def test_image_script_is_shellcheck_clean_and_executable() -> None:
    shellcheck = require_tool("shellcheck")
    script = REPO / "scripts" / "image.sh"
    done = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    assert os.access(script, os.X_OK)


def test_image_runs_as_a_non_root_user_with_a_read_only_root(image: str) -> None:
    done = run_once(image, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "commscope 0.1.0"
    config = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["commscope"]


def test_default_jobs_follow_the_container_cpu_limit(image: str) -> None:
    helps = {
        cpus: run_once(image, "collect", "--help", options=("--cpus", cpus) if cpus else ()).stdout
        for cpus in ("1", "")
    }
    limited, free = (" ".join(text.split()) for text in helps.values())
    assert "CPU limit" in limited
    assert "), 1 here;" in limited
    assert f"), {len(os.sched_getaffinity(0))} here;" in free


def layout(source: Path, root: Path) -> Path:
    """The traces of `source` under `root`, a window per folder (files at its top level go
    to a folder named after it); other files (a LICENSE) left out."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and "trace" in path.name:
            relative = path.relative_to(source)
            if relative.parent == Path("."):
                relative = Path(source.name) / relative
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, root / relative)
    return root


def split_ranks(root: Path, nodes: dict[str, Path]) -> None:
    """Each rank's files to one node's trace folder (ranks alternate), windows kept."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    ranks = sorted({p.name for p in files})
    for path in files:
        node = list(nodes)[ranks.index(path.name) % len(nodes)]
        target = nodes[node] / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def one_json(folder: Path) -> dict[str, Any]:
    (found,) = sorted(folder.rglob("*.json"))
    return normalised(json.loads(found.read_text()))


SOURCES = [
    pytest.param(SAMPLE, id="gloo_ddp_2rank"),
    pytest.param(
        DLRM,
        id="dlrm_8rank_v100",
        marks=needs_shared("kineto", "dlrm_8rank_v100"),
    ),
]


@pytest.mark.parametrize("source", SOURCES)
def test_aggregator_and_two_collectors_in_containers_write_the_offline_report(
    image: str, containers: Containers, tmp_path: Path, source: Path
) -> None:
    traces = layout(source, tmp_path / "all")
    nodes = {"node-a": tmp_path / "traces-a", "node-b": tmp_path / "traces-b"}
    split_ranks(traces, nodes)
    listen, metrics = free_port(), free_port()
    endpoint = f"tcp://127.0.0.1:{listen}"
    common = ("--read-only", "--network", "host")
    aggregator = containers.start(
        "aggregator",
        *common,
        "--volume",
        f"{writable(tmp_path / 'aggregator')}:{HOME}",
        image,
        *("aggregate", "--listen", endpoint, "--insecure", "--expect-nodes", "2"),
        *("--metrics-port", str(metrics), "--metrics-addr", "127.0.0.1", "--linger", "0"),
        *("--out", f"{HOME}/reports", "--state", f"{HOME}/state"),
    )
    collectors = [
        containers.start(
            node,
            *common,
            *(["--cpus", "1"] if node == "node-b" else []),  # --jobs 1 there, the CPUs here
            *("--volume", f"{readable(folder)}:/traces:ro"),
            *("--volume", f"{writable(tmp_path / f'state-{node}')}:{HOME}"),
            image,
            *("collect", "--watch", "/traces", "--aggregator", endpoint, "--node", node),
            *("--state", f"{HOME}/state", "--insecure", "--once", "--file-idle", "0.5"),
        )
        for node, folder in nodes.items()
    ]
    for name in collectors:
        assert containers.wait(name) == 0, containers.logs(name)
    assert containers.wait(aggregator) == 0, containers.logs(aggregator)
    live = one_json(tmp_path / "aggregator" / "reports")
    reference = normalised(offline(traces))
    assert live == reference
    assert report_in_image(image, traces, tmp_path) == reference


def report_in_image(image: str, traces: Path, tmp_path: Path) -> dict[str, Any]:
    """`commscope report` of `traces` in the image, with a read-only root."""
    out = writable(tmp_path / "report")
    done = podman(
        "run",
        "--rm",
        "--read-only",
        "--network",
        "none",
        *("--volume", f"{readable(traces)}:/traces:ro", "--volume", f"{out}:/out"),
        image,
        *("report", "/traces", "--out", "/out", "--no-progress"),
        timeout_s=300,
    )
    assert done.returncode == 0, done.stderr
    return one_json(Path(out))
