"""Whether this tree's aggregator shows what another tree's shows, on a job already on disk:
its /metrics after half and after all of every window's files, and its final JSON report.

The records are those `service_replay.py` caches (each file parsed and reduced as its
collector would send it; `--windows N` as there). Each tree replays them in a process of its
own through `Aggregator.receive`, `commit` and `_tick` as the daemon's loop calls them, with
a clock that never moves (the rolling busbw figures slot values by time: with a moving
clock two runs of one tree can differ in the last bits of a mean), and writes what it
showed to a file; the two files must be byte-identical. Volatile lines are left out: the
build info and the aggregator's own latency and journal size.

    .venv/bin/python tests/bench/replay_same.py /tmp/sj256 --against /tmp/base [--windows 5]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

VOLATILE = re.compile(
    r"^commscope_aggregator_(window_latency_seconds|log_bytes)|^commscope_build_info|^# "
)


def shown(cache: Path, windows: int, out: Path) -> None:
    """Replay and write every /metrics text and the final report to `out`."""
    import msgspec
    from commscope.service.aggregate import Aggregator, AggregatorSettings
    from prometheus_client import CollectorRegistry, generate_latest

    sys.path.insert(0, str(Path(__file__).parent))
    import service_replay

    sent = pickle.loads(cache.read_bytes())
    sent = service_replay.renamed(sent, windows) if windows else sent
    dumps = []
    with tempfile.TemporaryDirectory() as folder:
        settings = AggregatorSettings(listen="tcp://127.0.0.1:*", out=Path(folder) / "out",
                                      state=Path(folder) / "state")  # fmt: skip
        aggregator = Aggregator(settings, clock=lambda: 1000.0)
        registry = CollectorRegistry()
        registry.register(aggregator.publisher.exporter)

        def metrics() -> None:
            lines = generate_latest(registry).decode().splitlines()
            dumps.append("\n".join(line for line in lines if not VOLATILE.search(line)))

        for window in service_replay.greet(aggregator, sent):
            files = sent[window]
            service_replay._window(aggregator, files[: len(files) // 2])
            aggregator.publish()
            metrics()
            service_replay._window(aggregator, files[len(files) // 2 :])
            metrics()
        report = json.loads(msgspec.json.encode(aggregator._final()))
        metrics()
        aggregator.store.close()
    out.write_text("\n=====\n".join(dumps) + "\n=====\n" + json.dumps(report, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, nargs="?")
    p.add_argument("--cache", type=Path, help="the parsed records (default: ROOT/../NAME.replay)")
    p.add_argument("--against", type=Path, help="a tree holding commscope/ (the base)")
    p.add_argument("--windows", type=int, default=0, help="windows replayed (0: the job's)")
    p.add_argument("--shown", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.shown:
        shown(Path(args.shown[0]), args.windows, Path(args.shown[1]))
        return
    cache = args.cache or args.root.parent / f"{args.root.name}.replay"
    if not cache.exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import service_replay

        service_replay.parse_all(args.root, cache)
    found = {}
    for name, tree in (("this", None), ("base", args.against)):
        env = dict(os.environ, **({"PYTHONPATH": str(tree)} if tree else {}))
        out = Path(tempfile.mkstemp(prefix=f"replay_same_{name}_")[1])
        command = [sys.executable, __file__, "--windows", str(args.windows), "--shown"]
        subprocess.run([*command, str(cache), str(out)], env=env, check=True)
        found[name] = out
    same = found["this"].read_bytes() == found["base"].read_bytes()
    print(f"{'identical' if same else 'DIFFERENT'}: {found['this']} {found['base']}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
