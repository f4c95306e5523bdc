"""The report files: text, JSON and HTML side by side, and never one report over another's,
even when two are written in the same second."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from commscope.collector.schema import Report, RunConfig
from commscope.exporters import text
from commscope.exporters.files import write_beside, write_reports

NOW = datetime(2026, 11, 24, 12, 0, 5, tzinfo=UTC)
STEM = "20261124_120005_run_cpu2"


def two_ranks(model: str = "") -> Report:
    return Report(world_size=2, ranks=[0, 1], config=RunConfig(backend="gloo", model=model))


def test_three_reports_in_one_second_take_three_names(tmp_path: Path) -> None:
    written = [write_reports(two_ranks(), tmp_path, "run", NOW) for _ in range(3)]
    stems = [[p.name for p in paths] for paths in written]
    assert stems == [
        [f"{stem}.txt", f"{stem}.json", f"{stem}.html"] for stem in (STEM, f"{STEM}-2", f"{STEM}-3")
    ]
    assert len(list(tmp_path.iterdir())) == 9


def test_a_name_any_of_whose_files_exists_is_passed_over(tmp_path: Path) -> None:
    """A stray .html of the first name (another tool's, or a report half deleted): the report
    takes the next name and leaves the stray file alone; no empty .json is left behind."""
    (tmp_path / f"{STEM}.html").write_text("mine")
    paths = write_reports(two_ranks(), tmp_path, "run", NOW)
    assert [p.name for p in paths] == [f"{STEM}-2.txt", f"{STEM}-2.json", f"{STEM}-2.html"]
    assert (tmp_path / f"{STEM}.html").read_text() == "mine"
    assert not (tmp_path / f"{STEM}.json").exists()


def test_write_beside_puts_the_text_and_html_next_to_the_json(tmp_path: Path) -> None:
    report = two_ranks("llama3.1")
    paths = write_beside(report, tmp_path / "merged.v2.json")
    assert [p.name for p in paths] == ["merged.v2.txt", "merged.v2.json", "merged.v2.html"]
    assert json.loads(paths[1].read_text())["ranks"] == [0, 1]
    assert paths[0].read_text() == text.render(report)
    assert "<html" in paths[2].read_text().lower()
