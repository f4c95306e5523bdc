"""An NCCL Inspector log cut into time windows that line up across ranks (pure).

Inspector appends one log for the whole run; live and offline it is cut into windows of
`width_s` seconds (W, `--inspector-window`, default 300) on the log's own clock (Inspector's
gettimeofday µs), aligned to multiples of W since the epoch, so window k of every rank's log
covers the same wall-time span [kW, (k+1)W). An op's time is its end: `coll_start_ts` +
`coll_exec_time_us` in a verbose log, else its line's `dump_timestamp_us` (written when the op
completed). `Cutter.place` takes the ops in the order of the log's lines and says, for each,
which windows open before it, its window and which windows close after it:

- an op in a window above every one opened so far opens it, and the empty windows between
  (at most MAX_GAP of them: a rank idle for a window still has a file in it, so the window
  completes; a jump further than that, a clock gone wrong, opens no empty window);
- an op whose window is open goes there; one whose window already closed (logged late) or was
  never opened goes to the lowest window still open;
- window k closes once an op at or past (k+1)W + G is read, G = W / 5 (the grace for ops
  logged late: 60 s for the default W), or at the log's end; an op with no time (neither a
  start nor a dump time) goes to the lowest open window, or nowhere before the first window.

Every decision rests on the ops read before, so the cut is a function of the log's bytes: a
collector restarted mid-log, and the offline reader, cut the same windows. W = 0 keeps the
whole log as one window (`whole`). A window's stream id and folder name derive from the log's
and from k (`window_stream`, `window_folder`), the folder's name saying its UTC start.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from commscope.collector.inspector import TRUNCATED, Op, count_dropped
from commscope.model.inspector import AT
from commscope.model.schema import EventDropReason, FileStats

DEFAULT_WINDOW_S: Final = 300
MAX_WINDOW_S: Final = 7 * 86_400
_GRACE_SHARE: Final = 5  # G = W / GRACE_SHARE
MAX_GAP: Final = 288  # empty windows opened at most on one jump (a day of the default W)
NO_TIME: Final = "inspector_no_time"
_US: Final = 1_000_000


@dataclass(frozen=True)
class WindowRule:
    width_s: int = DEFAULT_WINDOW_S  # 0: the whole log is one window

    @property
    def whole(self) -> bool:
        return self.width_s == 0

    @property
    def width_us(self) -> int:
        return self.width_s * _US

    @property
    def grace_us(self) -> int:
        return self.width_us // _GRACE_SHARE


@dataclass(frozen=True)
class Cut:
    """What one op does: the windows opened before it, its window, those closed after it."""

    opened: tuple[int, ...]
    window: int
    closed: tuple[int, ...]


def op_time_us(op: Op) -> int | None:
    """The op's end on its host's clock (µs since the epoch), None when the log has none."""
    if op.start_us is not None:
        return op.start_us + op.exec_us
    return op.header.dump_us


@dataclass
class Cutter:
    """The windows of one log as its ops are read, in order (see the module docstring)."""

    rule: WindowRule
    open: list[int] = field(default_factory=list)  # ascending
    top: int | None = None  # the highest window opened so far

    def begin(self) -> tuple[int, ...]:
        """The windows open before the first line: the whole log's one (W = 0), else none."""
        return self._open_to(0) if self.rule.whole else ()

    def place(self, op: Op) -> Cut | None:
        """Where `op` goes; None: it has no time and no window is open yet."""
        if self.rule.whole:
            return Cut(self._open_to(0), 0, ())
        time = op_time_us(op)
        if time is None:
            return Cut((), self.open[0], ()) if self.open else None
        own = time // self.rule.width_us
        opened = self._open_to(own)
        window = own if own in self.open else self.open[0]
        return Cut(opened, window, self._close_before(time))

    def _open_to(self, window: int) -> tuple[int, ...]:
        if self.top is not None and window <= self.top:
            return ()
        low = window if self.top is None or window - self.top > MAX_GAP + 1 else self.top + 1
        opened = tuple(range(low, window + 1))
        self.open.extend(opened)
        self.top = window
        return opened

    def _close_before(self, time: int) -> tuple[int, ...]:
        width, grace = self.rule.width_us, self.rule.grace_us
        closed = tuple(k for k in self.open if time >= (k + 1) * width + grace)
        if closed:
            self.open = self.open[len(closed) :]
        return closed

    def end(self) -> tuple[int, ...]:
        """The windows still open, closed at the log's end."""
        closed, self.open = tuple(self.open), []
        return closed


@dataclass
class Slot:
    """One window's ops (those not taken yet), whether all had their start, its counters."""

    index: int
    stats: FileStats
    ops: list[Op] = field(default_factory=list)
    starts: bool = True


class Windowing:
    """A log's lines, in order, into windows (`Cutter`): the live stream and the offline
    reader keep their windows through this, so both cut and count alike. A line left out is
    counted in the lowest window open (before any, in the first to open); the log's bytes
    and a last line cut short go with its last window."""

    def __init__(self, rule: WindowRule) -> None:
        self.cutter = Cutter(rule)
        self.live: dict[int, Slot] = {}
        self.pending = FileStats()  # lines left out before the first window opened
        self.opened = self._open(self.cutter.begin())  # the first, for W = 0

    def op(self, op: Op) -> Cut | None:
        """`op` into its window (None: it has no time and no window is open: counted)."""
        cut = self.cutter.place(op)
        if cut is None:
            self.drop(NO_TIME)
            return None
        self._open(cut.opened)
        slot = self.live[cut.window]
        slot.ops.append(op)
        slot.starts = slot.starts and op.start_us is not None
        slot.stats.events += 1
        return cut

    def _open(self, indices: tuple[int, ...]) -> tuple[int, ...]:
        for index in indices:
            self.live[index] = Slot(index, self.pending)
            self.pending = FileStats()
        return indices

    def drop(self, reason: EventDropReason) -> None:
        lowest = min(self.live, default=None)
        count_dropped(self.pending if lowest is None else self.live[lowest].stats, reason)

    def end(self, bytes_read: int, rest: bytes) -> tuple[int, ...]:
        """The windows open at the log's end (`rest`: its last partial line), to close."""
        if rest.strip():
            self.drop(TRUNCATED)
        last = self.live[max(self.live)].stats if self.live else self.pending
        last.bytes_read = bytes_read
        return self.cutter.end()


def window_stream(log_stream: str, window: int) -> str:
    """Window `window`'s stream id, from its log's (the same whenever the log is read)."""
    return hashlib.blake2b(f"{log_stream}\0w{window}".encode(), digest_size=16).hexdigest()


def _window_start(rule: WindowRule, window: int) -> str:
    """The window's UTC start, as its name says it (`20250718T193000Z`)."""
    when = datetime.fromtimestamp(window * rule.width_s, tz=UTC)
    return when.strftime("%Y%m%dT%H%M%SZ")


def window_folder(rule: WindowRule, folder: str, window: int) -> str:
    """The folder a window's stream names: the log's folder (relative to the watched root;
    "." for the root itself), `@` and the window's UTC start (`names.window_names` shows
    `.@…` as the root's name and `@…`). The whole log (W = 0): its folder."""
    return folder if rule.whole else f"{folder}{AT}{_window_start(rule, window)}"
