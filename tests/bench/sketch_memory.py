"""Bytes the whole run keeps for its bandwidth quantiles: exact samples against the sketch.

Usage: .venv/bin/python tests/bench/sketch_memory.py [calls per window] [windows] [seed]

One rank, one collective type, `windows` windows of `calls` AllReduces each, message sizes
from 1 MiB to 1 GiB and bandwidths spread log-normally around 100 GB/s. Before the sketch the
run concatenated every window's samples (8 bytes each for algbw and for busbw); now it keeps
one sketch per figure. Prints both, their ratio, and the whole-run quantiles' relative error
against the exact ones. A script that prints figures, not a timed assertion.
"""

from __future__ import annotations

import math
import random
import sys

import msgspec
from commscope.model.schema import CommOp, OpTally, RankResult, RunTally, Sketch
from commscope.pipeline.accumulate import count_op, merge_results
from commscope.pipeline.sketch import footprint_bytes, quantile
from commscope.pipeline.stats import quantile as exact_quantile
from commscope.pipeline.stats import sample_values


def window(rng: random.Random, calls: int) -> RankResult:
    tally = OpTally()
    for _ in range(calls):
        size = 2 ** rng.randint(20, 30)
        bandwidth = 100e9 * math.exp(rng.gauss(0.0, 0.8))
        dur_ns = max(1, round(size / bandwidth * 1e9))
        count_op(tally, CommOp("AllReduce", 0, dur_ns, size, 8, True))
    return RankResult(evidence_text="gpu kernels", ops={"AllReduce": tally})


def in_memory(sketch: Sketch) -> int:
    """Python object bytes of the bucket maps and sum parts (the ints and floats included)."""
    maps = (sketch.positive, sketch.negative)
    entries = sum(sys.getsizeof(k) + sys.getsizeof(v) for m in maps for k, v in m.items())
    return sum(map(sys.getsizeof, maps)) + entries + sys.getsizeof(sketch.sum_parts)


def main(calls: int, windows: int, seed: int) -> None:
    rng = random.Random(seed)
    parts = [window(rng, calls) for _ in range(windows)]
    samples = [x for p in parts for x in sample_values(p.ops["AllReduce"].algbw_Bps)]
    exact_bytes = sum(len(p.ops["AllReduce"].algbw_Bps) * 2 for p in parts)  # algbw + busbw
    tally = merge_results(parts).ops["AllReduce"]
    assert isinstance(tally, RunTally)
    sketches = (tally.algbw_sketch, tally.busbw_sketch)
    counted = sum(map(footprint_bytes, sketches))
    encoded = sum(len(msgspec.msgpack.encode(s)) for s in sketches)
    objects = sum(map(in_memory, sketches))
    ordered = sorted(samples)
    print(f"calls kept for the run: {len(samples):,} ({windows} windows x {calls:,})")
    print(f"exact samples (algbw + busbw, packed float64): {exact_bytes:,} B")
    buckets = sum(len(s.positive) for s in sketches)
    print(f"sketches: {buckets} buckets, {counted:,} B at 16 B a bucket, {encoded:,} B msgpack,")
    print(f"  {objects:,} B as Python dicts")
    print(f"ratio exact / sketch (16 B a bucket): {exact_bytes / counted:,.0f}x")
    for q in (0.5, 0.95, 0.99):
        truth = exact_quantile(ordered, q)
        error = abs(quantile(tally.algbw_sketch, q) - truth) / truth
        print(f"algbw q={q}: relative error {error:.4%} (bound 1%)")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [2_000, 100, 0][len(args) :]))
