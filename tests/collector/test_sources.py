"""Sources as plug-ins: the registry picks a file's source by its name, one loop reads any
source, and a source added in a test (a toy text format: one class, one registration) is read
by `commscope report` like the three built in."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
from commscope.collector import sources
from commscope.collector.inspector_file import INSPECTOR
from commscope.collector.kineto import KINETO
from commscope.collector.nsysdb import NSYS
from commscope.collector.source import File, Live, Rank, Reading, drain
from commscope.model.inspector import NO_COMPUTE
from commscope.model.schema import CommOp, Event, FileStats, GpuOp, Step, TraceMeta
from commscope.model.schema import Source as SourceKind
from commscope.service.cli import main


@pytest.mark.parametrize(
    ("name", "kind", "followed"),
    [
        ("rank3_trace.json", "kineto", True),
        ("host_pid.pt.trace.json.gz", "kineto", True),
        ("node1-pid4242.log", "inspector", True),
        ("nccl_inspector.jsonl.gz", "inspector", True),
        ("run.sqlite", "nsys", False),
        ("run.nsys-rep", "nsys", False),  # claimed, to say it must be exported first
    ],
)
def test_the_registry_picks_a_files_source_by_its_name(
    name: str, kind: str, followed: bool
) -> None:
    source = sources.claiming(name)
    assert source is not None and source.kind == kind
    assert (sources.is_input(name), sources.is_followed(name)) == (True, followed)


@pytest.mark.parametrize("name", ["meta.json.tmp", "train.log", "rank0.jsonl", "notes.txt"])
def test_a_name_no_source_claims_is_no_input(name: str) -> None:
    assert sources.claiming(name) is None and not sources.is_input(name)
    assert sources.reader_of(name) is sources.DEFAULT is KINETO  # an odd name read as a trace


def test_each_source_says_how_it_is_followed_live_and_what_it_cannot_fill() -> None:
    assert [(s.kind, s.live) for s in sources.SOURCES] == [
        ("inspector", "tail"),
        ("flight", "rewritten"),  # Flight Recorder dumps: reported apart, read again if rewritten
        ("kineto", "document"),
        ("nsys", None),
    ]
    assert (dict(KINETO.lacks), dict(NSYS.lacks)) == ({}, {})
    assert INSPECTOR.lacks["overlap"] == NO_COMPUTE and "matching" not in INSPECTOR.lacks


# ---------------------------------------------------------------- the one loop


@dataclass
class Scripted:
    """A reading that hands out the batches it is given, then its ranks."""

    given: list[tuple[Hashable, list[Event]]]
    keys: list[Hashable]

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]:
        yield from self.given

    def ranks(self) -> list[Rank]:
        return [Rank(key, TraceMeta(), FileStats()) for key in self.keys]


@dataclass
class Kept:
    events: list[Event] = field(default_factory=list)

    def add_all(self, events: Iterable[Event]) -> None:
        self.events.extend(events)


def step(n: int) -> Step:
    return Step(n, n * 10, 10, 1)


def test_the_loop_adds_each_batch_to_its_ranks_sink_and_gives_the_ranks_in_their_order() -> None:
    reading = Scripted(
        [("b", [step(1)]), ("a", [step(2), step(3)]), ("b", [step(4)])], ["a", "b", "c"]
    )
    seen: list[int] = []
    found = drain(reading, Kept, seen.append)
    assert [(rank.key, kept.events) for rank, kept in found] == [
        ("a", [step(2), step(3)]),
        ("b", [step(1), step(4)]),
        ("c", []),  # a rank without events gets a sink of its own, empty
    ]
    assert seen == [1, 2, 1]


# ---------------------------------------------------------------- a source added in a test

TICKS = cast(SourceKind, "ticks")  # a real source adds its kind to `schema.Source` (wire-checked)
TOY = """\
rank 0 of 2
compute 0 100
allreduce 50 150 4096
"""


@dataclass(frozen=True)
class Ticks:
    """A toy format, one rank per `.ticks` file: `rank R of W`, then `compute START END` and
    `allreduce START END BYTES` lines (microseconds)."""

    kind: SourceKind = TICKS
    live: Live | None = None
    lacks: dict[str, str] = field(default_factory=dict)

    def claims(self, name: str) -> bool:
        return name.endswith(".ticks")

    def read(self, file: File) -> Reading:
        return TicksReading(file)


class TicksReading:
    def __init__(self, file: File) -> None:
        self.file, self.meta = file, TraceMeta()

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]:
        with self.file.open() as stream:
            lines = [line.split() for line in stream.read().decode().splitlines()]
        (_, rank, _, world), *rest = lines
        self.meta = TraceMeta(rank=int(rank), world_size=int(world), backend="nccl", source=TICKS)
        yield 0, [self.event(what, *map(int, numbers)) for what, *numbers in rest]

    def event(self, what: str, start: int, end: int, size: int = 0) -> Event:
        start_ns, dur_ns = start * 1000, (end - start) * 1000
        if what == "compute":
            return GpuOp("compute", start_ns, dur_ns)
        return CommOp("AllReduce", start_ns, dur_ns, size, 2, on_gpu=True)

    def ranks(self) -> list[Rank]:
        return [Rank(0, self.meta, FileStats(events=2))]


def test_a_source_added_with_one_registration_is_read_by_the_report_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "SOURCES", (*sources.SOURCES, Ticks()))  # the registration
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rank0.ticks").write_text(TOY)
    (tmp_path / "run" / "rank1.ticks").write_text(TOY.replace("rank 0", "rank 1"))
    out = tmp_path / "out"
    argv = ["report", str(tmp_path / "run"), "--out", str(out), "--no-progress", "--jobs", "1"]
    assert main(argv) == 0
    (doc_path,) = out.glob("*.json")
    doc = json.loads(doc_path.read_text())
    assert doc["ranks"] == [0, 1] and doc["inputs"]["sources"] == {"ticks": 2}
    # each rank: communication 50..150 us, compute 0..100 us: half of it hidden
    row = doc["overlap"]["per_rank"]["1"]
    assert (row["ratio"], row["comm_time_s"], row["overlapped_time_s"]) == (0.5, 1e-4, 5e-5)
    assert row["source"] == "gpu kernels"
    text = doc_path.with_suffix(".txt").read_text()
    assert "Source: ticks (2 (window, rank) pairs)" in text
