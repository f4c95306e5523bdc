"""Where the live aggregation's CPU goes, window by window, on a job already on disk.

Each file is parsed and reduced to its facts first (in 2 processes, outside the measurement),
then, per window, the records are applied to one `Aggregation` and the report built, as the
aggregator does when a window completes; cProfile shows the functions that took the time.

    .venv/bin/python tests/simjob.py 256 /tmp/sj256        # a simulated 256-rank job
    .venv/bin/python tests/bench/live_profile.py /tmp/sj256
"""

from __future__ import annotations

import cProfile
import hashlib
import pstats
import sys
import time
from multiprocessing import Pool
from pathlib import Path

from commscope.collector.discover import open_trace
from commscope.collector.kineto import TraceReader
from commscope.model.schema import Record, StreamEnd, StreamStart
from commscope.pipeline.aggregation import Aggregation
from commscope.pipeline.edge import Reduction
from commscope.pipeline.report import Options


def records(path: Path) -> list[Record]:
    """What a collector sends of the file: its start, its facts, its end."""
    stream = hashlib.blake2b(str(path).encode(), digest_size=16).hexdigest()
    acc = Reduction()
    with open_trace(path) as raw:
        reader = TraceReader(raw, str(path))
        for batch in reader.batches():
            acc.add_all(batch)
    folder = path.parent.name
    start = StreamStart(stream=stream, node="n", path=str(path), folder=folder, root_name="job")
    parts = list(acc.facts(stream, 1))
    end = StreamEnd(stream=stream, seq=1 + len(parts), meta=reader.meta, stats=reader.stats)
    return [start, *parts, end]


def main(root: Path, shown: int = 18) -> None:
    windows = sorted(p for p in root.iterdir() if p.is_dir())
    with Pool(2) as pool:
        sent = {w: pool.map(records, sorted(w.iterdir())) for w in windows}
    aggregation = Aggregation()
    for window in windows:
        profile = cProfile.Profile()
        began = time.process_time()
        profile.enable()
        for file in sent[window]:
            for record in file:
                aggregation.apply(record)
        applied = time.process_time() - began
        aggregation.report(Options())
        profile.disable()
        total = time.process_time() - began
        print(f"{window.name}: {len(sent[window])} files, apply {applied:.3f} s CPU, "
              f"apply + report {total:.3f} s CPU")  # fmt: skip
        pstats.Stats(profile).sort_stats("cumulative").print_stats(shown)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
