"""Tiny CPU/gloo distributed training job that writes TorchTitan-style traces.

Launch (2 ranks, loopback only):

    MASTER_ADDR=127.0.0.1 python -m torch.distributed.run --standalone \
        --nproc_per_node 2 tests/gloo_job/train.py --out /tmp/x [--mode fsdp] [--gzip]

Output layout (same as TorchTitan's profiling trace handler):

    <out>/iteration_<N>/rank<R>_trace.json        (or .json.gz with --gzip)

or with --handler tensorboard torch.profiler.tensorboard_trace_handler's names there,
``<hostname>_<pid>.<time_ns>.pt.trace.json``.

where N is ``prof.step_num`` when the profiling window's trace is ready.
Each file is first written as ``<name>.tmp`` and then renamed (for plain JSON
Kineto's exporter does this itself, for .json.gz this script does it).

Profiling schedule: wait=1, warmup=1, active=2 (--active), repeat=2, so with
the default 10 steps there are two windows (steps 2-3 -> iteration_4, steps
6-7 -> iteration_8).

Collectives issued per training step (besides what DDP / FSDP2 do):
  * broadcast           (rank 0 -> all, a 4-element fp32 "config" tensor)
  * all_gather          (list form, one fp32 scalar-ish tensor per rank)
  * all_gather_single   (16 fp32 per rank -> 16*world; a.k.a.
                         all_gather_into_tensor in older torch)
  * reduce_scatter_single  (16*world fp32 -> 16 fp32 per rank; a.k.a.
                            reduce_scatter_tensor in older torch)
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import NoReturn

# torch warns about NumPy being absent; it is not needed here.
warnings.filterwarnings("ignore", message=".*NumPy.*")
warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")

# Loopback only. torch.distributed.run --standalone already binds the
# rendezvous to localhost; this keeps a manual launch on loopback too.
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

IN_FEATURES = 32
HIDDEN = 64
OUT_FEATURES = 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="trace output directory")
    p.add_argument(
        "--steps", type=int, default=10, help="training steps (>= 8 for two profiling windows)"
    )
    p.add_argument("--mode", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--gzip", action="store_true", help="write rank<R>_trace.json.gz")
    p.add_argument(
        "--handler",
        choices=("titan", "tensorboard"),
        default="titan",
        help="tensorboard: torch.profiler.tensorboard_trace_handler's names, "
        "<out>/iteration_<N>/<hostname>_<pid>.<time_ns>.pt.trace.json[.gz]",
    )
    p.add_argument("--slow-rank", type=int, default=None, help="rank that sleeps inside each step")
    p.add_argument(
        "--slow-ms", type=float, default=0.0, help="sleep (ms) of --slow-rank, before backward"
    )
    p.add_argument("--active", type=int, default=2, help="profiled steps per window")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-extra-collectives",
        action="store_true",
        help="only the collectives of DDP/FSDP2 (no explicit broadcast/all_gather/reduce_scatter)",
    )
    return p.parse_args(argv)


def build_model() -> nn.Module:
    # 32*64+64 + 64*64+64 + 64*8+8 = 6792 parameters
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, OUT_FEATURES),
    )


def wrap_model(model: nn.Module, mode: str) -> nn.Module:
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)  # CPU: no device_ids
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def tensorboard_handler(out_dir: str, use_gzip: bool):
    """torch's own handler, into <out>/iteration_<step_num>/ (its default worker name)."""
    from torch.profiler import tensorboard_trace_handler

    def handler(prof: profile) -> None:
        folder = os.path.join(out_dir, f"iteration_{prof.step_num}")
        tensorboard_trace_handler(folder, use_gzip=use_gzip)(prof)

    return handler


