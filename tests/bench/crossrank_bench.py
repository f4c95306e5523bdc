"""Cost of the cross-rank analysis of one window, against the per-rank metrics of the same
window measured in the same run (CPU time, best of 3). Synthetic windows from
tests/crossrank_builder.py: every rank runs every collective of one process group, one rank
late, 16 message sizes.

Memory (tracemalloc, Python heap): the window's per-rank results as they arrive (with each
rank's list of calls: the baseline), against what the live aggregator keeps of a complete
window (`Aggregation.shed`): the results without their call lists, plus the window's cached
cross-rank facts.

    .venv/bin/python tests/bench/crossrank_bench.py
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commscope.pipeline import crossrank, skew
from commscope.pipeline.sections import Context, sections
from crossrank_builder import Scenario, calls, results
from machineinfo import cpu_and_python

SHAPES = ((8, 500), (64, 500), (64, 2000))


def best(run: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def cross(found: dict, infos: dict) -> None:
    window = crossrank.window(found, infos)
    skew.section(window.arrivals)
    crossrank.alpha_beta(window, 450e9)


def memory(scenario: Scenario) -> tuple[int, int]:
    """(bytes of the results with their calls, bytes kept once the calls are dropped)."""
    gc.collect()
    tracemalloc.start()
    found = results(calls(scenario)[0])
    gc.collect()
    full = tracemalloc.get_traced_memory()[0]
    window = crossrank.window(found, {rank: crossrank.RankInfo() for rank in found})
    for result in found.values():
        result.calls = []
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del window
    return full, kept


def main() -> None:
    print(cpu_and_python())
    print(f"{'ranks':>5} {'collectives':>11} {'per-rank s':>10} {'cross-rank s':>12} {'ratio':>7}")
    for ranks, instances in SHAPES:
        scenario = shape(ranks, instances)
        found = results(calls(scenario)[0])
        infos = {rank: crossrank.RankInfo() for rank in found}
        base = best(lambda found=found: sections(found, Context()))
        mine = best(lambda found=found, infos=infos: cross(found, infos))
        print(
            f"{ranks:>5} {ranks * instances:>11,} {base:>10.3f} {mine:>12.3f} {mine / base:>6.1f}x"
        )

    print()
    print(f"{'ranks':>5} {'collectives':>11} {'with calls MB':>13} {'kept MB':>8} {'ratio':>7}")
    for ranks, instances in SHAPES:
        full, kept = memory(shape(ranks, instances))
        line = f"{ranks:>5} {ranks * instances:>11,} {full / 1e6:>13.1f} {kept / 1e6:>8.1f}"
        print(f"{line} {kept / full:>6.2f}x")


def shape(ranks: int, instances: int) -> Scenario:
    return Scenario(ranks=ranks, instances=instances, slow_rank=3, late_ns=200_000,
                    sizes=[2**k for k in range(10, 26)], end_noise_ns=2_000)  # fmt: skip


if __name__ == "__main__":
    main()
