"""Cost of the clock-offset estimate of one window of the simulated TorchTitan-like job
(tests/simjob.py, instances built in memory by tests/sim_instances.py), this branch's
`clocks.offsets` against the estimator it replaced (alternating medians over each rank's pooled
residuals, read from git at BEFORE), in the same run: CPU time, best of 3, and the largest
error against the simulated node clocks.

    .venv/bin/python tests/bench/clocks_bench.py [RANKS ...]     (default: 64 256 1024)
"""

from __future__ import annotations

import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commscope.pipeline import clocks
from machineinfo import cpu_and_python
from sim_instances import instances, true_offset_ns
from simjob import Job

BEFORE = "3ae7fdf"  # main before this branch


def before() -> types.ModuleType:
    """The replaced pipeline/clocks.py, loaded from git as a module."""
    root = Path(__file__).resolve().parents[2]
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:pipeline/clocks.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("clocks_before")
    exec(compile(source, "clocks_before.py", "exec"), module.__dict__)
    return module


def best(run: Callable[[], object], repeat: int = 3) -> tuple[float, object]:
    times, found = [], None
    for _ in range(repeat):
        start = time.process_time()
        found = run()
        times.append(time.process_time() - start)
    return min(times), found


def main() -> None:
    old = before()
    print(cpu_and_python())
    print(f"{'ranks':>5} {'instances':>9} {'ends':>7} {'before s':>9} {'after s':>8} "
          f"{'ratio':>6} {'err before µs':>13} {'err after µs':>12}")  # fmt: skip
    for ranks in [int(a) for a in sys.argv[1:]] or [64, 256, 1024]:
        job = Job(ranks)
        found = instances(job)
        ends = sum(len(i.starts) for i in found)
        t0, f0 = best(lambda found=found: old.offsets(found))
        t1, f1 = best(lambda found=found: clocks.offsets(found))
        e0, e1 = (max(abs(f[r][0] - true_offset_ns(job, r)) for r in f) / 1e3 for f in (f0, f1))  # type: ignore[union-attr]
        print(f"{ranks:>5} {len(found):>9,} {ends:>7,} {t0:>9.3f} {t1:>8.3f} {t1 / t0:>5.1f}x "
              f"{e0:>13.1f} {e1:>12.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
