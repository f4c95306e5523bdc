"""The live aggregation: verdicts, positions, supersedes, windows, and the report it makes.

Records are built the way `FileStream` builds them, without its thread: the trace is parsed
with `TraceReader`, its events reduced (`pipeline.edge.Reduction`) and the facts cut into
records of at most `size` items (any split is a valid stream); a file cut short sends none.
The offline run (`analyse`) is the oracle: the same files, delivered in any order, any number
of times, must give the same JSON document.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import random
import shutil
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from builders import A100, GPU, JAN_NS, MAR_NS, job_trace, write
from commscope.collector.discover import (
    find_windows,
    open_trace,
    rank_from_name,
    relative_folder,
    root_name,
)
from commscope.collector.kineto import TraceReader
from commscope.exporters import jsonreport
from commscope.exporters.prometheus import Snapshot, families
from commscope.model.errors import TraceError
from commscope.model.schema import (
    Diagnosis,
    Event,
    Facts,
    FileStats,
    FinishedFile,
    GpuOp,
    RankResult,
    Record,
    Skipped,
    StreamEnd,
    StreamStart,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.aggregation import RETIRED_SEQ, Aggregation, Applied, Verdict
from commscope.pipeline.edge import Reduction, facts, pack
from commscope.pipeline.report import Options
from commscope.service.aggregate import Aggregator, AggregatorSettings
from commscope.service.offline import analyse
from families_builder import BUILDERS, write_job
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import annotation, cpu_op, dims_args, dist_head, trace
from tools import needs_shared, require_shared, shared_traces

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
DLRM = shared_traces("kineto", "dlrm_8rank_v100")
NODE = "node0"
SAMPLE_EVENTS = 158  # the events TraceReader yields for iteration_4/rank0
UNFINISHED = "unfinished when the run ended ({} records received; the file never ended)"


# ---------------------------------------------------------------- records of real files


@dataclass(frozen=True)
class Parse:
    """One pass of TraceReader: what it yielded, and its metadata or its error."""

    events: tuple[Event, ...]
    meta: TraceMeta
    stats: FileStats
    error: str | None


@functools.cache
def parse(path: Path) -> Parse:
    events: list[Event] = []
    try:
        with open_trace(path) as handle:
            reader = TraceReader(handle, str(path))
            for batch in reader.batches(1):
                events.extend(batch)
    except TraceError as exc:  # as FileStream: batches already sent, then an end with the reason
        return Parse(tuple(events), TraceMeta(), FileStats(), exc.reason)
    return Parse(tuple(events), reader.meta, reader.stats, None)


def stream_id(node: str, path: Path, salt: str = "") -> str:
    return hashlib.blake2b(f"{node}\0{path}\0{salt}".encode(), digest_size=16).hexdigest()


def file_records(
    root: Path, path: Path, size: int, node: str = NODE, salt: str = ""
) -> list[Record]:
    """StreamStart, the facts in records of `size` items (none if the file is cut short),
    StreamEnd: the records of one file."""
    parsed = parse(path)
    stream = stream_id(node, path, salt)
    start = StreamStart(
        stream=stream,
        node=node,
        path=str(path),
        folder=relative_folder(root, path.parent),
        root_name=root_name(root),
        name_rank=rank_from_name(path),
    )
    reduction = Reduction()
    reduction.add_all(parsed.events)
    batches = [] if parsed.error else list(facts(reduction, stream, 1, limit=size))
    end = StreamEnd(
        stream=stream,
        seq=len(batches) + 1,
        meta=parsed.meta,
        stats=parsed.stats,
        size_bytes=path.stat().st_size,
        error=parsed.error,
    )
    return [start, *batches, end]


def trace_files(root: Path) -> list[Path]:
    return [path for window in find_windows(root) for path in window.files]


def run_records(root: Path, size: int) -> list[list[Record]]:
    return [file_records(root, path, size) for path in trace_files(root)]


def apply_all(aggregation: Aggregation, records: Sequence[Record]) -> list[Applied]:
    """Apply records that must each be the next one expected."""
    applied = []
    for record in records:
        assert aggregation.verdict(record) is Verdict.APPLY, record
        applied.append(aggregation.apply(record))
    return applied


def round_robin(streams: Sequence[Sequence[Record]]) -> list[Record]:
    longest = max(len(s) for s in streams)
    return [s[i] for i in range(longest) for s in streams if i < len(s)]


def loopback_settings(tmp_path: Path) -> AggregatorSettings:
    """An aggregator on loopback, its out and state folders under `tmp_path`."""
    return AggregatorSettings(
        listen="tcp://127.0.0.1:0", out=tmp_path / "out", state=tmp_path / "state"
    )


def receive_all(aggregator: Aggregator, records: Iterable[Record]) -> None:
    """Each record received from NODE as the loop receives it (not yet committed)."""
    for record in records:
        aggregator.receive([NODE.encode(), msgspec.msgpack.encode(record)])


def live_document(aggregation: Aggregation, final: bool = True) -> dict[str, Any]:
    return jsonreport.to_document(aggregation.report(Options(), final=final))


@functools.cache
def offline(root: Path) -> dict[str, Any]:
    return jsonreport.to_document(analyse(root, Options()))


def offline_document(root: Path) -> dict[str, Any]:
    return copy.deepcopy(offline(root))  # a copy to edit


needs_dlrm = needs_shared("kineto", "dlrm_8rank_v100")


# ---------------------------------------------------------------- verdicts by hand

STREAM = "0123456789abcdef0123456789abcdef"
START = StreamStart(stream=STREAM, node=NODE, path="/run/rank0.json", folder=".", root_name="run")
EVENTS: list[Event] = [GpuOp("compute", 0, 100), GpuOp("compute", 50, 100), GpuOp("memcpy", 0, 7)]
# EVENTS' facts by hand: compute [0, 100) ∪ [50, 150) = [0, 150), 200 ns of kernels ("other":
# no category); the memcpy [0, 7), 7 ns.
BATCH_1 = Facts(
    stream=STREAM, seq=1, runs={"compute": pack(array("q", [0]), array("q", [150]))},
    kernel_ns={"other": 200}, has_gpu=True,
)  # fmt: skip
BATCH_2 = Facts(
    stream=STREAM, seq=2, runs={"copies": pack(array("q", [0]), array("q", [7]))},
    kernel_ns={"memcpy": 7},
)  # fmt: skip
END = StreamEnd(
    stream=STREAM, seq=3, meta=TraceMeta(rank=0, world_size=1), size_bytes=123,
    stats=FileStats(events=3),
)  # fmt: skip


def test_a_stream_start_is_applied_first() -> None:
    assert Aggregation().verdict(START) is Verdict.APPLY


@pytest.mark.parametrize(
    "record",
    [BATCH_1, Facts(stream=STREAM, seq=0), END],
    ids=["batch-1", "batch-0", "end"],
)
def test_a_record_before_its_stream_start_is_ahead(record: Record) -> None:
    assert Aggregation().verdict(record) is Verdict.AHEAD


def test_a_record_after_a_gap_is_ahead() -> None:
    aggregation = Aggregation()
    apply_all(aggregation, [START])
    assert aggregation.verdict(BATCH_2) is Verdict.AHEAD
    assert aggregation.verdict(END) is Verdict.AHEAD
    assert aggregation.verdict(BATCH_1) is Verdict.APPLY


def test_a_record_applied_before_is_a_duplicate() -> None:
    aggregation = Aggregation()
    apply_all(aggregation, [START, BATCH_1])
    assert aggregation.verdict(START) is Verdict.DUPLICATE
    assert aggregation.verdict(BATCH_1) is Verdict.DUPLICATE
    assert aggregation.verdict(BATCH_2) is Verdict.APPLY


@pytest.mark.parametrize(
    "record",
    [START, BATCH_1, BATCH_2, END, Facts(stream=STREAM, seq=9)],
    ids=["start", "batch-1", "batch-2", "end", "batch-9"],
)
def test_every_record_of_a_finished_stream_is_a_duplicate(record: Record) -> None:
    aggregation = Aggregation()
    apply_all(aggregation, [START, BATCH_1, BATCH_2, END])
    assert aggregation.verdict(record) is Verdict.DUPLICATE


def test_position_is_the_next_seq_expected_and_whether_the_stream_ended() -> None:
    aggregation = Aggregation()
    positions = [aggregation.position(STREAM)]
    for record in (START, BATCH_1, BATCH_2, END):
        apply_all(aggregation, [record])
        positions.append(aggregation.position(STREAM))
    assert positions == [(0, False), (1, False), (2, False), (3, False), (4, True)]


def test_apply_tells_the_finished_file_and_its_events() -> None:
    aggregation = Aggregation()
    applied = apply_all(aggregation, [START, BATCH_1, BATCH_2, END])
    accumulator = Accumulator()
    accumulator.add_all(EVENTS)
    finished = FinishedFile(
        stream=STREAM,
        node=NODE,
        path="/run/rank0.json",
        folder=".",
        root_name="run",
        name_rank=None,
        next_seq=4,
        size_bytes=123,
        meta=TraceMeta(rank=0, world_size=1),
        stats=FileStats(events=3),
        result=accumulator.result(["/run/rank0.json"]),
        error=None,
    )
    assert applied == [Applied(), Applied(), Applied(), Applied(finished=finished, events=3)]
    assert aggregation.finished == {STREAM: finished}
    assert aggregation.open == {}


# ---------------------------------------------------------------- live == offline


@pytest.mark.parametrize(
    ("root", "size"),
    [(SAMPLE, 2), (SAMPLE, 10), pytest.param(DLRM, 64, marks=needs_dlrm)],
    ids=["sample-2", "sample-10", "dlrm-64"],
)
def test_live_report_equals_offline(root: Path, size: int) -> None:
    streams = run_records(root, size)
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(streams))
    assert aggregation.open == {}
    assert live_document(aggregation) == offline(root)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_live_report_equals_offline_for_every_kernel_family(tmp_path: Path, name: str) -> None:
    # fused kernels, DeepEP, MTIA device rows and look-alike names reach the live report too
    root = tmp_path / name
    write_job(root / "iteration_1", BUILDERS[name])
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(run_records(root, 3)))
    assert live_document(aggregation) == offline(root)


def test_the_sample_is_many_records_per_file() -> None:
    # the records above are small: 158 events of iteration_4/rank0 come to 156 runs (gloo
    # 10, three threads' cpu_op time 12 + 112 + 12, one thread's call time 10), 2 steps and
    # 10 calls, cut into records of at most 10 items (an entry of a set counts one)
    records = file_records(SAMPLE, SAMPLE / "iteration_4" / "rank0_trace.json.gz", 10)
    assert len(parse(SAMPLE / "iteration_4" / "rank0_trace.json.gz").events) == SAMPLE_EVENTS
    parts = [record for record in records if isinstance(record, Facts)]
    assert len(parts) == len(records) - 2 > 156 // 10
    assert sum(len(runs) for part in parts for runs in packed(part)) == 156 * 16
    assert (sum(len(p.steps) for p in parts), sum(len(p.calls) for p in parts)) == (2, 10)
    assert max(len(packed(p)) + sum(len(r) for r in packed(p)) // 16 + len(p.steps)
               + len(p.calls) for p in parts) == 10  # fmt: skip


def packed(part: Facts) -> list[bytes]:
    return [*part.runs.values(), *part.busy.values(), *part.call_time.values()]


# ---------------------------------------------------------------- any delivery schedule


def receive(aggregation: Aggregation, record: Record) -> None:
    if aggregation.verdict(record) is Verdict.APPLY:
        applied = aggregation.apply(record)
        assert applied.superseded == ()


def go_back_n(
    aggregation: Aggregation, streams: Sequence[Sequence[Record]], rng: random.Random
) -> int:
    """Senders resend every unacknowledged record each round; the network shuffles them,
    delivers some twice and holds some back for later rounds. Returns the rounds taken."""
    late_p, twice_p = rng.uniform(0, 0.6), rng.uniform(0, 0.5)
    acked = {s[0].stream: 0 for s in streams}
    network: list[Record] = []
    for rounds in range(1000):
        if all(aggregation.position(stream)[1] for stream in acked):
            return rounds
        for records in streams:
            network.extend(records[acked[records[0].stream] :])
        rng.shuffle(network)
        held: list[Record] = []
        for record in network:
            if rng.random() < late_p:
                held.append(record)
                continue
            for _ in range(2 if rng.random() < twice_p else 1):
                receive(aggregation, record)
        network = held
        acked = {stream: aggregation.position(stream)[0] for stream in acked}
    raise AssertionError("the schedule never finished")


# A seed, not st.randoms(): a schedule draws thousands of numbers, which overran Hypothesis'
# buffer now and then (health check data_too_large); a seeded Random draws them freely.
@given(seed=st.integers(0, 2**64 - 1), size=st.sampled_from([7, 25, 1000]))
@settings(max_examples=25, deadline=None)
def test_any_delivery_schedule_gives_the_offline_report(seed: int, size: int) -> None:
    rng = random.Random(seed)
    streams = run_records(SAMPLE, size)
    aggregation = Aggregation()
    go_back_n(aggregation, streams, rng)
    positions = [aggregation.position(s[0].stream) for s in streams]
    assert positions == [(len(s), True) for s in streams]
    assert live_document(aggregation) == offline(SAMPLE)


# ---------------------------------------------------------------- one stream per (node, path)

RANK0 = SAMPLE / "iteration_4" / "rank0_trace.json.gz"
RANK1 = SAMPLE / "iteration_4" / "rank1_trace.json.gz"


def test_a_new_stream_for_an_open_path_supersedes_it() -> None:
    old = file_records(SAMPLE, RANK0, 10, salt="old")
    new = file_records(SAMPLE, RANK0, 10, salt="new")
    aggregation = Aggregation()
    apply_all(aggregation, old[:3])
    applied = apply_all(aggregation, new[:1])
    assert applied == [Applied(superseded=(old[0].stream,))]
    assert list(aggregation.open) == [new[0].stream]
    assert aggregation.position(old[0].stream) == (RETIRED_SEQ, True)


def test_each_nodes_open_streams_are_counted_as_they_start_end_and_are_superseded() -> None:
    """a opens rank0 and rank1, b rank0 (its own path): a 2, b 1; a's rank1 ends (a 1); a's
    rank0 rewritten (a new stream supersedes the open one: still 1); it ends (a 0)."""
    a0, a1 = file_records(SAMPLE, RANK0, 10, "a"), file_records(SAMPLE, RANK1, 10, "a")
    b0 = file_records(SAMPLE, RANK0, 10, "b")
    again = file_records(SAMPLE, RANK0, 10, "a", salt="again")
    aggregation = Aggregation()
    apply_all(aggregation, [a0[0], a1[0], b0[0]])
    counts = [(aggregation.open_streams("a"), aggregation.open_streams("b"))]
    apply_all(aggregation, a1[1:])
    counts.append((aggregation.open_streams("a"), aggregation.open_streams("b")))
    apply_all(aggregation, again[:1])
    counts.append((aggregation.open_streams("a"), aggregation.open_streams("b")))
    apply_all(aggregation, again[1:])
    counts.append((aggregation.open_streams("a"), aggregation.open_streams("b")))
    assert counts == [(2, 1), (1, 1), (1, 1), (0, 1)]


def test_a_new_stream_for_a_finished_path_supersedes_it() -> None:
    old = file_records(SAMPLE, RANK0, 10, salt="old")
    new = file_records(SAMPLE, RANK0, 10, salt="new")
    aggregation = Aggregation()
    apply_all(aggregation, old)
    applied = apply_all(aggregation, [*new, *file_records(SAMPLE, RANK1, 10)])
    assert applied[0] == Applied(superseded=(old[0].stream,))
    assert old[0].stream not in aggregation.finished
    assert aggregation.position(old[0].stream) == (RETIRED_SEQ, True)
    # counted once, not as two files claiming rank 0
    assert live_document(aggregation) == offline(SAMPLE / "iteration_4")


def test_a_late_start_of_a_superseded_stream_is_a_duplicate() -> None:
    old = file_records(SAMPLE, RANK0, 10, salt="old")
    new = file_records(SAMPLE, RANK0, 10, salt="new")
    aggregation = Aggregation()
    apply_all(aggregation, [old[0], *new])
    assert aggregation.verdict(old[0]) is Verdict.DUPLICATE
    assert list(aggregation.finished) == [new[0].stream]
    restored = Aggregation()
    restored.restore(aggregation.finished.values(), aggregation.retired)
    assert restored.verdict(old[0]) is Verdict.DUPLICATE


def test_the_same_path_on_another_node_is_another_stream() -> None:
    here = file_records(SAMPLE, RANK0, 10, node="node0")
    there = file_records(SAMPLE, RANK0, 10, node="node1")
    aggregation = Aggregation()
    applied = apply_all(aggregation, [here[0], there[0]])
    assert applied == [Applied(), Applied()]
    assert sorted(aggregation.open) == sorted([here[0].stream, there[0].stream])


# ---------------------------------------------------------------- complete windows


def test_a_window_is_complete_once_every_rank_has_finished() -> None:
    streams = run_records(SAMPLE, 10)  # iteration_4 rank0, rank1, iteration_8 rank0, rank1
    aggregation = Aggregation()
    seen = [aggregation.complete_windows()]
    apply_all(aggregation, streams[0])
    seen.append(aggregation.complete_windows())
    apply_all(aggregation, streams[1][:-1])  # rank 1 open: not yet
    seen.append(aggregation.complete_windows())
    apply_all(aggregation, streams[1][-1:])
    seen.append(aggregation.complete_windows())
    apply_all(aggregation, [*streams[3], *streams[2]])
    seen.append(aggregation.complete_windows())
    assert seen == [[], [], [], ["iteration_4"], ["iteration_4", "iteration_8"]]


def test_an_errored_file_does_not_complete_its_window() -> None:
    streams = run_records(SAMPLE, 10)
    broken = streams[3][-1]
    assert isinstance(broken, StreamEnd)
    errored = msgspec.structs.replace(broken, error="corrupt JSON (boom)")
    aggregation = Aggregation()
    apply_all(aggregation, [*streams[2], *streams[3][:-1], errored])
    assert aggregation.open == {}
    assert aggregation.complete_windows() == []


# ---------------------------------------------------------------- the final report


def test_the_final_report_lists_open_streams_as_unfinished() -> None:
    streams = run_records(SAMPLE, 10)
    aggregation = Aggregation()
    apply_all(aggregation, [*streams[0], *streams[1], *streams[2][:3]])  # start + 2 facts
    expected = offline_document(SAMPLE / "iteration_4")
    open_path = str(SAMPLE / "iteration_8" / "rank0_trace.json.gz")
    expected["inputs"]["files"] = 3
    expected["inputs"]["skipped"] = [{"path": open_path, "reason": UNFINISHED.format(3)}]
    assert live_document(aggregation, final=True) == expected


def test_an_interim_report_leaves_open_streams_out() -> None:
    streams = run_records(SAMPLE, 10)
    aggregation = Aggregation()
    apply_all(aggregation, [*streams[0], *streams[1], *streams[2][:-1], *streams[3][:1]])
    assert live_document(aggregation, final=False) == offline(SAMPLE / "iteration_4")


# ---------------------------------------------------------------- files that cannot be used


def test_a_stream_end_with_an_error_is_skipped_with_its_reason() -> None:
    aggregation = Aggregation()
    errored = msgspec.structs.replace(END, error="truncated gzip stream (still being written?)")
    apply_all(aggregation, [START, BATCH_1, BATCH_2, errored])
    report = aggregation.report(Options(), final=True)
    assert report.inputs.skipped == [
        Skipped("/run/rank0.json", "truncated gzip stream (still being written?)")
    ]
    assert (report.ranks, report.windows, report.inputs.files) == ([], [], 1)


def copy_truncated_gz(tmp: Path) -> tuple[Path, Path, str]:
    """iteration_4 with rank1's gzip cut in half."""
    window = tmp / "run" / "iteration_4"
    shutil.copytree(SAMPLE / "iteration_4", window)
    cut = window / "rank1_trace.json.gz"
    cut.write_bytes((SAMPLE / "iteration_4" / "rank1_trace.json.gz").read_bytes()[:8000])
    return tmp / "run", cut, "truncated gzip stream (still being written?)"


