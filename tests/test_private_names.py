"""scripts/private_names.py: a public module-level name that no other file uses gets a leading
underscore at its exact places, and the repository has none left."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script() -> ModuleType:
    """scripts/private_names.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "private_names", ROOT / "scripts" / "private_names.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


names = load_script()


def tree(root: Path, files: dict[str, str]) -> Path:
    """A small repository: each relative path written with its text."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def found(root: Path) -> list[str]:
    return [f"{c.path.relative_to(root)}:{c.line}: {c.name}" for c in names.candidates(root)]


def test_the_repository_has_no_public_name_used_only_in_its_module() -> None:
    """New public-but-unused names fail here: rename them with `python scripts/private_names.py`."""
    assert found(ROOT) == []
    assert [str(c) for c in names.restorable(ROOT)] == []  # no file asks for a renamed name


def test_an_unused_function_and_constant_are_renamed_everywhere_in_their_module(
    tmp_path: Path,
) -> None:
    """Definition, calls, a default argument, a decorator, an f-string field, a nested
    function's read and quotes as code in comments and docstrings are renamed; plain words
    of prose, the keyword argument and the attribute of the same spelling are not."""
    source = (
        '"""A module: helper and LIMIT."""\n'
        "LIMIT = 3  # LIMIT stays in comments\n"
        "def helper(x: int = LIMIT) -> int:\n"
        '    """helper doubles."""\n'
        "    return x * 2\n"
        "def deco(f):\n"
        '    """Marks `helper` and `helpers`; `x.helper` is not it."""\n'
        "    return f\n"
        "@deco  # `LIMIT`, `helper(2)`: quoted as code\n"
        "def api(obj) -> str:\n"
        "    def inner() -> int:\n"
        "        return LIMIT\n"
        '    return f"{helper(LIMIT)} {obj.helper} {inner()}" + str(dict(helper=1))\n'
    )
    expected = (
        '"""A module: helper and LIMIT."""\n'
        "_LIMIT = 3  # LIMIT stays in comments\n"
        "def _helper(x: int = _LIMIT) -> int:\n"
        '    """helper doubles."""\n'
        "    return x * 2\n"
        "def _deco(f):\n"
        '    """Marks `_helper` and `helpers`; `x.helper` is not it."""\n'
        "    return f\n"
        "@_deco  # `_LIMIT`, `_helper(2)`: quoted as code\n"
        "def api(obj) -> str:\n"
        "    def inner() -> int:\n"
        "        return _LIMIT\n"
        '    return f"{_helper(_LIMIT)} {obj.helper} {inner()}" + str(dict(helper=1))\n'
    )
    root = tree(tmp_path, {"pipeline/mod.py": source, "tests/test_mod.py": "from x import api\n"})
    assert found(root) == [
        "pipeline/mod.py:2: LIMIT",
        "pipeline/mod.py:3: helper",
        "pipeline/mod.py:6: deco",
    ]
    assert names.main([str(root)]) == 0
    assert (root / "pipeline/mod.py").read_text(encoding="utf-8") == expected
    assert names.main([str(root), "--check"]) == 0  # idempotent: nothing left
    assert found(root) == []


@pytest.mark.parametrize(
    "user",
    [
        "from commscope.pipeline.mod import target\n",  # imported (by a test, a module)
        "import commscope.pipeline.mod as m\nm.target()\n",  # read as an attribute
        'monkeypatch.setattr(mod, "target", None)\n',  # named by a string
        'patch("commscope.pipeline.mod.target")\n',  # a dotted path
        'x: "list[target]"\n',  # a quoted annotation
        "from commscope.pipeline.mod import *\n",  # a star import takes every name
        "def broken(:\n",  # a file that does not parse may use anything
    ],
)
def test_a_name_another_python_file_may_use_stays_public(tmp_path: Path, user: str) -> None:
    root = tree(tmp_path, {"pipeline/mod.py": "def target():\n    pass\n", "tests/t.py": user})
    assert found(root) == []


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("docs/usage.md", "Call `mod.target()` first.\n"),
        ("README.md", "```python\nfrom commscope.pipeline.mod import target\n```\n"),
        ("pyproject.toml", '[project.scripts]\nx = "commscope.pipeline.mod:target"\n'),
        ("deploy/systemd/x.service", "ExecStart=python -c 'target()'\n"),
    ],
)
def test_a_name_docs_config_or_deploy_files_show_stays_public(
    tmp_path: Path, path: str, text: str
) -> None:
    root = tree(tmp_path, {"pipeline/mod.py": "def target():\n    pass\n", path: text})
    assert found(root) == []


def test_markdown_prose_does_not_keep_a_name_public(tmp_path: Path) -> None:
    root = tree(
        tmp_path, {"pipeline/mod.py": "def target():\n    pass\n", "docs/a.md": "the target\n"}
    )
    assert found(root) == ["pipeline/mod.py:1: target"]


@pytest.mark.parametrize(
    "source",
    [
        '__all__ = ["target"]\ntarget = 1\n',  # exported
        "target = 1\ndef f(target):\n    return target\n",  # a parameter of the same spelling
        "target = 1\nclass S:\n    target: int\n",  # a field of the same spelling
        "target = 1\ndef f():\n    global target\n    target = 2\n",  # rebound through global
        "target = 1\n_target = 2\n",  # the private spelling is taken
        'target = 1\nKEY = getattr(object(), "target", None)\nprint(KEY)\n',  # a string names it
        "class target(ValueError):\n    pass\n",  # an exception: its name is printed
        "import enum\nclass target(enum.Enum):\n    A = 1\n",  # an enum: its name is printed
        "import msgspec\nclass target(msgspec.Struct, tag=True):\n    a: int\n",  # tag = name
    ],
)
def test_a_name_its_own_module_cannot_rename_exactly_stays_public(
    tmp_path: Path, source: str
) -> None:
    root = tree(tmp_path, {"collector/mod.py": source, "tests/t.py": "from m import KEY, f, S\n"})
    assert [line for line in found(root) if line.endswith(" target")] == []


def test_check_lists_what_is_left_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree(tmp_path, {"service/mod.py": "A, B = 1, 2\nC: int = A + B\n"})
    assert names.main([str(root), "--check"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "service/mod.py:1: A",
        "service/mod.py:1: B",
        "service/mod.py:2: C",
    ]


@pytest.mark.parametrize(
    "user",
    [
        "from commscope.pipeline.mod import target\n",
        "from commscope.pipeline import mod\nmod.target()\n",
        "import commscope.pipeline.mod as m\nm.target()\n",
        "import commscope.pipeline.mod\ncommscope.pipeline.mod.target()\n",
        'patch("commscope.pipeline.mod.target")\n',
    ],
)
def test_a_private_name_another_file_asks_for_by_its_public_spelling_is_public_again(
    tmp_path: Path, user: str
) -> None:
    """One branch renamed `target` to `_target` while another started using `target`: after
    the merge, the run makes it public again (and nothing else)."""
    source = "def _target():  # `_target` and _target\n    return _OTHER\n_OTHER = 1\n"
    root = tree(tmp_path, {"pipeline/mod.py": source, "tests/t.py": user})
    assert [str(c) for c in names.restorable(root)] == [
        f"{root}/pipeline/mod.py:1: _target -> target (another file uses target)"
    ]
    assert names.main([str(root)]) == 0
    assert (root / "pipeline/mod.py").read_text(encoding="utf-8") == (
        "def target():  # `target` and _target\n    return _OTHER\n_OTHER = 1\n"
    )
    assert names.main([str(root), "--check"]) == 0


def test_a_private_name_is_not_made_public_when_the_public_spelling_exists(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "pipeline/mod.py": "def _target():\n    pass\ndef target():\n    pass\n",
            "pipeline/other.py": "def _target():\n    pass\n",  # asked of mod, not of other
            "tests/t.py": "from commscope.pipeline.mod import target\n",
        },
    )
    assert names.restorable(root) == []


@pytest.mark.parametrize(
    "user",
    [
        "from commscope.service import mod\nCODES = {k for k in vars(mod) if k.startswith('T')}\n",
        "import commscope.service.mod as mod\nprint(dir(mod), mod.__dict__)\n",
        "import inspect\nfrom commscope.service import mod\nprint(inspect.getmembers(mod))\n",
        "from commscope.service import mod\nprint([getattr(mod, n) for n in NAMES])\n",
    ],
)
def test_a_module_whose_names_another_file_lists_keeps_them_all(tmp_path: Path, user: str) -> None:
    root = tree(tmp_path, {"service/mod.py": "TARGET = 1\nOTHER = 2\n", "tests/t.py": user})
    assert found(root) == []


@pytest.mark.parametrize("lister", ["globals()", "vars()", "sys.modules[__name__]"])
def test_a_module_that_lists_its_own_names_keeps_them_all(tmp_path: Path, lister: str) -> None:
    source = f"import sys\nTARGET = 1\nNAMES = {lister}\n"
    root = tree(tmp_path, {"service/mod.py": source, "tests/t.py": "from m import NAMES\n"})
    assert found(root) == []
