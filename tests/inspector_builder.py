"""NCCL Inspector log lines built by hand for the tests (the writer's keys, v4.1 layout)."""

from __future__ import annotations

import json
from typing import Any

DUMP_US = 1_752_867_229_000_000


def coll(  # noqa: PLR0917  # one record's fields
    rank: int,
    comm: str = "0xabc",
    n_ranks: int = 2,
    name: str = "AllReduce",
    sn: int = 1,
    size: int = 1_000_000,
    exec_us: int = 100,
    start_us: int | None = None,
    version: str = "v4.1",
    host: str = "node0",
    comm_name: str = "world",
) -> str:
    perf: dict[str, Any] = {
        "coll": name,
        "coll_sn": sn,
        "coll_msg_size_bytes": size,
        "coll_exec_time_us": exec_us,
        "coll_timing_source": "kernel_gpu",
        "coll_algobw_gbs": 1.0,
        "coll_busbw_gbs": 1.0,
    }
    if start_us is not None:
        perf["event_trace_sn"] = {"coll_start_sn": 1, "coll_stop_sn": 2}
        perf["event_trace_ts"] = {"coll_start_ts": start_us, "coll_stop_ts": start_us + 5}
    return json.dumps(
        {
            "header": {"id": comm, "comm_name": comm_name, "rank": rank, "n_ranks": n_ranks,
                       "nnodes": 1},
            "metadata": {"inspector_output_format_version": version, "git_rev": "",
                         "rec_mechanism": "nccl_profiler_interface",
                         "dump_timestamp_us": DUMP_US + sn * 1000, "hostname": host,
                         "pid": 100 + rank},
            "coll_perf": perf,
        }
    )  # fmt: skip


def p2p(  # noqa: PLR0917  # one record's fields
    rank: int,
    name: str,
    peer: int,
    comm: str = "0xdef",
    sn: int = 1,
    size: int = 4096,
    exec_us: int = 20,
    start_us: int | None = None,
) -> str:
    """A `p2p_perf` line as NCCL's inspector writes one (`inspectorCompletedP2p` in
    ext-profiler/inspector/inspector.cc): `p2p` "Send" or "Recv", `p2p_peer` the peer's rank
    in the communicator; verbose: `event_trace_ts` with `p2p_start_ts`, `p2p_stop_ts`."""
    perf: dict[str, Any] = {
        "p2p": name,
        "p2p_sn": sn,
        "p2p_peer": peer,
        "p2p_msg_size_bytes": size,
        "p2p_exec_time_us": exec_us,
        "p2p_timing_source": "kernel_gpu",
        "p2p_algobw_gbs": 1.0,
        "p2p_busbw_gbs": 1.0,
    }
    if start_us is not None:
        perf["event_trace_ts"] = {"p2p_start_ts": start_us, "p2p_stop_ts": start_us + exec_us}
    return json.dumps(
        {
            "header": {"id": comm, "comm_name": "pp", "rank": rank, "n_ranks": 2, "nnodes": 1},
            "metadata": {"inspector_output_format_version": "v4.1", "git_rev": "",
                         "rec_mechanism": "nccl_profiler_interface",
                         "dump_timestamp_us": DUMP_US + sn * 1000, "hostname": "node0",
                         "pid": 100 + rank},
            "p2p_perf": perf,
        }
    )  # fmt: skip