def copy_truncated_json(tmp: Path) -> tuple[Path, Path, str]:
    """Two DLRM ranks, worker1's JSON cut at 70 % (after more than one batch was read)."""
    root = tmp / "dlrm"
    root.mkdir()
    whole = sorted(DLRM.glob("worker*.json"))[:2]
    shutil.copy(whole[0], root / whole[0].name)
    cut = root / whole[1].name
    data = whole[1].read_bytes()
    cut.write_bytes(data[: len(data) * 7 // 10])
    reason = "truncated: the JSON ends before the document is complete (still being written?)"
    return root, cut, reason


@pytest.mark.parametrize(
    "make",
    [copy_truncated_gz, pytest.param(copy_truncated_json, marks=needs_dlrm)],
    ids=["sample-gz", "dlrm-json"],
)
def test_a_truncated_file_is_skipped_as_offline(tmp_path: Path, make: Any) -> None:
    root, cut, reason = make(tmp_path)
    streams = run_records(root, 50)
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(streams))
    document = live_document(aggregation)
    assert document["inputs"]["skipped"] == [{"path": str(cut), "reason": reason}]
    assert document == offline(root)


def test_a_file_cut_short_sends_no_facts_and_counts_nothing(tmp_path: Path) -> None:
    require_shared("kineto", "dlrm_8rank_v100")
    root, cut, _ = copy_truncated_json(tmp_path)
    assert len(parse(cut).events) > 0  # events were read before the damage
    records = file_records(root, cut, 50)
    assert [type(r) for r in records] == [StreamStart, StreamEnd]
    aggregation = Aggregation()
    apply_all(aggregation, records)
    report = aggregation.report(Options(), final=True)
    assert (report.ranks, report.windows, report.inputs.events) == ([], [], 0)


# ---------------------------------------------------------------- restore


def restored(aggregation: Aggregation) -> Aggregation:
    """A fresh aggregation from the finished files, as the store keeps them (msgpack)."""
    decoder = msgspec.msgpack.Decoder(FinishedFile)
    fresh = Aggregation()
    fresh.restore(decoder.decode(msgspec.msgpack.encode(f)) for f in aggregation.finished.values())
    return fresh


def test_restored_files_give_the_same_report() -> None:
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(run_records(SAMPLE, 10)))
    fresh = restored(aggregation)
    assert live_document(fresh) == live_document(aggregation) == offline(SAMPLE)
    assert fresh.complete_windows() == ["iteration_4", "iteration_8"]


