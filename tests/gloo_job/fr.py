"""A gloo job on CPU whose last rank stops before a collective, with Flight Recorder on: every
rank dumps its Flight Recorder buffer (pickle as `nccl_trace_rank_<rank>`, JSON as
`nccl_trace_rank_<rank>.json` with `--json`) into `--out` when its collectives end or time out.

Each rank runs `--steps` all_reduces of 1,024 float32 on the world group and an all_gather on a
group of ranks 0 and 1; the rank `--stop-rank` (default: the last) returns before all_reduce
number `--stop-at`, so the others enter it and time out after `--timeout-s`. Shell (a job).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
from pathlib import Path

# Flight Recorder reads its buffer size when the process group is made: set it first.
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--stop-at", type=int, default=3)
    parser.add_argument("--stop-rank", type=int, default=-1)
    parser.add_argument("--timeout-s", type=float, default=3.0)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def _work(args: argparse.Namespace, rank: int, stop_rank: int) -> None:
    pair = dist.new_group([0, 1])
    for step in range(args.steps):
        if rank == stop_rank and step == args.stop_at:
            return
        dist.all_reduce(torch.ones(1024))
        if rank in (0, 1):
            out = [torch.zeros(256) for _ in range(2)]
            dist.all_gather(out, torch.ones(256), group=pair)


def _dump(out: Path, rank: int, as_json: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if as_json:
        (out / f"nccl_trace_rank_{rank}.json").write_bytes(_dump_fr_trace_json())
    else:
        (out / f"nccl_trace_rank_{rank}").write_bytes(_dump_fr_trace())


def main() -> None:
    args = _arguments()
    timeout = datetime.timedelta(seconds=args.timeout_s)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    stop_rank = args.stop_rank % world
    with contextlib.suppress(RuntimeError):  # the collective the stopped rank skipped timed out
        _work(args, rank, stop_rank)
    _dump(Path(args.out), rank, args.json)
    os._exit(0)  # the process group cannot be torn down with a collective left hanging


if __name__ == "__main__":
    main()
