"""The repository stands alone: a LICENSE matching pyproject's `license`, and READMEs (and the
pages of docs/) whose links and paths stay inside the repository (a user needs nothing from
elsewhere); the README stays short and links every page of docs/."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from deploycheck import REPO

READMES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "deploy").rglob("README.md")),
]
# URLs a README may show: hosts of the user's own deployment, and placeholders.
OWN_HOSTS = re.compile(
    r"https?://(victoriametrics|alertmanager|localhost|127\.0\.0\.1|[\w.-]*example\.com)\b"
)


def test_the_license_file_is_the_one_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_readme_links_stay_in_the_repository(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):  # Markdown links: files beside it
        path = target.split("#")[0]
        assert not re.match(r"\w+://", target), target
        assert not path or (readme.parent / path).exists(), target
    for url in re.findall(r"https?://[^\s)`'\"]+", text):
        assert OWN_HOSTS.match(url), url
    # the metric contract a user reads is in the repository, not in the workspace beside it
    # (the real traces there are example inputs, not something a user needs)
    assert "../shared/DESIGN" not in text


def test_the_readme_stays_short_and_links_every_page_of_docs() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200  # the details live in docs/, one page a subject
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name}" in text, page.name
