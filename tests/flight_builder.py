"""Hand-made PyTorch Flight Recorder dumps, with the keys and value types PyTorch 2.13 writes
(`FlightRecorderDetail.hpp`: `dump` for the pickle, `dump_json` for JSON)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

WORLD = ("0", "default_pg")


def entry(seq: int, name: str = "nccl:all_reduce", **over: Any) -> dict[str, Any]:
    """One entry of collective `seq` (1-based) on the default group, as the pickle holds it."""
    found: dict[str, Any] = {
        "record_id": seq - 1, "pg_id": 0, "process_group": WORLD, "thread_name": "python",
        "thread_id": "1", "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
        "profiling_name": name, "time_created_ns": 1_000 * seq, "input_sizes": [[1024]],
        "input_dtypes": ["Float"], "output_sizes": [[1024]], "output_dtypes": ["Float"],
        "state": "completed", "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None, "retired": True, "timeout_ms": 600_000,
        "is_p2p": False,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 10 + seq}],
    }  # fmt: skip
    return found | over


def dump(entries: list[dict[str, Any]], status: dict[str, Any] | None = None,
         ranks: str = "[0, 1]", version: str = "2.10") -> dict[str, Any]:  # fmt: skip
    found: dict[str, Any] = {
        "version": version,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "comm_lib_version": "2.21.5",
        "entries": entries,
    }
    if status is not None:
        found["pg_status"] = status
    return found


def status(enqueued: int, started: int, completed: int, pg_id: int = 0) -> dict[str, Any]:
    return {str(pg_id): {"last_enqueued_collective": enqueued,
                         "last_started_collective": started,
                         "last_completed_collective": completed}}  # fmt: skip


def as_json(found: dict[str, Any]) -> bytes:
    """As `dump_json` writes it: lists for tuples, 0 for no time, pg_status values as text."""
    entries = [
        {
            k: (0 if v is None and k.startswith("time_") else v)
            for k, v in e.items()
            if k != "frames"
        }
        for e in found["entries"]
    ]
    statuses = {
        pg: {k: str(v) for k, v in s.items()} for pg, s in found.get("pg_status", {}).items()
    }
    return json.dumps(found | {"entries": entries, "pg_status": statuses}).encode()


def write(folder: Path, rank: int, found: dict[str, Any], *, json_form: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if json_form:
        path = folder / f"nccl_trace_rank_{rank}.json"
        path.write_bytes(as_json(found))
    else:
        path = folder / f"nccl_trace_rank_{rank}"
        path.write_bytes(pickle.dumps(found))
    return path