def test_restored_streams_are_at_their_end() -> None:
    streams = run_records(SAMPLE, 10)
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(streams))
    fresh = restored(aggregation)
    assert [fresh.position(s[0].stream) for s in streams] == [(len(s), True) for s in streams]
    assert {fresh.verdict(r) for s in streams for r in s} == {Verdict.DUPLICATE}
    assert fresh.open == {}


def test_a_restored_file_is_superseded_by_a_new_stream_for_its_path() -> None:
    aggregation = Aggregation()
    old = file_records(SAMPLE, RANK0, 10, salt="old")
    apply_all(aggregation, old)
    fresh = restored(aggregation)
    new = file_records(SAMPLE, RANK0, 10, salt="new")
    assert apply_all(fresh, new[:1]) == [Applied(superseded=(old[0].stream,))]
    assert fresh.finished == {}


# ---------------------------------------------------------------- call lists dropped


class Stored:
    """What the aggregator's store keeps of each finished file (the bytes of `done/`)."""

    def __init__(self) -> None:
        self.done: dict[str, bytes] = {}
        self.loads = 0

    def keep(self, applied: Sequence[Applied]) -> None:
        for item in applied:
            if item.finished is not None:
                self.done[item.finished.stream] = msgspec.msgpack.encode(item.finished)

    def load(self, stream: str) -> FinishedFile | None:
        self.loads += 1
        raw = self.done.get(stream)
        return None if raw is None else msgspec.msgpack.decode(raw, type=FinishedFile)


