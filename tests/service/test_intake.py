"""The aggregator's intake: what a drain costs in fsyncs, that what one drain made durable is
there after a restart, and that a collector's resent Hello does not undo its end-of-run. In
process (`Aggregator.receive` and `commit`, as the loop's
drain calls them), with `os.fsync` counted."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from commscope.model.schema import (
    PROTOCOL_VERSION,
    CommOp,
    EndOfRun,
    GpuOp,
    Hello,
    Record,
    StreamEnd,
    StreamStart,
    TraceMeta,
)
from commscope.pipeline.edge import Reduction
from commscope.service.aggregate import Aggregator, AggregatorSettings
from commscope.service.links import own_stream

NODE = "n1"


def run_of(rank: int, end: bool = True) -> list[Record]:
    """A rank file's records: its start, one Facts record, its end (unless `end` is False)."""
    stream = f"{rank:032x}"
    reduction = Reduction()
    reduction.add_all(
        [GpuOp("compute", 0, 100), CommOp("AllReduce", 50, 100, 4096, 1, True, "0", 2)]
    )
    start = StreamStart(
        stream=stream, node=NODE, path=f"/run/w/rank{rank}.json", folder="w", root_name="run"
    )
    records: list[Record] = [start, *reduction.facts(stream, 1)]
    meta = TraceMeta(rank=rank, world_size=2, backend="nccl")
    return [*records, StreamEnd(stream=stream, seq=len(records), meta=meta)] if end else records


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every `os.fsync` made, by its file descriptor (the real fsync still runs)."""
    made: list[int] = []
    real: Callable[[int], None] = os.fsync

    def counted(fd: int) -> None:
        made.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return made


def drain(aggregator: Aggregator, records: list[Record]) -> None:
    for record in records:
        aggregator.receive([NODE.encode(), msgspec.msgpack.encode(record)], peer=NODE)
    aggregator.commit()


def test_a_drain_is_made_durable_with_one_fsync(agg: Aggregator, fsyncs: list[int]) -> None:
    """Drain 1: 8 files streamed whole (start, facts, end) and 8 half (start, facts): 24
    records logged and 8 results, all in the journal's first segment: its fsync and, as it
    was created, its folder's: 2. Drain 2: the 8 half files end (8 results): 1 fsync. A store
    with a log and a result file per stream made 16 logs + 8 results x 2 (file, folder) = 32,
    then 8 x 2 = 16."""
    drain(
        agg,
        [r for rank in range(8) for r in run_of(rank)]
        + [r for rank in range(8, 16) for r in run_of(rank, end=False)],
    )
    assert (len(fsyncs), len(agg.aggregation.finished), len(agg.aggregation.open)) == (2, 8, 8)
    fsyncs.clear()
    drain(agg, [run_of(rank)[-1] for rank in range(8, 16)])
    assert (len(fsyncs), len(agg.aggregation.finished)) == (1, 16)


def test_what_a_drain_acknowledged_is_there_after_a_restart(
    agg: Aggregator, tmp_path: Path
) -> None:
    """A drain's results and half streams, synced once, read back by a new aggregator on the
    same state (the old one not closed, as when killed): 8 finished, 8 open at seq 2."""
    drain(
        agg,
        [r for rank in range(8) for r in run_of(rank)]
        + [r for rank in range(8, 16) for r in run_of(rank, end=False)],
    )
    again = Aggregator(agg.settings, clock=lambda: 1000.0)
    try:
        keys = [own_stream(NODE, f"{rank:032x}") for rank in range(16)]
        assert sorted(again.aggregation.finished) == sorted(keys[:8])
        assert [again.aggregation.position(keys[r]) for r in (8, 15)] == [(2, False)] * 2
    finally:
        again.store.close()


def message(aggregator: Aggregator, sent: object) -> None:
    aggregator.receive([NODE.encode(), msgspec.msgpack.encode(sent)], peer=NODE)


def test_a_resent_hello_after_end_of_run_does_not_reopen_the_node(tmp_path: Path) -> None:
    """The collector's end-of-run waits past its resend timeout, so it sends [Hello, EndOfRun]
    again; the first EndOfRun is answered (the collector exits) and the second is lost (a full
    send queue drops it). The aggregator sees EndOfRun, Hello, and nothing more: the run is
    over (1 node expected, ended), where reopening the node on that Hello waited forever."""
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "o", state=tmp_path / "s", expect_nodes=1
    )
    aggregator = Aggregator(settings, clock=lambda: 1000.0)
    try:
        hello = Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="c" * 32)
        for sent in (hello, EndOfRun(node=NODE, reason="stopped"), hello):
            message(aggregator, sent)
        assert (aggregator.nodes, aggregator._over()) == ({NODE: True}, True)
    finally:
        aggregator.store.close()


def test_a_resent_hello_after_a_restart_of_the_aggregator_does_not_reopen_the_node(
    tmp_path: Path,
) -> None:
    """As above, but the resent Hello reaches an aggregator restarted from the same state
    folder: which instance ended the node is kept there, so the run is still over."""
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "o", state=tmp_path / "s", expect_nodes=1
    )
    hello = Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="c" * 32)
    first = Aggregator(settings, clock=lambda: 1000.0)
    try:
        message(first, hello)
        message(first, EndOfRun(node=NODE, reason="stopped"))
    finally:
        first.store.close()
    again = Aggregator(settings, clock=lambda: 2000.0)
    try:
        message(again, hello)
        assert (again.nodes, again._over()) == ({NODE: True}, True)
        message(again, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="d" * 32))
        assert again.nodes == {NODE: False}  # another instance: a collector restarted
    finally:
        again.store.close()


def test_an_end_of_run_before_any_hello_still_knows_its_resent_hello(tmp_path: Path) -> None:
    """A restarted aggregator hears a collector's first end-of-run, which goes without a
    Hello; then the Hello leading that collector's resend, whose EndOfRun is lost (the
    collector, acknowledged, exits with LINGER 0). The end-of-run names its instance, so the
    Hello is a resend and the run is over (found by the chaos test, seed 1: it waited on)."""
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "o", state=tmp_path / "s", expect_nodes=1
    )
    aggregator = Aggregator(settings, clock=lambda: 1000.0)
    try:
        message(aggregator, EndOfRun(node=NODE, reason="stopped", instance="c" * 32))
        message(aggregator, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="c" * 32))
        assert (aggregator.nodes, aggregator._over()) == ({NODE: True}, True)
    finally:
        aggregator.store.close()


def test_a_hello_from_a_new_collector_instance_reopens_an_ended_node(tmp_path: Path) -> None:
    """A collector restarted on the node (another instance) after its end-of-run: the node
    is at work again, and the run waits for its new end-of-run."""
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "o", state=tmp_path / "s", expect_nodes=1
    )
    aggregator = Aggregator(settings, clock=lambda: 1000.0)
    try:
        message(aggregator, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="c" * 32))
        message(aggregator, EndOfRun(node=NODE, reason="stopped"))
        message(aggregator, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="d" * 32))
        assert (aggregator.nodes, aggregator._over()) == ({NODE: False}, False)
    finally:
        aggregator.store.close()
