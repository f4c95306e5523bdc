"""The repository stands alone: a LICENSE matching pyproject's `license`, and READMEs (and the
pages of docs/) whose links and paths stay inside the repository (a user needs nothing from
elsewhere); the README stays short and links every page of docs/; every option the pages and
deploy/ show is one the command has."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

import pytest
from commscope.service import cli
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


def _visible_flags() -> dict[str, set[str]]:
    """Each command's options as --help shows them (hidden old names left out)."""
    (sub,) = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: set(cli._visible(parser)) for name, parser in sub.choices.items()}


TEXTS = [
    *sorted((REPO / "docs").glob("*.md")),
    *sorted(p for p in (REPO / "deploy").rglob("*") if p.is_file()),
    REPO / "README.md",
]
COMMAND = re.compile(r"\bcommscope +(report|collect|aggregate|diff|merge|keys)\b")
# An option, not a TorchTitan `--profiling.x=` or a longer word's tail.
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w.])")


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_commscope_command_shown_uses_options_it_has(path: Path) -> None:
    """`commscope <command> ... --flag` in docs/, deploy/ and the README (a shell line,
    continued by `\\`, up to a backtick, pipe, `;`, `&&`, `#` or `)`): each flag is one
    --help shows for that command."""
    visible = _visible_flags()
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8", errors="replace"))
    for match in COMMAND.finditer(text):
        rest = re.split(r"[`|;#)\n]|&&", text[match.end() :], maxsplit=1)[0]
        unknown = set(FLAG.findall(rest)) - visible[match[1]]
        assert not unknown, f"commscope {match[1]}{rest}: {sorted(unknown)}"


@pytest.mark.parametrize(
    "path",
    [REPO / "deploy" / "README.md", REPO / "docs" / "service.md", REPO / "docs" / "usage.md"],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_option_the_operator_pages_name_exists(path: Path) -> None:
    """An option named in passing (`--max-unacked` records...) is one of some command; a
    code span that starts with another program (`sbatch --wait`, `munged --socket=S`) names
    that program's options."""
    every = set().union(*_visible_flags().values(), cli._visible(cli._parser()))
    text = path.read_text(encoding="utf-8")
    spans = [code for code in re.findall(r"`([^`\n]+)`", text) if _ours(code)]
    named = {flag for code in spans for flag in FLAG.findall(code)}
    assert named - every == set()


def _ours(code: str) -> bool:
    """Whether a code span speaks of commscope's options: it starts with an option, or with
    `commscope` or one of its commands."""
    first = code.split(maxsplit=1)[0]
    return first.startswith("--") or first in {"commscope", *_visible_flags()}


# A repository path in a code span: a top-level folder of the repository, then a file or folder.
REPO_PATH = re.compile(
    r"`((?:collector|pipeline|exporters|service|deploy|tests|commscope)/[\w./-]*)`"
)


def test_every_path_the_architecture_page_names_exists() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = REPO_PATH.findall(text)
    assert len(named) > 30  # the page is a map of the house: it names its files
    assert [path for path in named if not (REPO / path).exists()] == []