def _calls(aggregation: Aggregation, folder: str) -> list[int]:
    return [
        len(f.result.calls)
        for f in sorted(aggregation.finished.values(), key=lambda f: f.path)
        if f.folder == folder and f.result is not None
    ]


@needs_dlrm
def test_dropping_call_lists_of_complete_windows_changes_no_report(tmp_path: Path) -> None:
    """Two DLRM windows. The aggregation that drops the call lists of complete windows gives
    the report of the one that keeps them after every step: a window completing, one half
    done, a file of a complete window rewritten (its calls matched anew against the others',
    given back from the store), a window renamed; and at the end the offline report."""
    root = tmp_path / "dlrm"
    first, second = "a/iteration_10", "a/iteration_20"
    for folder in (first, second):
        (root / folder).mkdir(parents=True)
        for path in sorted(DLRM.glob("worker*.json")):
            shutil.copy(path, root / folder / path.name)
    files = {f: sorted((root / f).glob("worker*.json")) for f in (first, second)}
    stored = Stored()
    lean, full = Aggregation(load=stored.load), Aggregation()

    def feed(records: Sequence[Record]) -> None:
        stored.keep(apply_all(lean, records))
        apply_all(full, records)

    def same() -> None:
        assert live_document(lean, final=False) == live_document(full, final=False)
        lean.shed()

    for path in files[first]:
        feed(file_records(root, path, 500))
    assert lean.shed() == 0  # complete, but not reported yet: its matching is not known
    same()
    assert _calls(lean, first) == [0] * 8
    assert min(_calls(full, first)) > 0
    for path in files[second][:4]:
        feed(file_records(root, path, 500))
    same()
    assert min(_calls(lean, second)) > 0  # not complete: kept
    for path in files[second][4:]:
        feed(file_records(root, path, 500))
    same()
    assert _calls(lean, second) == [0] * 8 and stored.loads == 0

    # rank 3 of the first window rewritten (same content, a new stream): while it is open the
    # window has 7 files, whose calls must come back for the matching of 7 ranks
    rewritten = file_records(root, files[first][3], 500, salt="again")
    feed(rewritten[:2])
    same()
    # 7 files read back (calls and samples), and rank 3's file of the second window: rank 3
    # now has one window, whose exact samples the run's figures read (its sketches will not do)
    assert stored.loads == 8
    feed(rewritten[2:])
    same()
    assert _calls(lean, first) == [0] * 8
    matched = lean.report(Options()).windows[0].matching.instances
    assert matched == full.report(Options()).windows[0].matching.instances > 0

    # b/iteration_10 appears: both windows are renamed by their paths, and their cross-rank
    # facts and sections are kept (no call list and no sample is needed)
    assert [w.name for w in lean.report(Options()).windows] == ["iteration_10", "iteration_20"]
    (root / "b" / "iteration_10").mkdir(parents=True)
    extra = root / "b" / "iteration_10" / files[first][0].name
    shutil.copy(files[first][0], extra)
    feed(file_records(root, extra, 500))
    names = [w.name for w in lean.report(Options()).windows]
    assert sorted(names) == ["a/iteration_10", "a/iteration_20", "b/iteration_10"]
    same()
    assert stored.loads == 8
    assert live_document(lean) == live_document(full) == offline_document(root)


