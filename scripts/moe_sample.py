"""Writes samples/gloo_moe_4rank: tests/gloo_job/moe.py's skewed MoE job profiled over two
windows (steps 2-3 and 6-7 → iteration_4 and iteration_8), gzipped as TorchTitan writes them.

    MASTER_ADDR=127.0.0.1 python -m torch.distributed.run --standalone \
        --nproc_per_node 4 scripts/moe_sample.py --out samples/gloo_moe_4rank
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gloo_job"))
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch
import torch.distributed as dist
from moe import HIDDEN, TOKENS, step
from torch.profiler import ProfilerActivity, profile, schedule
from train import make_trace_handler


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    weight = torch.randn(HIDDEN, HIDDEN)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
        on_trace_ready=make_trace_handler(args.out, rank, True),
        record_shapes=True,
    ) as prof:
        for _ in range(9):
            step(torch.randn(TOKENS, HIDDEN), world, weight)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
