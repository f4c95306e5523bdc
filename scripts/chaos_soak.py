"""Chaos soak of the live service: N seeded rounds of random SIGKILLs (tests/service/chaos.py),
each round's final report compared with `commscope report` on the same files; or, with
--outage S, one long aggregator outage, with the collectors' memory meanwhile and the time the
service takes to catch up.

    .venv/bin/python scripts/chaos_soak.py                  # 20 rounds, seeds 1..20
    .venv/bin/python scripts/chaos_soak.py --rounds 50 --first-seed 100
    .venv/bin/python scripts/chaos_soak.py --outage 60

Prints per round the seed, the kills (which daemon, at which moment, landed or missed) and
the outcome, then the totals and the peak RSS of each daemon (VmHWM sampled from /proc). A
failed round's folder (logs, state, files) is kept; exit status 1 if any round failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from service.chaos import Outcome, remove, run_outage, run_round  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument(
        "--kills", type=int, choices=range(11), help="kills per round (default: 1-3 at random)"
    )
    parser.add_argument("--outage", type=float, metavar="S", help="one aggregator outage of S")
    parser.add_argument("--keep", action="store_true", help="keep every round's folder")
    parser.add_argument("--folder", type=Path, help="where rounds run (default: a temp folder)")
    args = parser.parse_args()
    base = args.folder or Path(tempfile.mkdtemp(prefix="commscope-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    if args.outage is not None:
        return outage(base, args.outage, args.first_seed, args.keep)
    return soak(base, range(args.first_seed, args.first_seed + args.rounds), args.kills, args.keep)


def soak(base: Path, seeds: range, kills: int | None, keep: bool) -> int:
    outcomes = []
    for seed in seeds:
        folder = base / f"seed-{seed}"
        outcome = run_round(seed, folder, kills)
        print(outcome.describe(), flush=True)
        if outcome.exact and not keep:
            remove(folder)
        outcomes.append(outcome)
    exact = sum(o.exact for o in outcomes)
    landed = sum(o.kills_landed for o in outcomes)
    planned = sum(o.kills_planned for o in outcomes)
    rounds = f"{exact}/{len(outcomes)} rounds exact"
    print(f"\n{rounds}; {landed} SIGKILLs landed ({planned} planned, plus outages)")
    failed = [o.seed for o in outcomes if not o.exact]
    if failed:
        print(f"failed seeds: {failed} (folders kept under {base})")
    print(f"peak RSS: {peaks(outcomes)}")
    return 1 if failed else 0


def peaks(outcomes: list[Outcome]) -> str:
    top: dict[str, float] = {}
    for outcome in outcomes:
        for name, mb in outcome.peak_rss_mb.items():
            top[name] = max(top.get(name, 0.0), mb)
    return ", ".join(f"{name} {mb:.0f} MB" for name, mb in sorted(top.items())) or "unknown"


def outage(base: Path, seconds: float, seed: int, keep: bool) -> int:
    folder = base / f"outage-{seconds:.0f}s"
    result = run_outage(folder, seconds, seed)
    print(result.outcome.describe())
    rss = ", ".join(f"{n} {mb:.0f} MB" for n, mb in sorted(result.collector_rss_mb.items()))
    catch_up = f"{result.catch_up_s:.1f}s" if result.catch_up_s is not None else "never"
    print(f"\n{seconds:.0f}s aggregator outage: collector RSS during it {rss or 'unknown'}")
    print(f"caught up (every window complete) {catch_up} after the restarted aggregator served")
    print(f"peak RSS: {peaks([result.outcome])}")
    if result.outcome.exact and not keep:
        remove(folder)
    return 0 if result.outcome.exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