def test_without_a_loader_nothing_is_dropped() -> None:
    aggregation = Aggregation()
    apply_all(aggregation, [START, BATCH_1, BATCH_2, END])
    aggregation.report(Options())
    assert aggregation.shed() == 0


def test_the_aggregator_drops_call_lists_once_stored_and_a_restart_agrees(tmp_path: Path) -> None:
    settings = loopback_settings(tmp_path)
    aggregator = Aggregator(settings)
    try:
        receive_all(aggregator, round_robin(run_records(SAMPLE, 40)))
        aggregator.publish()  # the finished files are not stored yet: every call list stays
        kept = {s: f.result.calls for s, f in aggregator.aggregation.finished.items() if f.result}
        assert len(kept) == 4 and all(kept.values())
        aggregator.commit()
        aggregator._tick()  # stored, and the windows complete: published at once
        report = aggregator.aggregation.report(settings.options)
        for stream, calls in kept.items():
            assert aggregator.aggregation.finished[stream].result.calls == []  # type: ignore[union-attr]
            stored = aggregator.store.load(stream)
            assert stored is not None and stored.result is not None
            assert stored.result.calls == calls
    finally:
        aggregator.store.close()
    again = Aggregator(settings)  # a restart matches each window as it reads it back
    try:
        restored = again.aggregation.finished.values()
        assert len(restored) == 4 and all(f.result and not f.result.calls for f in restored)
        assert again.aggregation.report(settings.options) == report
    finally:
        again.store.close()


