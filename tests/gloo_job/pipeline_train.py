"""Tiny CPU/gloo pipeline-parallel job (torch.distributed.pipelining) that writes traces.

Launch (N ranks = N stages, loopback only):

    MASTER_ADDR=127.0.0.1 python -m torch.distributed.run --standalone \
        --nproc_per_node 3 tests/gloo_job/pipeline_train.py --out /tmp/x \
        [--schedule 1F1B] [--slow-stage 1 --slow-matmuls 40]

Each rank holds one stage: a Linear(64, 64) + ReLU; the stage `--slow-stage` also multiplies a
256 x 256 matrix `--slow-matmuls` times in each microbatch's forward (wasted compute: a cpu_op,
so it counts as that stage's computation). The schedule (GPipe or 1F1B) runs 4 microbatches
a step; activations go forward and gradients back as gloo send/recv (batch_isend_irecv).
Profiling as tests/gloo_job/train.py: wait=1, warmup=1, active=--active, repeat=1, written to
<out>/iteration_<N>/rank<R>_trace.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")
warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

WIDTH = 64
MICROBATCHES = 4
BATCH = 16


class Stage(nn.Module):
    def __init__(self, slow_matmuls: int) -> None:
        super().__init__()
        self.layer = nn.Linear(WIDTH, WIDTH)
        self.slow_matmuls = slow_matmuls
        self.waste = torch.randn(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for _ in range(self.slow_matmuls):
                torch.mm(self.waste, self.waste)
        return torch.relu(self.layer(x))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True, help="trace output directory")
    p.add_argument("--schedule", choices=("GPipe", "1F1B"), default="GPipe")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--active", type=int, default=3, help="profiled steps")
    p.add_argument("--slow-stage", type=int, default=None)
    p.add_argument("--slow-matmuls", type=int, default=0)
    return p.parse_args(argv)


def handler(out: str, rank: int):  # type: ignore[no-untyped-def]
    def ready(prof: profile) -> None:
        folder = os.path.join(out, f"iteration_{prof.step_num}")
        os.makedirs(folder, exist_ok=True)
        prof.export_chrome_trace(os.path.join(folder, f"rank{rank}_trace.json"))

    return ready


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    args = parse_args(argv)
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    slow = args.slow_matmuls if args.slow_stage == rank else 0
    stage = PipelineStage(Stage(slow), rank, world, torch.device("cpu"))
    kind = ScheduleGPipe if args.schedule == "GPipe" else Schedule1F1B
    pipe = kind(stage, MICROBATCHES, loss_fn=lambda out, target: ((out - target) ** 2).mean())
    gen = torch.Generator().manual_seed(1000)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1),
        on_trace_ready=handler(args.out, rank),
        record_shapes=True,
    ) as prof:
        for _ in range(args.steps):
            x = torch.randn(BATCH, WIDTH, generator=gen)
            y = torch.randn(BATCH, WIDTH, generator=gen)
            if rank == 0:
                pipe.step(x)
            elif rank == world - 1:
                pipe.step(target=y, losses=[])
            else:
                pipe.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
    print(f"[rank{rank}] done", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