def make_trace_handler(out_dir: str, rank: int, use_gzip: bool):
    """TorchTitan-style on_trace_ready: <out>/iteration_<step_num>/rank<R>_trace.json[.gz]."""

    def handler(prof: profile) -> None:
        d = os.path.join(out_dir, f"iteration_{prof.step_num}")
        os.makedirs(d, exist_ok=True)
        final = os.path.join(d, f"rank{rank}_trace.json" + (".gz" if use_gzip else ""))
        begin = time.monotonic()
        if use_gzip:
            # Like torch.profiler's own ".gz" export (JSON to a temp file, then
            # gzip), but the gzip goes to "<final>.tmp" and is renamed, so the
            # .json.gz appears atomically. traceName is then the temp JSON path.
            with tempfile.TemporaryDirectory(prefix="gloo_job_") as td:
                raw = os.path.join(td, f"rank{rank}_trace.json")
                prof.export_chrome_trace(raw)
                tmp = final + ".tmp"
                with open(raw, "rb") as src, gzip.open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            os.replace(tmp, final)
        else:
            # Exactly what TorchTitan does. Kineto's ChromeTraceLogger writes
            # "<final>.tmp" and renames it to "<final>" when the trace is
            # complete, so traceName in the JSON is the final path.
            prof.export_chrome_trace(final)
        took = time.monotonic() - begin
        print(
            f"[rank{rank}] trace for step {prof.step_num} -> {final} ({took:.2f}s)",
            file=sys.stderr,
            flush=True,
        )

    return handler


def start() -> tuple[int, int]:
    """Join the gloo group (one intra-op thread per rank); this rank and the world size."""
    dist.init_process_group(backend="gloo")
    torch.set_num_threads(1)
    return dist.get_rank(), dist.get_world_size()


def profiled(
    out_dir: str,
    rank: int,
    active: int,
    repeat: int,
    use_gzip: bool = False,
    *,
    tensorboard: bool = False,
) -> profile:
    """The profiler of every job here: wait=1, warmup=1, `active` steps, `repeat` windows,
    written in TorchTitan's layout (`make_trace_handler`), or by torch's own
    `tensorboard_trace_handler` (`tensorboard`)."""
    handler = (
        tensorboard_handler(out_dir, use_gzip)
        if tensorboard
        else make_trace_handler(out_dir, rank, use_gzip)
    )
    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=repeat),
        on_trace_ready=handler,
        record_shapes=True,
    )


def finish() -> None:
    """Wait for every rank, then leave the group."""
    dist.barrier()
    dist.destroy_process_group()


def exit_now(code: int) -> NoReturn:
    """Exit with `code`, skipping the C++ static destructors.

    torch 2.13 on CPU: at interpreter teardown, after destroy_process_group(), a still-joinable
    C++ thread (gloo / the profiler) is destroyed now and then and std::terminate aborts the
    process ("terminate called without an active exception", SIGABRT; about 1 run in 10 on a
    loaded machine, see pytorch/pytorch#190489 and the abandoned atexit fix in #179291). Every
    trace is on disk and renamed by now.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = start()
    torch.manual_seed(args.seed)  # same init on all ranks

    model = wrap_model(build_model(), args.mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    gen = torch.Generator().manual_seed(args.seed + 1000 + rank)

    cfg = torch.zeros(4)
    shard = torch.zeros(16)
    gathered = torch.zeros(16 * world)
    rs_in = torch.zeros(16 * world)
    rs_out = torch.zeros(16)

    # torch 2.13 deprecates all_gather_into_tensor / reduce_scatter_tensor in
    # favour of all_gather_single / reduce_scatter_single (same c10d ops).
    all_gather_single = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    reduce_scatter_single = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)

    slow_s = args.slow_ms / 1000.0 if args.slow_rank == rank else 0.0
    t0 = time.monotonic()
    tensorboard = args.handler == "tensorboard"
    with profiled(args.out, rank, args.active, 2, args.gzip, tensorboard=tensorboard) as prof:
        for step in range(args.steps):
            x = torch.randn(args.batch, IN_FEATURES, generator=gen)
            y = torch.randn(args.batch, OUT_FEATURES, generator=gen)
            if not args.no_extra_collectives:
                if rank == 0:
                    cfg.fill_(float(step))
                dist.broadcast(cfg, src=0)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            if slow_s:
                time.sleep(slow_s)
            loss.backward()
            opt.step()
            if not args.no_extra_collectives:
                ls = [torch.zeros(1) for _ in range(world)]
                dist.all_gather(ls, loss.detach().reshape(1))
                shard.fill_(float(rank))
                all_gather_single(gathered, shard)
                rs_in.fill_(1.0)
                reduce_scatter_single(rs_out, rs_in)
                if rank == 0 and step % 5 == 0:
                    mean_loss = torch.cat(ls).mean().item()
                    print(f"step {step} mean loss {mean_loss:.4f}", file=sys.stderr, flush=True)
            prof.step()
    finish()
    if rank == 0:
        took = time.monotonic() - t0
        print(
            f"done: {args.steps} steps, mode={args.mode}, world={world}, {took:.2f}s",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    exit_now(main())