def test_the_aggregator_builds_its_reports_mid_run_for_metrics_alone(tmp_path: Path) -> None:
    """A mid-run report has the run's sections /metrics reads (its metrics are those of the
    whole report) and no diagnosis; the final report has every section."""
    settings = loopback_settings(tmp_path)
    aggregator = Aggregator(settings)
    try:
        receive_all(aggregator, round_robin(run_records(SAMPLE, 40)))
        aggregator.commit()
        aggregator._tick()  # the windows complete: published at once
        shown, whole = aggregator.publisher.report, aggregator.aggregation.report(settings.options)
        assert shown is not None and shown.diagnosis == Diagnosis() != whole.diagnosis
        assert families(Snapshot("j", shown)) == families(Snapshot("j", whole))
        final = aggregator._final()
        assert jsonreport.render(final) == jsonreport.render(whole)
    finally:
        aggregator.store.close()


@needs_dlrm
def test_a_restore_holds_one_window_of_calls_at_a_time(tmp_path: Path) -> None:
    """Three DLRM windows read back from a store: each file's calls are dropped as it is read
    and loaded once more to match its window; the report is the one made with every call."""
    root = tmp_path / "dlrm"
    stored, finished = Stored(), []
    for folder in ("iteration_10", "iteration_20", "iteration_30"):
        (root / folder).mkdir(parents=True)
        for path in sorted(DLRM.glob("worker*.json")):
            shutil.copy(path, root / folder / path.name)
    everything = Aggregation()
    for path in trace_files(root):
        applied = apply_all(everything, file_records(root, path, 500))
        stored.keep(applied)
        finished.extend(a.finished for a in applied if a.finished is not None)
    holding: list[int] = []  # files holding their calls whenever one is loaded

    def load(stream: str) -> FinishedFile | None:
        holding.append(sum(1 for f in lean.finished.values() if f.result and f.result.calls))
        return stored.load(stream)

    lean = Aggregation(load=load)
    lean.restore(stored.load(f.stream) for f in finished)  # as the store reads them back
    assert stored.loads == 24 + 24 and max(holding) == 7  # 8 files a window, one being read
    assert all(f.result and not f.result.calls for f in lean.finished.values())
    assert live_document(lean) == live_document(everything) == offline_document(root)
    # the report found every window's matching already done, and read each file once more
    # for its window's sections (the exact samples: a restore keeps them as sketches)
    assert stored.loads == 72


# ---------------------------------------------------------------- one job served
# The live aggregator serves one job: files of any other job are skipped with the reason,
# never pooled; JSON that is not a trace is ignored, as `commscope report` does. Dropping
# the call lists of complete windows (and a restore) must not lose a window's matching when
# its folder holds files of another job, or when the job reported changes. Files are
# hand-made (`builders.job_trace`): each rank one AllReduce, matched once per window.

