"""An Inspector log cut into time windows that line up across ranks (`inspector_windows`)."""

from __future__ import annotations

from commscope.collector.inspector import LineReader, Op
from commscope.collector.inspector_windows import (
    MAX_GAP,
    NO_TIME,
    Cut,
    Cutter,
    Windowing,
    WindowRule,
    op_time_us,
    window_folder,
    window_stream,
)
from commscope.model.names import window_names
from inspector_builder import coll

W = 300_000_000  # µs: the default 300 s, grace 60 s
K = 5_842_890  # a window of July 2025: [K W, (K + 1) W)


def op(end_s: float | None, sn: int = 1) -> Op:
    """An op ending `end_s` seconds into window K (verbose: start + 100 µs); None: a line
    without any time (no start, no dump time)."""
    if end_s is None:
        line = coll(0, sn=sn).replace('"dump_timestamp_us"', '"other"')
    else:
        line = coll(0, sn=sn, exec_us=100, start_us=K * W + int(end_s * 1e6) - 100)
    found = LineReader().line(line)
    assert isinstance(found, Op)
    return found


def test_an_op_time_is_its_end_or_its_dump_time() -> None:
    assert op_time_us(op(10)) == K * W + 10_000_000
    plain = LineReader().line(coll(0, sn=3))  # not verbose: its dump time, DUMP_US + 3 ms
    assert isinstance(plain, Op) and op_time_us(plain) == 1_752_867_229_003_000


def test_windows_open_with_their_first_op_and_close_past_the_grace() -> None:
    cutter = Cutter(WindowRule())
    assert cutter.place(op(10)) == Cut((K,), K, ())
    # 310 s: window K + 1 opens; K stays open for late ops until (K + 1) W + 60 s
    assert cutter.place(op(310)) == Cut((K + 1,), K + 1, ())
    assert cutter.place(op(359.9)) == Cut((), K + 1, ())
    assert cutter.place(op(360)) == Cut((), K + 1, (K,))
    assert cutter.open == [K + 1]


def test_a_late_op_goes_to_the_lowest_window_open() -> None:
    cutter = Cutter(WindowRule())
    cutter.place(op(10))
    cutter.place(op(310))
    assert cutter.place(op(290)).window == K  # type: ignore[union-attr]  # K is still open
    cutter.place(op(400))  # closes K
    assert cutter.place(op(290)) == Cut((), K + 1, ())  # K closed: the lowest open


def test_a_jump_opens_the_empty_windows_between_and_closes_them() -> None:
    cutter = Cutter(WindowRule())
    cutter.place(op(10))
    # 3 windows on (905 s): K + 1 and K + 2 open empty (every rank has a file in them); K and
    # K + 1 close at once (905 s is past 600 + 60), K + 2 keeps its grace (up to 960 s)
    assert cutter.place(op(3 * 300 + 5)) == Cut((K + 1, K + 2, K + 3), K + 3, (K, K + 1))


def test_a_jump_beyond_max_gap_opens_no_empty_window() -> None:
    cutter = Cutter(WindowRule())
    cutter.place(op(10))
    far = (MAX_GAP + 5) * 300
    assert cutter.place(op(far)) == Cut((K + MAX_GAP + 5,), K + MAX_GAP + 5, (K,))


def test_an_op_without_time_goes_to_the_lowest_open_window_or_is_counted() -> None:
    windowing = Windowing(WindowRule())
    assert windowing.op(op(None)) is None
    assert windowing.pending.dropped == {NO_TIME: 1}
    windowing.op(op(10))
    assert windowing.op(op(None)) == Cut((), K, ())
    # the line counted before the first window is that window's
    assert windowing.live[K].stats.dropped == {NO_TIME: 1}
    assert windowing.live[K].stats.events == 2


def test_the_whole_log_is_one_window_for_w_0() -> None:
    windowing = Windowing(WindowRule(0))
    assert windowing.opened == (0,)
    assert [windowing.op(op(t)) for t in (10, 10_000)] == [Cut((), 0, ())] * 2
    assert windowing.end(123, b"") == (0,)
    assert windowing.live[0].stats.bytes_read == 123


def test_the_cut_is_the_same_whatever_the_reads() -> None:
    # the same ops cut by two cutters, one fed op by op, one after a restart (a new cutter
    # reading the log again from its start): the same windows for every op
    times = [10, 310, 290, 365, 200, 650, 1300, 1290, 1800]
    first, second = Cutter(WindowRule()), Cutter(WindowRule())
    ones = [first.place(op(t)) for t in times]
    assert [second.place(op(t)) for t in times] == ones
    assert [c.window - K for c in ones if c is not None] == [0, 1, 0, 1, 1, 2, 4, 4, 6]


def test_a_window_has_its_own_stream_id_and_a_folder_naming_its_utc_start() -> None:
    assert window_stream("ab" * 16, K) != window_stream("ab" * 16, K + 1)
    assert window_stream("ab" * 16, K) == window_stream("ab" * 16, K)
    assert window_folder(WindowRule(), "insp", K) == "insp@20250718T193000Z"
    assert window_folder(WindowRule(0), "insp", K) == "insp"
    # at the root: the root's name, as for a folder of Kineto traces there
    folders = [".@20250718T193000Z", ".@20250718T193500Z"]
    assert window_names("run", folders) == ["run@20250718T193000Z", "run@20250718T193500Z"]
