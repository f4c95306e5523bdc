"""A gloo job on CPU whose last rank stops before a collective, with Flight Recorder on: every
rank dumps its Flight Recorder buffer (pickle as `nccl_trace_rank_<rank>`, JSON as
`nccl_trace_rank_<rank>.json` with `--json`) into `--out` when its collectives end or time out.

Each rank runs `--steps` all_reduces of 1,024 float32 on the world group and an all_gather on a
group of ranks 0 and 1; the rank `--stop-rank` (default: the last) returns before all_reduce
number `--stop-at`, so the others enter it and time out after `--timeout-s`. With
`--profile DIR` every rank also profiles its steps with torch.profiler (CPU), each step a
`ProfilerStep#N` span holding a small matmul and its collectives, and writes
`DIR/rank<rank>_trace.json` (Kineto) at the end: the stopped rank's last step is N = `--stop-at`
- 1, the others' is `--stop-at`, which holds the all_reduce that timed out. Shell (a job).
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
from torch.profiler import ProfilerActivity, profile, record_function


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--stop-at", type=int, default=3)
    parser.add_argument("--stop-rank", type=int, default=-1)
    parser.add_argument("--timeout-s", type=float, default=3.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", default=None, help="also write Kineto traces here")
    return parser.parse_args()


def _work(args: argparse.Namespace, rank: int, stop_rank: int) -> None:
    pair = dist.new_group([0, 1])
    for step in range(args.steps):
        if rank == stop_rank and step == args.stop_at:
            return
        with record_function(f"ProfilerStep#{step}"):
            torch.ones(64, 64) @ torch.ones(64, 64)
            dist.all_reduce(torch.ones(1024))
            if rank in (0, 1):
                out = [torch.zeros(256) for _ in range(2)]
                dist.all_gather(out, torch.ones(256), group=pair)


def _attempt(args: argparse.Namespace) -> int:
    """Join the job and run `_work` until it ends or times out; the rank."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    with contextlib.suppress(RuntimeError):  # the collective the stopped rank skipped timed out
        _work(args, rank, args.stop_rank % dist.get_world_size())
    return rank


def _profiled(args: argparse.Namespace) -> int:
    """`_attempt`, profiled when asked (the profiler starts before the process group is made,
    so a slow start delays the rendezvous, not a collective); the trace written however the
    work ends. The rank."""
    if args.profile is None:
        return _attempt(args)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        rank = _attempt(args)
    Path(args.profile).mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(Path(args.profile) / f"rank{rank}_trace.json"))
    return rank


def _dump(out: Path, rank: int, as_json: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if as_json:
        (out / f"nccl_trace_rank_{rank}.json").write_bytes(_dump_fr_trace_json())
    else:
        (out / f"nccl_trace_rank_{rank}").write_bytes(_dump_fr_trace())


def main() -> None:
    args = _arguments()
    rank = _profiled(args)
    _dump(Path(args.out), rank, args.json)
    os._exit(0)  # the process group cannot be torn down with a collective left hanging


if __name__ == "__main__":
    main()