WINDOWS = ("iteration_10", "iteration_20")


def mixed(root: Path, a100_ranks: int = 3) -> Path:
    """Two windows, each holding the 2 ranks of an H100 job (January) and `a100_ranks` ranks
    of a 3-GPU A100 job (March), and a checkpoint's meta.json."""
    for window in WINDOWS:
        for rank in (0, 1):
            write(root / window / f"h100_rank{rank}.json", job_trace(rank, 2, GPU, JAN_NS))
        for rank in range(a100_ranks):
            write(root / window / f"a100_rank{rank}.json", job_trace(rank, 3, A100, MAR_NS))
    write(root / "meta.json", b'{"step": 20}')
    return root


def test_the_live_report_is_the_largest_job_as_offline(tmp_path: Path) -> None:
    root = mixed(tmp_path / "run")
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(run_records(root, 2)))
    document = live_document(aggregation)
    assert document == offline_document(root)
    assert (document["world_size"], document["ranks"], document["inputs"]["job"]) == (
        3,
        [0, 1, 2],
        2,
    )
    assert [w["matching"]["instances"] for w in document["windows"]] == [1, 1]
    skipped = [Path(s["path"]).relative_to(root) for s in document["inputs"]["skipped"]]
    assert sorted(map(str, skipped)) == [f"{w}/h100_rank{r}.json" for w in WINDOWS for r in (0, 1)]
    reason = document["inputs"]["skipped"][0]["reason"]
    assert reason.startswith("belongs to another job than the one reported (job 2 of 2: world 3")
    assert document["inputs"]["ignored"] == [str(root / "meta.json")]


def test_call_lists_of_a_folder_holding_two_jobs_are_kept(tmp_path: Path) -> None:
    root = mixed(tmp_path / "run")
    stored = Stored()
    lean, full = Aggregation(load=stored.load), Aggregation()
    for path in trace_files(root):
        records = file_records(root, path, 2)
        stored.keep(apply_all(lean, records))
        apply_all(full, records)
    assert lean.complete_windows() == list(WINDOWS)
    assert live_document(lean) == live_document(full)
    assert lean.shed() == 0  # the report used part of each folder: nothing to drop
    assert all(_calls(lean, window) == [1] * 5 for window in WINDOWS)
    assert live_document(lean) == live_document(full) == offline_document(root)


def test_a_restore_matches_the_job_reported_when_the_other_job_grows_larger(
    tmp_path: Path,
) -> None:
    """Restored windows have their call lists dropped; the report that uses some of a
    folder's files, or a job reported for the first time, reads them back first."""
    root = mixed(tmp_path / "run", a100_ranks=1)  # the H100 job is the larger one
    stored = Stored()
    first = Aggregation()
    for path in trace_files(root):
        stored.keep(apply_all(first, file_records(root, path, 2)))
    lean = Aggregation(load=stored.load)
    lean.restore(stored.load(f.stream) for f in first.finished.values())
    document = live_document(lean)
    assert document == live_document(first) == offline_document(root)
    assert document["world_size"] == 2 and [
        w["matching"]["instances"] for w in document["windows"]
    ] == [1, 1]
    # the A100 job gets its other ranks: it is now the one reported, matched anew
    for window in WINDOWS:
        for rank in (1, 2):
            path = write(root / window / f"a100_rank{rank}.json", job_trace(rank, 3, A100, MAR_NS))
            records = file_records(root, path, 2)
            stored.keep(apply_all(lean, records))
            apply_all(first, records)
    document = live_document(lean)  # (`offline` is cached: the folder changed)
    assert document["world_size"] == 3 and [
        w["matching"]["instances"] for w in document["windows"]
    ] == [1, 1]
    assert document == live_document(first) == jsonreport.to_document(analyse(root, Options()))
    assert live_document(restored(lean)) == document


# ---------------------------------------------------------------- a shard's windows


def finished_rank(folder: str, rank: int, world: int) -> FinishedFile:
    meta = TraceMeta(rank=rank, world_size=world)
    return FinishedFile(
        stream=f"{folder}-{rank}", node="n", path=f"/run/{folder}/rank{rank}.json",
        folder=folder, root_name="run", meta=meta, result=RankResult(evidence_text="none"),
    )  # fmt: skip


def test_a_shard_completes_a_window_once_its_own_ranks_have_each_a_file() -> None:
    """World 8, the shard owns 4-7: window a has ranks 4-7 (complete here, though 0-3 are
    another shard's), b has 4-6 (rank 7 missing), c has 4-7 of a world of 6 (rank 7 cannot
    be in it: never complete). Without a rank set only a window of all 8 ranks is."""
    shard = Aggregation(owned=frozenset(range(4, 8)))
    whole = Aggregation()
    files = [finished_rank("a", r, 8) for r in range(4, 8)]
    files += [finished_rank("b", r, 8) for r in range(4, 7)]
    files += [finished_rank("c", r, 6) for r in range(4, 8)]
    files += [finished_rank("d", r, 8) for r in range(8)]
    for aggregation in (shard, whole):
        aggregation.restore(files)
    assert shard.complete_windows() == ["a", "d"]
    assert whole.complete_windows() == ["d"]


