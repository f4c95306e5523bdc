"""The aggregator's state after a restart (shell: reads the state folder through `Store`).

What was finished is restored as it was stored; each open stream's log is replayed through the
same apply the loop uses, up to its first record this version refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import msgspec
from commscope.model.schema import Record
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.service.store import Store

log = logging.getLogger("commscope.aggregate")

_RECORDS = msgspec.msgpack.Decoder(Record)


def recover(aggregation: Aggregation, store: Store, apply: Callable[[Record, bytes], None]) -> None:
    """Restore the finished files and replay every open stream's log with `apply`."""
    aggregation.restore(store.finished(), store.retired())
    for stream, frames in store.logs():
        if stream in aggregation.finished:  # crashed between done/ and the log's removal
            store.forget(stream, keep_done=True)
            continue
        _replay(aggregation, store, apply, stream, frames)
    log.info(
        "state recovered",
        extra={"finished": len(aggregation.finished), "open": len(aggregation.open)},
    )


def _replay(
    aggregation: Aggregation,
    store: Store,
    apply: Callable[[Record, bytes], None],
    stream: str,
    frames: Iterator[bytes],
) -> None:
    """Apply a stream's log up to its first record this version refuses (a protocol-4
    Batch, logged before an upgrade); the log is then cut there, so what follows (the
    collector, told the position, sends it again) is logged after what was applied."""
    applied: list[bytes] = []
    refused = False
    for frame in frames:  # read to the end: that mends a torn tail
        record = None if refused else _logged(stream, frame)
        refused = refused or record is None
        if record is not None and aggregation.verdict(record) is Verdict.APPLY:
            apply(record, frame)
            applied.append(frame)
    if refused:
        store.forget(stream)
        for frame in applied:
            store.append(stream, frame)


def _logged(stream: str, frame: bytes) -> Record | None:
    """A logged record (None, logged, if it does not fit this version's schema: replay of
    its stream stops there and the stream stays unfinished)."""
    try:
        record: Record = _RECORDS.decode(frame)
    except msgspec.DecodeError as exc:
        log.warning("logged record refused", extra={"stream": stream, "reason": str(exc)})
        return None
    return msgspec.structs.replace(record, stream=stream)  # logged under its stream's key
