"""Writes the NCCL Inspector logs of docs/inspector.md's excerpt: 4 ranks on 2 nodes, verbose
(start times kept), in NCCL Inspector's v4.1 layout. The world all-reduce runs at 4 message
sizes with α = 25 µs and busbw 180 GB/s (t = α + S·2(n-1)/n / β), rank 2 arriving 40 µs after
the others; each node's two ranks run a TP all-gather (n = 2, 120 GB/s busbw) between them.

    .venv/bin/python scripts/inspector_demo.py DIR && commscope report DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

T0_US = 1_752_867_229_000_000
ALPHA_US = 25.0
WORLD_BUSBW = 180e9  # B/s
TP_BUSBW = 120e9
SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)  # bytes, all-reduce
TP_SIZE = 8 << 20  # the all-gather's per-rank part (NCCL's coll_msg_size_bytes)
STEPS = 6
LATE_RANK, LATE_US = 2, 40.0


def record(rank: int, comm: tuple[str, str, int, int], perf: dict[str, Any]) -> str:
    """One line as NCCL's inspector writes it: `comm` is (id, name, rank in it, its ranks)."""
    ident, name, comm_rank, n_ranks = comm
    return json.dumps(
        {
            "header": {"id": ident, "comm_name": name, "rank": comm_rank, "n_ranks": n_ranks,
                       "nnodes": 2 if n_ranks == 4 else 1},
            "metadata": {"inspector_output_format_version": "v4.1", "git_rev": "",
                         "rec_mechanism": "nccl_profiler_interface",
                         "dump_timestamp_us": int(perf["event_trace_ts"]["coll_stop_ts"]) + 500,
                         "hostname": f"node{rank // 2}", "pid": 1000 + rank},
            "coll_perf": perf,
        }
    )  # fmt: skip


def perf(name: str, sn: int, size: int, start_us: float, exec_us: float) -> dict[str, Any]:
    return {
        "coll": name,
        "coll_sn": sn,
        "coll_msg_size_bytes": size,
        "coll_exec_time_us": round(exec_us),
        "coll_timing_source": "kernel_gpu",
        "coll_algobw_gbs": 0.0,
        "coll_busbw_gbs": 0.0,
        "event_trace_sn": {"coll_start_sn": 2 * sn, "coll_stop_sn": 2 * sn + 1},
        "event_trace_ts": {"coll_start_ts": round(start_us),
                           "coll_stop_ts": round(start_us + exec_us)},
    }  # fmt: skip


def lines(rank: int) -> list[str]:
    """One rank's log: per step, the TP all-gather then the world all-reduce at each size."""
    world = ("0x7f8c496ae9f661", "DP", rank, 4)
    tp = (f"0x1a2b3c4d5e6f70{rank // 2}", f"TP node{rank // 2}", rank % 2, 2)
    out, now, world_sn, tp_sn = [], float(T0_US), 0, 0
    for _ in range(STEPS):
        for _ in range(2):
            tp_sn += 1
            exec_us = ALPHA_US + TP_SIZE * 2 * 0.5 / TP_BUSBW * 1e6  # S = 2 x part, F = 1/2
            out.append(record(rank, tp, perf("AllGather", tp_sn, TP_SIZE, now, exec_us)))
            now += exec_us + 200
        for size in SIZES:
            world_sn += 1
            arrival = now + (LATE_US if rank == LATE_RANK else 0.0)
            end = now + LATE_US + ALPHA_US + size * 2 * 3 / 4 / WORLD_BUSBW * 1e6
            out.append(
                record(rank, world, perf("AllReduce", world_sn, size, arrival, end - arrival))
            )
            now = end + 300
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(4):
        path = folder / f"node{rank // 2}-pid{1000 + rank}.log"
        path.write_text("".join(line + "\n" for line in lines(rank)), encoding="utf-8")
    print(f"wrote 4 NCCL Inspector logs to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
