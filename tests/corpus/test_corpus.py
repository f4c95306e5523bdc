"""The mutant corpus (issue 9): a seeded few hundred damaged, odd or hostile traces, and every
real trace in ../shared/traces, read in one real process — never a traceback, the good files
beside a mutant keep their numbers, and the process's peak RSS stays bounded whatever a file
holds (a 100,000-deep nesting, an 800 MB gzip bomb, a 20 MB string)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent / "harness.py"
SEED, COUNT = 20261124, 300
PEAK_RSS_MB = 250  # measured 62 MB; a file costing gigabytes (as deep nesting did) fails it


@pytest.mark.slow
def test_the_mutant_corpus_gives_no_traceback_and_bounded_memory() -> None:
    found = subprocess.run(
        [sys.executable, str(HARNESS), "--seed", str(SEED), "--count", str(COUNT), "--real"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    summary = json.loads(found.stdout)
    failures = "\n".join(f"{f['mutant']}\n{f['traceback']}" for f in summary["failures"])
    assert not summary["failures"], failures
    assert found.returncode == 0, found.stderr
    assert summary["mutants"] >= COUNT
    assert summary["peak_rss_mb"] < PEAK_RSS_MB, summary["largest_growth_mb"]
    assert summary["outcomes"]["analysed"] > COUNT // 4  # the corpus is not all garbage
