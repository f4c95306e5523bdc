"""Reason keys of old commscope versions' sentences (pure): what a stored result or a report
written before the reasons became snake_case keys needs to load.

Up to protocol 9, state folder version 3 and report schema 5, `FileStats.dropped` (and
`CollectorStats.dropped`) were keyed by English sentences; `OLD_KEYS` gives each one's key.
The aggregator's state migration (`service/store.py`, version 3 to 4) and the report loader
(`pipeline/compare.py`) rename them; a key already current is left as it is.
"""

from __future__ import annotations

from typing import Any, Final

OLD_KEYS: Final[dict[str, str]] = {
    "span without numeric ts/dur (or out of range)": "bad_span",
    "kernel/op event that is not a complete span (ph != X)": "not_complete_span",
    "args that are not an object": "args_not_object",
    "[memory] event without Device Id/Type or Total Allocated": "memory_event_incomplete",
    "ProfilerStep without a step number": "step_without_number",
    "traceEvents item that is not an object": "event_not_object",
    "event whose cat is not a string": "cat_not_string",
    "value beyond 64 bits, NaN or Infinity, or bytes not UTF-8 (mended)": "value_mended",
    "comm kernel resolved without all its calls (file beyond the "
    "memory bounds)": "comm_kernel_unresolved",
    "inspector line that is not JSON": "inspector_not_json",
    "inspector line cut short (no newline at the end of the file)": "inspector_cut_short",
    "inspector record of an unknown format version": "inspector_unknown_version",
    "inspector record missing keys or with bad values": "inspector_bad_record",
    "inspector line longer than 1 MiB (left out)": "inspector_line_too_long",
    "inspector op of a multi-GPU process on a communicator other "
    "than its largest": "inspector_other_comm",
    "cpu event whose tid is neither a number nor a name": "bad_tid",
    "inspector op without a time (no dump_timestamp_us, not "
    "verbose): in no window": "inspector_no_time",
    "unreadable file": "unreadable_file",
    "malformed reply from the aggregator": "malformed_reply",
    "file changed while resuming": "file_changed",
}


def renamed(dropped: dict[Any, Any]) -> dict[Any, Any]:
    """A `dropped` map with every old sentence under its key (counts of one key added up)."""
    keyed: dict[Any, Any] = {}
    for reason, count in dropped.items():
        key = OLD_KEYS.get(reason, reason) if isinstance(reason, str) else reason
        keyed[key] = keyed[key] + count if key in keyed else count
    return keyed


def upgrade_stats(holder: object) -> bool:
    """Rename the drop reasons of a raw document's `stats` (a stored result, an end record, a
    report's rank facts) in place; whether it had an old one."""
    stats = holder.get("stats") if isinstance(holder, dict) else None
    if not isinstance(stats, dict):
        return False
    dropped = stats.get("dropped")
    if not isinstance(dropped, dict) or not any(reason in OLD_KEYS for reason in dropped):
        return False
    stats["dropped"] = renamed(dropped)
    return True


def upgrade_report(document: object) -> None:
    """Rename the drop reasons of a raw JSON report in place (its inputs and rank facts)."""
    if not isinstance(document, dict):
        return
    inputs = document.get("inputs")
    if isinstance(inputs, dict) and isinstance(inputs.get("dropped_events"), dict):
        inputs["dropped_events"] = dict(sorted(renamed(inputs["dropped_events"]).items()))
    windows = document.get("windows")
    for window in windows if isinstance(windows, list) else ():
        facts = window.get("facts") if isinstance(window, dict) else None
        for rank in facts.values() if isinstance(facts, dict) else ():
            upgrade_stats(rank)
