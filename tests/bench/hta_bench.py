"""commscope beside Holistic Trace Analysis (HTA) on the same files: time, CPU, memory, and
HTA's overlap figures against commscope's (a script).

HTA (PyPI `holistictraceanalysis`) is never a dependency of commscope: the script installs it
into a venv of its own (`--venv`, /var/tmp/commscope-hta-venv by default; made with this
Python's `venv` and pip the first time, reused after). Each command runs alone in its own
process, one after the other, its whole process tree sampled as tests/bench/tree_memory.py
does (HTA parses the ranks in a pool of processes; commscope with the default `--jobs` in
worker processes too):

  HTA        `TraceAnalysis(trace_dir=DIR).get_comm_comp_overlap(visualize=False)` (HTA's
             defaults otherwise: the last ProfilerStep left out), printing each rank's
             `comp_comm_overlap_pctg`;
  commscope  `commscope report DIR` (the whole report: text, JSON and HTML, every section),
             with `--jobs 1` and with the default `--jobs`.

Per input and command: wall seconds, CPU seconds of the process tree, peak tree RSS and PSS
(see tree_memory.py), and HTA's figure over commscope's (default `--jobs`) for each. Inputs:
the 4 x 107 MB Kineto traces tree_memory.py builds (the real V100 trace scaled; `--keep DIR`
keeps and reuses them), and the 8 DLRM ranks of ../shared/traces (~3.3k events a rank), where
HTA's per-rank overlap is set beside commscope's (`overlap.per_rank[r].ratio`) and beside the
figures ../shared/traces/README.md lists.

    .venv/bin/python tests/bench/hta_bench.py                   # 4 x 107 MB and DLRM
    .venv/bin/python tests/bench/hta_bench.py --keep /var/tmp/tree_memory --skip-large

Timings depend on the machine and its load: nothing here is asserted. 1 MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from machineinfo import cpu_and_python
from tree_memory import MB, REAL_TRACE, Run, build, commscope_report, line, measured

DLRM = Path("../shared/traces/kineto/dlrm_8rank_v100")
VENV = Path("/var/tmp/commscope-hta-venv")
HTA_PACKAGE = "holistictraceanalysis"
# ../shared/traces/README.md: HTA's get_comm_comp_overlap on dlrm_8rank_v100, ranks 0-7 (%)
README_DLRM = (4.50, 2.47, 7.88, 3.31, 0.56, 0.64, 7.56, 9.51)

HTA_CHILD = """
import json, sys
from hta.trace_analysis import TraceAnalysis
overlap = TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False)
print(json.dumps({int(r): float(p) for r, p in
                  zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=True)}))
"""


def hta_python(venv: Path, package: str) -> Path:
    """The venv's Python with HTA importable: the venv made and HTA installed if not yet."""
    python = venv / "bin" / "python"
    if python.exists() and _imports_hta(python):
        return python
    print(f"installing {package} into {venv} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", package], check=True)
    if not _imports_hta(python):
        raise SystemExit(f"{venv}: `import hta` fails after installing {package}")
    return python


def _imports_hta(python: Path) -> bool:
    probe = [str(python), "-c", "import hta.trace_analysis"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def hta_version(python: Path) -> str:
    show = [str(python), "-m", "pip", "show", HTA_PACKAGE]
    out = subprocess.run(show, capture_output=True, text=True, check=False).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                 if ln.startswith("Version:")), "?")  # fmt: skip


def run_hta(python: Path, root: Path, tmp: Path, every_s: float) -> tuple[Run, dict[int, float]]:
    """HTA's run on `root` and its per-rank overlap (%)."""
    log = tmp / f"{root.name}-hta.out"
    run = measured("HTA get_comm_comp_overlap", [str(python), "-c", HTA_CHILD, str(root)],
                   every_s, log)  # fmt: skip
    last = log.read_text().strip().splitlines()[-1]
    return run, {int(rank): pctg for rank, pctg in json.loads(last).items()}


def run_commscope(
    root: Path, tmp: Path, every_s: float, jobs: int | None
) -> tuple[Run, dict[int, float]]:
    """commscope's report on `root` and its per-rank overlap (%, from the JSON report)."""
    out = tmp / f"{root.name}-commscope-{jobs or 'default'}"
    label = f"commscope report --jobs {jobs}" if jobs else "commscope report (default --jobs)"
    run = measured(label, commscope_report(root, out, jobs), every_s, tmp / "commscope.out")
    (report,) = out.glob("*.json")
    per_rank = json.loads(report.read_bytes())["overlap"]["per_rank"]
    return run, {int(rank): 100 * row["ratio"] for rank, row in per_rank.items()}


def compare(name: str, python: Path, root: Path, tmp: Path, every_s: float) -> dict[int, float]:
    """Every command on `root`, their lines and ratios printed; commscope's overlap (%)."""
    files = sorted(p for p in root.iterdir() if p.name.endswith((".json", ".json.gz")))
    size = sum(p.stat().st_size for p in files) / MB
    print(f"\n{name}: {len(files)} files, {size:.1f} MB on disk, in {root}", flush=True)
    hta, hta_overlap = run_hta(python, root, tmp, every_s)
    print(line(hta), flush=True)
    one, _ = run_commscope(root, tmp, every_s, 1)
    print(line(one), flush=True)
    many, overlap = run_commscope(root, tmp, every_s, None)
    print(line(many), flush=True)
    for run in (one, many):
        print(f"  HTA / {run.label}: wall x{hta.wall_s / run.wall_s:.1f}, CPU "
              f"x{hta.cpu_s / run.cpu_s:.1f}, peak tree RSS x{hta.peaks.rss / run.peaks.rss:.1f}"
              f", peak tree PSS x{hta.peaks.pss / run.peaks.pss:.1f}")  # fmt: skip
    overlap_table(hta_overlap, overlap, README_DLRM if root.resolve() == DLRM.resolve() else ())
    return overlap


def overlap_table(hta: dict[int, float], ours: dict[int, float], listed: tuple[float, ...]) -> None:
    print("  rank  HTA overlap %  commscope %  difference  README's HTA %")
    for rank in sorted(hta.keys() | ours.keys()):
        theirs, mine = hta.get(rank), ours.get(rank)
        diff = f"{mine - theirs:+.2f}" if theirs is not None and mine is not None else "n/a"
        readme = f"{listed[rank]:.2f}" if rank < len(listed) else ""
        print(f"  {rank:>4}  {_pct(theirs):>13}  {_pct(mine):>11}  {diff:>10}  {readme:>14}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=VENV, help="HTA's own venv")
    parser.add_argument("--package", default=HTA_PACKAGE, help="what pip installs there")
    parser.add_argument("--keep", type=Path, help="build the 4 x 107 MB inputs here (reused)")
    parser.add_argument("--skip-large", action="store_true", help="the DLRM ranks only")
    parser.add_argument("--every-ms", type=float, default=25.0, help="sampling interval")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = hta_python(args.venv, args.package)
    print(cpu_and_python())
    print(f"HTA: {HTA_PACKAGE} {hta_version(python)} in {args.venv}")
    every = args.every_ms / 1000
    with tempfile.TemporaryDirectory(prefix="hta_bench") as folder:
        tmp = Path(folder)
        if not args.skip_large:
            root = args.keep or tmp / "large"
            if len(list(root.glob("rank*_trace.json"))) != 4:
                build(root)
            compare(f"4 x 107 MB ({REAL_TRACE.name} scaled)", python, root, tmp, every)
        compare("DLRM, 8 ranks", python, DLRM, tmp, every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
