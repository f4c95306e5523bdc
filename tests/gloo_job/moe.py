"""Tiny CPU/gloo expert-parallel (MoE) job with a skewed router; writes TorchTitan-style traces.

Launch (4 ranks, loopback only):

    MASTER_ADDR=127.0.0.1 python -m torch.distributed.run --standalone \
        --nproc_per_node 4 tests/gloo_job/moe.py --out /tmp/x

Each rank hosts EXPERTS_PER_RANK experts (rank r: experts 2r, 2r+1) and routes TOKENS tokens of
HIDDEN floats (a row: 64 B). The router is skewed on purpose: every even token goes to expert
HOT (4, on rank 2), odd token t to expert (t // 2) % 8. So every rank sends 8, 8, 40 and 8 rows
to ranks 0-3. Per step: the token counts are exchanged (an even all_to_all_single), the tokens
dispatched (all_to_all_single with uneven splits), the experts run, and the results combined
(the reverse all_to_all_single). Profiled steps 2-3 → iteration_4/rank<R>_trace.json.
"""

from __future__ import annotations

import argparse

# train.py's set-up (warnings, loopback) runs before torch is imported: import it first.
from train import exit_now, finish, profiled, start  # isort: skip

import torch
import torch.distributed as dist

TOKENS = 64
HIDDEN = 16
EXPERTS_PER_RANK = 2
HOT = 4


def expert_of(token: int) -> int:
    return HOT if token % 2 == 0 else (token // 2) % 8


def route(world: int) -> tuple[torch.Tensor, list[int]]:
    """The tokens' order by destination rank, and how many go to each rank."""
    owners = [expert_of(t) % (EXPERTS_PER_RANK * world) // EXPERTS_PER_RANK for t in range(TOKENS)]
    order = sorted(range(TOKENS), key=lambda t: owners[t])
    return torch.tensor(order), [owners.count(r) for r in range(world)]


def step(tokens: torch.Tensor, world: int, weight: torch.Tensor) -> torch.Tensor:
    order, sends = route(world)
    counts = torch.tensor(sends, dtype=torch.int64)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)  # the counts exchange (even)
    receives = received.tolist()
    inbox = torch.empty(sum(receives), HIDDEN)
    dist.all_to_all_single(inbox, tokens[order], receives, sends)  # dispatch
    worked = torch.tanh(inbox @ weight)  # the experts
    back = torch.empty(TOKENS, HIDDEN)
    dist.all_to_all_single(back, worked, sends, receives)  # combine
    return back


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    rank, world = start()
    torch.manual_seed(rank)
    weight = torch.randn(HIDDEN, HIDDEN)
    with profiled(args.out, rank, active=2, repeat=1) as prof:
        for _ in range(args.steps):
            step(torch.randn(TOKENS, HIDDEN), world, weight)
            prof.step()
    finish()
    return 0


if __name__ == "__main__":
    exit_now(main())
