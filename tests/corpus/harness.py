"""The mutant corpus through the reader and the report, in one process; prints a JSON summary.

    python tests/corpus/harness.py --seed 20261124 --count 300 [--real]

For each mutant (`mutants.corpus`): `parse_file` must return or raise TraceError (a reason,
never a traceback); a parsed mutant is reported alone and beside seven good DLRM ranks, and
rendered as text and JSON, with no exception; the good ranks' per-rank figures must equal
those of the good ranks reported without it (or, when the mutant claims one of their ranks,
that rank is skipped with the reason). `--real` also reads every trace in ../shared/traces.
The process's peak RSS after each file bounds what any one file may cost. The test
(`test_corpus.py`) runs a seeded few hundred; run more for a soak:

    .venv/bin/python tests/corpus/harness.py --seed 7 --count 5000 --real
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import msgspec
from commscope.exporters import jsonreport, text
from commscope.model.errors import TraceError
from commscope.model.schema import Report
from commscope.pipeline import jobs
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.service.offline import parse_file
from machineinfo import peak_rss_mb
from mutants import DLRM, SHARED, Mutant, corpus

WINDOW = "w"
PER_RANK = ("overlap", "collectives", "network", "kernels")


def good_files() -> list[ParsedFile]:
    """DLRM ranks 1-7: the good files every mutant is reported beside."""
    paths = sorted(DLRM.glob("worker[1-7]_*.json"))
    return [parse_file(WINDOW, path) for path in paths]


def report(files: Sequence[ParsedFile]) -> Report:
    chosen = jobs.largest(files)
    found = build_report([WINDOW], chosen.files, Options(skipped=chosen.skipped))
    text.render(found)
    jsonreport.render(found)
    return found


# what rests on the other ranks' calls (the exposed split into transfer, waiting, unmatched)
ACROSS: Final = ("exposed_transfer_s", "exposed_waiting_s", "exposed_unmatched_s")


def figures(found: Report, rank: str) -> dict[str, Any]:
    """One rank's own figures: what a damaged file beside it must not change (its exposed
    split aside: a damaged file's calls may match the rank's, or not)."""
    doc = msgspec.to_builtins(found)
    per_rank = {part: _own(doc[part]["per_rank"].get(rank)) for part in PER_RANK}
    return {**per_rank, "steps": _own(doc["steps"].get(rank))}


def _own(row: Any) -> Any:
    return {k: v for k, v in row.items() if k not in ACROSS} if isinstance(row, dict) else row


def check(mutant: Mutant, folder: Path, good: list[ParsedFile], base: Report) -> str:
    """What became of the mutant: skipped (with its reason's first words) or analysed."""
    path = folder / ("rank0_trace.json" + (".gz" if mutant.gz else ""))
    path.write_bytes(mutant.data)
    try:
        item = parse_file(WINDOW, path)
    except TraceError as exc:
        return "skipped: " + " ".join(exc.reason.split()[:3])
    report([item])
    beside = report([*good, item])
    paths = {str(g.meta.rank): g.path for g in good}
    for rank in map(str, base.ranks):
        if rank not in beside.overlap.per_rank:
            if not any(s.path == paths[rank] for s in beside.inputs.skipped):
                raise AssertionError(f"good rank {rank} vanished without a reason")
        elif figures(beside, rank) != figures(base, rank):
            raise AssertionError(f"good rank {rank}'s figures changed")
    return "analysed"


def real_traces() -> list[Path]:
    return sorted(p for p in SHARED.parent.rglob("*") if p.is_file() and "LICENSE" not in p.name)


def run(seed: int, count: int, real: bool) -> dict[str, Any]:
    good = good_files()
    base = report(good)
    outcomes: Counter[str] = Counter()
    failures, growth = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for mutant in corpus(seed, count):
            before = peak_rss_mb()
            try:
                outcomes[check(mutant, Path(tmp), good, base)] += 1
            except Exception:
                failures.append({"mutant": mutant.name, "traceback": traceback.format_exc()})
            growth.append((peak_rss_mb() - before, mutant.name))
    for path in real_traces() if real else ():
        before = peak_rss_mb()
        try:
            parse_file(WINDOW, path)
            outcomes["real: analysed"] += 1
        except TraceError as exc:
            outcomes["real: skipped: " + " ".join(exc.reason.split()[:3])] += 1
        except Exception:
            failures.append({"mutant": str(path), "traceback": traceback.format_exc()})
        growth.append((peak_rss_mb() - before, path.name))
    return {
        "mutants": sum(outcomes.values()),
        "outcomes": dict(sorted(outcomes.items())),
        "failures": failures,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "largest_growth_mb": [(round(g, 1), name) for g, name in sorted(growth)[-5:]],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--real", action="store_true", help="also every trace in ../shared")
    args = parser.parse_args(argv)
    summary = run(args.seed, args.count, args.real)
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