def test_progress_counts_quarters_of_each_open_windows_ranks() -> None:
    """World 8 (window a): ranks 0..7 arriving give 0, 1, 1, 2, 2, 3, 3 quarters (4k // 8 of k
    ranks; none at 1), then a is complete and counts no more; a window of no stated world
    (b: world 0) counts its ranks doubling (1, 2, 4 ranks: 0, 1, 2); a shard owning 4-7 of a
    world of 8 counts quarters of those 4 (c: ranks 4, 5: 2)."""
    aggregation = Aggregation()
    found = []
    for rank in range(8):
        aggregation.restore([finished_rank("a", rank, 8)])
        found.append(aggregation.progress())
    assert found == [0, 1, 1, 2, 2, 3, 3, 0]
    for rank, expected in ((0, 0), (1, 1), (2, 1), (3, 2)):
        aggregation.restore([finished_rank("b", rank, 0)])
        assert aggregation.progress() == expected
    shard = Aggregation(owned=frozenset(range(4, 8)))
    shard.restore([finished_rank("c", 4, 8), finished_rank("c", 5, 8)])
    assert shard.progress() == 2


def test_a_window_is_complete_no_more_once_a_rank_of_it_is_superseded_by_a_file_cut_short() -> None:
    """Ranks 0 and 1 of a world of 2 finish (complete); rank 1's path then starts again as a
    new stream that ends in an error: that rank has no usable file, so the window is not
    complete, and once a usable rewrite of it finishes it is complete again."""
    aggregation = Aggregation()
    aggregation.restore([finished_rank("a", 0, 2), finished_rank("a", 1, 2)])
    assert aggregation.complete_windows() == ["a"]
    again = StreamStart(stream="a-1b", node="n", path="/run/a/rank1.json", folder="a",
                        root_name="run")  # fmt: skip
    aggregation.apply(again)
    assert aggregation.complete_windows() == []
    aggregation.apply(StreamEnd(stream="a-1b", seq=1, error="cut short"))
    assert aggregation.complete_windows() == []
    aggregation.restore([finished_rank("a", 1, 2)])  # a usable file of rank 1 again
    assert aggregation.complete_windows() == ["a"]


# ---------------------------------------------------------------- open windows mid-run


def test_a_mid_run_report_leaves_the_open_windows_cross_rank_sections_out() -> None:
    """iteration_4 whole and rank 0 of iteration_8: a report mid-run gives iteration_8
    without cross-rank sections and says so; the final report leaves nothing out (the
    offline report of the same files, but the file still open)."""
    streams = run_records(SAMPLE, 10)
    aggregation = Aggregation()
    apply_all(aggregation, [*streams[0], *streams[1], *streams[2]])
    assert aggregation.prepare(Options()).waiting == {"iteration_8"}
    mid = aggregation.report(Options())
    assert mid.windows[1].name == "iteration_8"
    assert mid.windows[1].matching.groups == {}
    assert mid.inputs.open_windows == ["iteration_8"]
    assert aggregation.prepare(Options(), final=True).waiting == frozenset()
    assert aggregation.report(Options(), final=True).windows[1].matching.groups != {}
    apply_all(aggregation, streams[3])
    assert aggregation.prepare(Options()).waiting == frozenset()
    assert live_document(aggregation, final=False) == offline(SAMPLE)


def write_moe(folder: Path) -> None:
    """Two gloo ranks, one all-to-all-v in step 1: rank 0 sends 1 and 3 rows of 16 B to ranks 0
    and 1, rank 1 sends 2 and 6 (its op's split sizes in `Concrete Inputs`)."""
    sends = {0: [1, 3], 1: [2, 6]}
    folder.mkdir(parents=True)
    for rank, sent in sends.items():
        received = [sends[peer][rank] for peer in (0, 1)]
        args = {
            "Concrete Inputs": ["", "", "", str(received), str(sent), "False", "-1"],
            "Input Dims": [[sum(received), 4], [sum(sent), 4], [], [], [], [], []],
            "Input type": ["float", "float", "", "ScalarList", "ScalarList", "", ""],
        }
        events = [
            annotation("ProfilerStep#1", 0, 1000, 1),
            cpu_op("c10d::alltoall_base_", 100, 50, 1, args),
            annotation("gloo:all_to_all", 110, 30, 2, dims_args([[sum(sent), 4]], ["float"])),
        ]
        head = dist_head(rank=rank, world_size=2, backend="gloo", pg_sizes={"0": 2})
        (folder / f"rank{rank}_trace.json").write_bytes(trace(events, head))


def test_live_report_equals_offline_for_an_all_to_all_v(tmp_path: Path) -> None:
    write_moe(tmp_path / "moe" / "iteration_1")
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(run_records(tmp_path / "moe", 2)))
    live = live_document(aggregation)
    assert live == offline(tmp_path / "moe")
    assert live["alltoallv"]["matrix_bytes"] == [[16, 48], [32, 96]]
    assert live["alltoallv"]["busiest_rank"] == 1


def test_live_report_equals_offline_with_cuda_graphs(tmp_path: Path) -> None:
    from graphs_builder import WORKED  # CUDA graphs (`pipeline.graphs`): a self-contained hunk
    from kineto_builder import dist_head, trace

    write(tmp_path / "rank0_trace.json", trace(WORKED, dist_head(0, 1)))
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(run_records(tmp_path, 2)))
    document = live_document(aggregation)
    assert document["graphs"]["all_ranks"]["launches"] == 4
    assert document == offline(tmp_path)
