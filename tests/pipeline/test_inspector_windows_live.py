"""NCCL Inspector logs cut into windows live (`InspectorStream` → `Aggregation`, in this
process): the final report is the offline one, a window closed mid-log is complete with its
cross-rank sections, its figures and its op counts before the log ends, and what the
aggregation holds does not grow with the number of windows."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import msgspec
from commscope.collector.inspector_stream import InspectorStream
from commscope.collector.stream import Item, StreamSettings
from commscope.exporters import jsonreport, text
from commscope.model.schema import FinishedFile, Record, StreamEnd
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.pipeline.edge import Reduction
from commscope.pipeline.report import Options
from commscope.pipeline.stats import sample_values
from commscope.service.offline import analyse
from inspector_builder import coll

W_US = 300_000_000  # the default window, 300 s
K = 5_842_890  # window K starts 2025-07-18 19:30:00 UTC
PER_WINDOW = 3  # AllReduces a window, each rank


def write_logs(folder: Path, windows: int, split: bool = False) -> list[Path]:
    """Two ranks' verbose logs: in each of `windows` windows, PER_WINDOW AllReduces of 1 MB
    ending 30, 40, 50 s into it (rank 1 starting 20 µs after rank 0, each 100 µs long), then
    one op 100 s into the next window, which closes the last (past its 60 s grace). `split`:
    each window's last op (sn 3, 6, …) ends 5 ms before the next window on rank 0 and 5 ms
    into it on rank 1 (its clock 10 ms ahead): every such instance is split by a boundary."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in (0, 1):
        lines = []
        for sn in range(1, windows * PER_WINDOW + 2):
            window, i = divmod(sn - 1, PER_WINDOW)
            offset_s: float = 100 if window == windows else 30 + 10 * i
            if split and i == PER_WINDOW - 1 and window < windows:
                offset_s = 300 - 0.005 + 0.01 * rank
            end_us = (K + window) * W_US + int(offset_s * 1_000_000)
            lines.append(coll(rank, sn=sn, start_us=end_us - 100 + 20 * rank) + "\n")
        path = folder / f"node{rank}-pid{100 + rank}.log"
        path.write_text("".join(lines))
        paths.append(path)
    return paths


def items(root: Path, path: Path) -> list[Item]:
    """What the collector hands out for `path`, read to its end (as for --once)."""
    out: queue.Queue[Item] = queue.Queue()
    InspectorStream(
        path=path, root=root, node="n0", skip=0, generation=1, out=out,
        settings=StreamSettings(poll_s=0.01), stopping=lambda: True, reducer=Reduction,
    ).run()  # fmt: skip
    return [out.get_nowait() for _ in range(out.qsize())]


def document(report: Any) -> dict[str, Any]:
    return msgspec.json.decode(msgspec.json.encode(jsonreport.to_document(report)))  # type: ignore[no-any-return]


def apply(aggregation: Aggregation, records: list[Record]) -> list[FinishedFile]:
    finished = []
    for record in records:
        assert aggregation.verdict(record) is Verdict.APPLY
        done = aggregation.apply(record).finished
        if done is not None:
            finished.append(done)
    return finished


def test_the_final_report_of_a_multi_window_log_is_the_offline_one(tmp_path: Path) -> None:
    root = tmp_path / "run"
    paths = write_logs(root / "insp", 3)
    aggregation = Aggregation()
    for path in paths:
        apply(aggregation, [item.record for item in items(root, path)])
    live = aggregation.report(Options(), final=True)
    offline = analyse(root, Options())
    # windows K, K + 1, K + 2 and K + 3 (the last op's) of 5 minutes, named by their start
    names = [w.name for w in offline.windows]
    assert names == ["insp@20250718T193000Z", "insp@20250718T193500Z",
                     "insp@20250718T194000Z", "insp@20250718T194500Z"]  # fmt: skip
    assert document(live) == document(offline)
    assert text.render(live) == text.render(offline)
    # every op once: 2 ranks x (3 x 3 + 1)
    assert live.collectives.all_ranks["AllReduce"].count == 20


def test_an_instance_split_by_a_boundary_is_matched_once_in_its_earlier_window(
    tmp_path: Path,
) -> None:
    root = tmp_path / "run"
    write_logs(root / "insp", 2, split=True)
    report = analyse(root, Options())
    # instance 3 (rank 0 in K, rank 1 in K + 1) and 6 (K + 1 | K + 2) are matched whole in
    # the window of their earlier member: 3 instances in K, 3 in K + 1, op 7's 1 in K + 2,
    # nothing unmatched; each rank's ops stay in the window its log put them in
    matching = [w.matching for w in report.windows]
    assert [(m.instances, m.unmatched) for m in matching] == [(3, 0), (3, 0), (1, 0)]
    assert (report.matching.instances, report.matching.unmatched) == (7, 0)
    counts = [w.collectives.all_ranks["AllReduce"].count for w in report.windows]
    assert counts == [5, 6, 3]  # K: rank 0's 3, rank 1's 2; K + 1: 3 + 3; K + 2: 1 + 2
    # the live report, shedding as it goes (a report and a shed after each window's end),
    # ends with the same
    assert document(run_live(root)) == document(report)


