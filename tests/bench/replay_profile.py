"""Where a window's CPU goes late in a run: `service_replay.py`'s replay of N windows in this
process, with cProfile on from window FROM on (the windows before are replayed unprofiled).
Prints each window's CPU (every 10th, and each profiled one: those read high, profiled), then
the profile by cumulative time, and writes it to OUT for `pstats` (e.g. to compare two such
profiles function by function: what grew between window 10 and window 60).

    .venv/bin/python tests/simjob.py 256 /tmp/sj256
    .venv/bin/python tests/bench/service_replay.py /tmp/sj256 --runs 1     # parses, caches
    .venv/bin/python tests/bench/replay_profile.py /tmp/sj256.replay 60 55 /tmp/w60.prof
    .venv/bin/python tests/bench/replay_profile.py /tmp/sj256.replay 10 5 /tmp/w10.prof
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pickle
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import service_replay


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cache", type=Path, help="service_replay.py's cache of the job's records")
    p.add_argument("windows", type=int, help="windows replayed")
    p.add_argument("start", type=int, help="the first window profiled (from 0)")
    p.add_argument("out", type=Path, help="where the profile goes")
    p.add_argument("--tmp", default=tempfile.gettempdir(), help="where the state folder goes")
    args = p.parse_args()
    from commscope.service.aggregate import Aggregator, AggregatorSettings

    sent = service_replay.renamed(pickle.loads(args.cache.read_bytes()), args.windows)
    gc.collect()
    gc.freeze()  # what collectors would send is not the aggregator's heap
    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        settings = AggregatorSettings(listen="tcp://127.0.0.1:*", out=Path(folder) / "out",
                                      state=Path(folder) / "state")  # fmt: skip
        aggregator = Aggregator(settings)
        service_replay._daemon_gc(aggregator)
        for k, window in enumerate(service_replay.greet(aggregator, sent)):
            if k == args.start:
                profile.enable()
            began = time.process_time()
            service_replay._window(aggregator, sent[window])
            if k % 10 == 0 or k >= args.start:
                print(f"{window} {time.process_time() - began:.3f} s", flush=True)
        profile.disable()
        aggregator.store.close()
    profile.dump_stats(args.out)
    pstats.Stats(str(args.out)).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