def run_live(root: Path) -> Any:
    """The final report of a shedding aggregation fed the logs under `root` interleaved."""
    by_log = [[i.record for i in items(root, path)] for path in sorted(root.rglob("*.log"))]
    stored = Stored()
    aggregation = Aggregation(load=stored.load)
    for step in range(max(map(len, by_log))):
        for records in by_log:
            if step < len(records):
                stored.keep(apply(aggregation, [records[step]]))
                if isinstance(records[step], StreamEnd):
                    aggregation.report(Options())
                    aggregation.shed()
    return aggregation.report(Options(), final=True)


def test_a_window_closed_mid_log_is_complete_before_the_log_ends(tmp_path: Path) -> None:
    root = tmp_path / "run"
    paths = write_logs(root / "insp", 2)
    aggregation = Aggregation()
    for path in paths:
        # all but the last window's end: the log has not ended (the collector runs on)
        apply(aggregation, [i.record for i in items(root, path) if not i.final])
    folders = aggregation.complete_windows()
    assert folders == ["insp@20250718T193000Z", "insp@20250718T193500Z"]
    report = aggregation.report(Options())
    # the window still open (K + 2's last op) has no finished file: not in the report yet
    assert [w.name for w in report.windows] == folders
    first = report.windows[0]
    # its per-rank figures (1 MB in 100 µs, n = 2: 10 GB/s bus bandwidth) and its
    # cross-rank sections: its 3 instances matched
    assert sorted(first.network.per_rank) == ["0", "1"]
    assert first.network.per_rank["0"].bus_bandwidth_Bps == 1e10
    assert first.skew.per_collective["AllReduce"].instances == 3
    # commscope_collective_ops_total: the closed windows' ops, 2 ranks x 2 x 3
    assert report.collectives.all_ranks["AllReduce"].count == 12


class Stored:
    """The store's `done/`: what `shed` reads back from."""

    def __init__(self) -> None:
        self.done: dict[str, bytes] = {}

    def keep(self, finished: list[FinishedFile]) -> None:
        for item in finished:
            self.done[item.stream] = msgspec.msgpack.encode(item)

    def load(self, stream: str) -> FinishedFile | None:
        raw = self.done.get(stream)
        return None if raw is None else msgspec.msgpack.decode(raw, type=FinishedFile)


def held(aggregation: Aggregation) -> tuple[int, int, int]:
    """What grows with the ops held: calls in call lists, exact samples in tallies, and the
    open streams."""
    results = [f.result for f in aggregation.finished.values() if f.result is not None]
    calls = sum(len(r.calls) for r in results)
    samples = sum(len(sample_values(t.algbw_Bps)) for r in results for t in r.ops.values())
    return calls, samples, len(aggregation.open)


def run_windows(tmp_path: Path, windows: int) -> list[tuple[int, int, int]]:
    """Feed `windows` windows of 2 ranks through a shedding aggregation as a live run does
    (a report and a shed after each window's end); what it holds after each record."""
    root = tmp_path / f"run{windows}"
    paths = write_logs(root / "insp", windows)
    by_log = [[i.record for i in items(root, path) if not i.final] for path in paths]
    stored = Stored()
    aggregation = Aggregation(load=stored.load)
    found = []
    for step in range(max(map(len, by_log))):  # the two logs' records interleaved
        for records in by_log:
            if step < len(records):
                stored.keep(apply(aggregation, [records[step]]))
                if isinstance(records[step], StreamEnd):
                    aggregation.report(Options())
                    aggregation.shed()
                found.append(held(aggregation))
    return found


def test_what_the_aggregation_holds_does_not_grow_with_the_windows(tmp_path: Path) -> None:
    # 3 windows and 12: once shed, a complete window holds no call and no exact sample, so
    # what is held at any time is bounded by a window's, however many windows went before
    few, many = run_windows(tmp_path, 3), run_windows(tmp_path, 12)
    assert [max(column) for column in zip(*many, strict=True)] == [
        max(column) for column in zip(*few, strict=True)
    ]
    calls, samples, streams = (max(column) for column in zip(*many, strict=True))
    # a window's files keep their 3 calls and samples each until the next window is complete
    # too (its matching takes the next window's members of instances split by the boundary,
    # `straddle`): at most a complete window's 2 files and the next window's first; a log
    # has at most 3 windows open (K waits out its 60 s grace past the ops at 30-50 s of
    # K + 1, so it closes with K + 2's first op)
    assert (calls, samples, streams) == (3 * PER_WINDOW, 3 * PER_WINDOW, 2 * 3)
    # in the end only the last closed window's 2 files hold theirs, waiting for a next
    assert many[-1][:2] == (2 * PER_WINDOW, 2 * PER_WINDOW)


def test_a_report_of_many_windows_stays_readable(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_logs(root / "insp", 7)  # windows K … K + 7: 8
    rendered = text.render(analyse(root, Options())).splitlines()
    header = next(line for line in rendered if line.startswith("Windows: "))
    assert header == (
        "Windows: 8 (insp@20250718T193000Z, insp@20250718T193500Z, insp@20250718T194000Z, …, "
        "insp@20250718T200000Z, insp@20250718T200500Z: all in the per-window summary)"
    )
    # the per-window summary's columns stay aligned under names longer than 18 characters
    at = rendered.index("7. PER-WINDOW SUMMARY")
    rows = rendered[at + 2 : at + 12]
    assert rows[0].startswith("  window                 ranks")
    assert {len(line) for line in rows} == {len(rows[0])}
