"""Module-private names: find each public module-level name of the package folders that no
other file uses, and give it a leading underscore inside its module (shell: reads and
rewrites files; idempotent).

    python scripts/private_names.py [ROOT]           # rename, print what was renamed
    python scripts/private_names.py [ROOT] --check   # list what is left, exit 1 if any

A name counts as used outside its module, so stays public, when any other file of the tree
(the package folders, tests/, scripts/, deploy/, commscope/) imports a name spelled so from
anywhere, reads an attribute spelled so on anything, or holds a string that names it (an
identifier, a dotted path `a.b:name`, a quoted annotation); when a Markdown file shows it in
code; when a non-Python file of deploy/, scripts/ or .ci/ or pyproject.toml has the word. The
rules are by spelling, not by resolved module: a false "used" leaves a name public, never the
reverse. A name also stays public when renaming it is not certain to be exact: listed in
`__all__`; bound again in a nested scope or named by `global`; named in a string of its own
module; a class whose name can reach the outside (an exception, an enum, a tagged msgspec
Struct); `_name` already taken; an occurrence whose position the parser does not give exactly.
Occurrences are found with `ast` and `symtable` and rewritten at their exact positions, so
comments, docstrings, attributes and keyword arguments keep their spelling.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import re
import symtable
import sys
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

PACKAGES = ("model", "collector", "pipeline", "exporters", "service")
USERS = (*PACKAGES, "tests", "scripts", "deploy", "commscope")
SKIPPED_DIRS = frozenset({".venv", "__pycache__", ".git", "build", "dist", "node_modules"})
OUTSIDE_CLASS_BASES = frozenset(
    {"Exception", "BaseException", "Warning", "Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"}
)
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DOTTED = re.compile(r"[A-Za-z_][\w.]*[.:]([A-Za-z_]\w*)")
DOTTED_PATH = re.compile(r"(commscope(?:\.\w+)+)[.:](\w+)")
MD_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
LONGEST_CODE_STRING = 300


@dataclass(frozen=True)
class Candidate:
    """A module-level name to rewrite: public and used by no other file (`new` is `_name`),
    or private and asked for under its public spelling by another file (`new` is `name`)."""

    path: Path
    line: int
    name: str
    spans: tuple[tuple[int, int], ...]  # (start, end) character offsets in the module's text
    new: str

    def __str__(self) -> str:
        restored = f" -> {self.new} (another file uses {self.new})" if self.name[0] == "_" else ""
        return f"{self.path}:{self.line}: {self.name}{restored}"


# --- the files ---------------------------------------------------------------------------


def python_files(root: Path, folders: Iterable[str]) -> list[Path]:
    """Every .py file under the given top folders of the tree, build and venv folders left out."""
    found = (
        path
        for folder in folders
        if (root / folder).is_dir()
        for path in (root / folder).rglob("*.py")
        if not SKIPPED_DIRS.intersection(path.relative_to(root).parts)
    )
    return sorted(found)


def other_text_files(root: Path) -> Iterator[tuple[Path, bool]]:
    """The non-Python files that may name a module's attribute, each with whether it is
    Markdown (then only its code counts)."""
    for path in sorted(root.rglob("*.md")):
        if not SKIPPED_DIRS.intersection(path.relative_to(root).parts):
            yield path, True
    for folder in ("deploy", "scripts", ".ci"):
        for path in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else ():
            if path.is_file() and path.suffix not in {".py", ".md", ".pyc"}:
                yield path, False
    if (root / "pyproject.toml").is_file():
        yield root / "pyproject.toml", False


# --- what other files use ----------------------------------------------------------------


def string_words(text: str) -> set[str]:
    """The names a string constant may refer to: itself when an identifier, the last part of
    a dotted path, every name of it when it parses as an expression (a quoted annotation)."""
    if len(text) > LONGEST_CODE_STRING:
        return set()
    if text.isidentifier():
        return {text}
    dotted = DOTTED.fullmatch(text)
    if dotted:
        return {dotted.group(1)}
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return set()
    return names_read(tree)


def names_read(tree: ast.AST) -> set[str]:
    """Every name and attribute spelled in an expression tree."""
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
    return words


@functools.cache
def parsed(text: str) -> ast.Module:
    """A module's tree, parsed once per text."""
    return ast.parse(text)


@functools.cache
def nodes_of(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of a tree, walked once."""
    return tuple(ast.walk(tree))


@functools.cache
def docstring_nodes(tree: ast.AST) -> frozenset[int]:
    """The ids of the docstring constants of a module and of its classes and functions."""
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found: set[int] = set()
    for node in nodes_of(tree):
        if isinstance(node, owners) and node.body and isinstance(node.body[0], ast.Expr):
            value = node.body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return frozenset(found)


def strings_of(tree: ast.AST) -> set[str]:
    """The names the strings of a module may refer to (docstrings left out)."""
    docs = docstring_nodes(tree)
    words: set[str] = set()
    for node in nodes_of(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words |= string_words(node.value)
    return words


def uses_in_python(tree: ast.AST, package: str) -> set[str]:
    """The names a Python file (of this dotted package) may take from another module:
    imported names, attributes read on anything, names in strings; `*commscope.x.y` for a
    star import of a module."""
    words = strings_of(tree)
    for node in nodes_of(tree):
        if isinstance(node, ast.ImportFrom):
            words.update(imported(node, package))
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        reflected = chain(reflected_on(node) or ast.Constant(None))
        if reflected:
            words.add(f"*~{reflected.rsplit('.', 1)[-1]}")
    return words


def reflected_on(node: ast.AST) -> ast.expr | None:
    """What a node lists or reads the attributes of by computed names (`vars(m)`, `dir(m)`,
    `m.__dict__`, `inspect.getmembers(m)`, `getattr(m, name)` with a name not written out)."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return node.value
    if not isinstance(node, ast.Call) or not node.args:
        return None
    called = chain(node.func) or ""
    if called in {"vars", "dir"} or called.endswith("getmembers"):
        return node.args[0]
    computed = len(node.args) > 1 and not isinstance(node.args[1], ast.Constant)
    return node.args[0] if called in {"getattr", "hasattr"} and computed else None


def imported(node: ast.ImportFrom, package: str) -> set[str]:
    """The names a `from … import …` takes, a star import as `*` and the absolute module."""
    if not any(alias.name == "*" for alias in node.names):
        return {alias.name for alias in node.names}
    return {f"*{absolute(node, package)}"}


def dotted(root: Path, path: Path) -> tuple[str, str]:
    """The dotted module name of a file of the tree (packages live under `commscope.`) and
    the dotted package a relative import in it starts from."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    prefix = ["commscope"] if parts[0] in PACKAGES else []
    package = [*prefix, *parts[:-1]]
    module = package if parts[-1] == "__init__" else [*package, parts[-1]]
    return ".".join(module), ".".join(package)


def uses_in_text(path: Path, markdown: bool) -> set[str]:
    """The words of a text file (of its code only, for Markdown)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return set()
    if markdown:
        text = "\n".join(MD_CODE.findall(text))
    return set(WORD.findall(text))


# --- a module's own names ----------------------------------------------------------------


def top_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module-level statements, the branches of top-level if/try/with included."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.With):
            yield from top_statements(stmt.body)
            yield from top_statements(getattr(stmt, "orelse", []))
        elif isinstance(stmt, ast.Try):
            blocks = [stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)]
            for block in blocks:
                yield from top_statements(block)


def target_names(target: ast.expr) -> Iterator[ast.Name]:
    """The plain names an assignment target binds (tuple unpacking included)."""
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from target_names(element)


def definitions(tree: ast.Module, private: bool = False) -> dict[str, int]:
    """The public (or the private) module-level names a module defines, each with its first
    line."""
    found: dict[str, int] = {}
    for stmt in top_statements(tree.body):
        names: list[str] = []
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [stmt.name]
        elif isinstance(stmt, ast.Assign):
            names = [n.id for target in stmt.targets for n in target_names(target)]
        elif isinstance(stmt, ast.AnnAssign):
            names = [n.id for n in target_names(stmt.target)]
        elif type(stmt).__name__ == "TypeAlias":
            names = [n.id for n in target_names(stmt.name)]  # type: ignore[attr-defined]
        for name in names:
            if name.startswith("_") == private and not name.startswith("__"):
                found.setdefault(name, stmt.lineno)
    return found


def shadowed(table: symtable.SymbolTable) -> set[str]:
    """Names bound in some nested scope of a module or declared `global` there: renaming the
    module-level name of the same spelling would not be certain to be exact."""
    found: set[str] = set()
    for child in table.get_children():
        found |= {symbol.get_name() for symbol in child.get_symbols() if binds(symbol)}
        found |= shadowed(child)
    return found


def binds(symbol: symtable.Symbol) -> bool:
    """Whether a scope binds a name of its own (or reaches the module's through `global`)."""
    own = symbol.is_local() or symbol.is_parameter() or symbol.is_imported()
    return own or symbol.is_annotated() or symbol.is_declared_global() or symbol.is_nonlocal()


def outside_classes(tree: ast.Module) -> set[str]:
    """Module-level classes whose name may reach the outside: exceptions and enums (their
    name is printed), msgspec Structs with a tag (their name may be the tag), and their
    subclasses in the module."""
    found: set[str] = set()
    for stmt in top_statements(tree.body):
        if isinstance(stmt, ast.ClassDef) and reaches_outside(stmt, found):
            found.add(stmt.name)
    return found


def reaches_outside(node: ast.ClassDef, known: set[str]) -> bool:
    """Whether a class is an exception, an enum, a tagged Struct or a subclass of one."""
    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    if bases & (OUTSIDE_CLASS_BASES | known):
        return True
    if any(base.endswith(("Error", "Exception", "Warning")) for base in bases):
        return True
    return any(k.arg in {"tag", "tag_field"} for k in node.keywords)


# --- where a name occurs in its module ---------------------------------------------------


def line_starts(text: str) -> list[int]:
    """The character offset of each line's start (index 0 is line 1)."""
    starts = [0]
    for line in text.split("\n"):  # as the parser counts lines (not str.splitlines)
        starts.append(starts[-1] + len(line) + 1)
    return starts


def char_offset(lines: list[str], starts: list[int], line: int, byte_col: int) -> int:
    """The character offset of an `ast` position (its column counts UTF-8 bytes)."""
    prefix = lines[line - 1].encode("utf-8")[:byte_col]
    return starts[line - 1] + len(prefix.decode("utf-8", errors="replace"))


def definition_offsets(text: str, tree: ast.Module, name: str) -> list[int] | None:
    """The offsets of a name right after `def`/`class` where the module defines it, read
    from the tokens; None when the tokens do not show it there."""
    wanted = {
        (node.lineno, node.col_offset)
        for node in nodes_of(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.name == name
    }
    starts, found = line_starts(text), []
    tokens = tokens_of(text)
    for index, token in enumerate(tokens[:-1]):
        follower = tokens[index + 1]
        if token.string in {"def", "class"} and follower.string == name:
            found.append(starts[follower.start[0] - 1] + follower.start[1])
    return found if len(found) == len(wanted) else None


def name_offsets(text: str, tree: ast.Module, name: str) -> list[int] | None:
    """The offsets of every `ast.Name` spelled so; None when one is not exactly there."""
    lines, starts, found = text.split("\n"), line_starts(text), []
    for node in nodes_of(tree):
        if isinstance(node, ast.Name) and node.id == name:
            start = char_offset(lines, starts, node.lineno, node.col_offset)
            if not exact_at(text, start, name):
                return None
            found.append(start)
    return found


def exact_at(text: str, start: int, name: str) -> bool:
    """Whether the text holds exactly this identifier at this offset."""
    before = text[start - 1] if start else " "
    after = text[start + len(name)] if start + len(name) < len(text) else " "
    whole = not (before.isalnum() or before == "_" or after.isalnum() or after == "_")
    return text[start : start + len(name)] == name and whole


def prose_offsets(text: str, tree: ast.Module, name: str) -> list[int]:
    """The offsets of the name where a comment or docstring of its module quotes it as code
    (right after a backtick: `name`, `name(…)`), so that the prose follows the rename."""
    quoted = re.compile(rf"(?<=`){re.escape(name)}\b")
    spans = prose_spans(text, tree)
    return [m.start() for start, end in spans for m in quoted.finditer(text, start, end)]


@functools.lru_cache(maxsize=4)
def prose_spans(text: str, tree: ast.Module) -> tuple[tuple[int, int], ...]:
    """The (start, end) offsets of every comment and docstring of a module."""
    lines, starts, docs = text.split("\n"), line_starts(text), docstring_nodes(tree)
    spans = [
        (starts[t.start[0] - 1] + t.start[1], starts[t.end[0] - 1] + t.end[1])
        for t in tokens_of(text)
        if t.type == tokenize.COMMENT
    ]
    for node in nodes_of(tree):
        if id(node) in docs and isinstance(node, ast.Constant):
            start = char_offset(lines, starts, node.lineno, node.col_offset)
            assert node.end_lineno is not None and node.end_col_offset is not None
            spans.append((start, char_offset(lines, starts, node.end_lineno, node.end_col_offset)))
    return tuple(spans)


@functools.lru_cache(maxsize=4)
def tokens_of(text: str) -> tuple[tokenize.TokenInfo, ...]:
    """The tokens of a module's text."""
    return tuple(tokenize.generate_tokens(io.StringIO(text).readline))


def occurrences(text: str, tree: ast.Module, name: str) -> tuple[tuple[int, int], ...] | None:
    """Every place to rewrite a module-level name (its code, and its mentions as code in the
    module's comments and docstrings), or None when not all of its code is certain."""
    defs, refs = definition_offsets(text, tree, name), name_offsets(text, tree, name)
    if defs is None or refs is None:
        return None
    places = {*defs, *refs, *prose_offsets(text, tree, name)}
    return tuple(sorted((start, start + len(name)) for start in places))


# --- the finder and the rewriter ---------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """A package module read once: its text, tree and symbol table."""

    path: Path
    text: str
    tree: ast.Module
    table: symtable.SymbolTable

    @classmethod
    def read(cls, path: Path) -> Module:
        text = path.read_text(encoding="utf-8")
        return cls(path, text, parsed(text), symtable.symtable(text, str(path), "exec"))

    def kept(self) -> set[str]:
        """Names this module must keep public whatever other files do."""
        spelled = {t for t in WORD.findall(self.text) if t.startswith("_")}
        taken = {name for name in definitions(self.tree) if f"_{name}" in spelled}
        own = strings_of(self.tree) | outside_classes(self.tree)  # `__all__` is strings
        return own | shadowed(self.table) | taken


def listed_by_itself(tree: ast.Module) -> bool:
    """Whether a module reads its own names by computed names (`globals()`, `vars()`,
    `dir()`, `sys.modules[__name__]`)."""
    for node in nodes_of(tree):
        if (
            isinstance(node, ast.Call)
            and not node.args
            and chain(node.func) in {"globals", "vars", "dir"}
        ):
            return True
        if isinstance(node, ast.Subscript) and chain(node.value) == "sys.modules":
            return True
    return False


def used_outside(root: Path) -> dict[Path, set[str]]:
    """For each file of the tree, the names it may use from other modules."""
    uses: dict[Path, set[str]] = {}
    for path in python_files(root, USERS):
        try:
            tree = parsed(path.read_text(encoding="utf-8"))
            uses[path] = uses_in_python(tree, dotted(root, path)[1])
        except (SyntaxError, UnicodeDecodeError):
            uses[path] = {"*"}  # unreadable: it may use anything
    for path, markdown in other_text_files(root):
        uses[path] = uses_in_text(path, markdown)
    return uses


def candidates(root: Path) -> list[Candidate]:
    """Every public module-level name no other file uses and that can be renamed exactly."""
    uses = used_outside(root)
    files_using = Counter(word for words in uses.values() for word in words)
    found: list[Candidate] = []
    for path in python_files(root, PACKAGES):
        own, star = uses.get(path, set()), f"*{dotted(root, path)[0]}"
        stars = (star, f"*~{path.stem}")  # imported by `*`, or its names listed (`vars(m)`)
        if files_using["*"] or any(files_using[s] > (s in own) for s in stars):
            continue  # an unreadable file, a star import or a listing may use any name
        module = Module.read(path)
        if listed_by_itself(module.tree):
            continue
        kept = module.kept()
        for name, line in definitions(module.tree).items():
            public = name in kept or files_using[name] > (name in own)
            spans = None if public else occurrences(module.text, module.tree, name)
            if spans:
                found.append(Candidate(path, line, name, spans, f"_{name}"))
    return found


# --- names another file asks for under their public spelling -----------------------------


def module_names(root: Path) -> dict[str, Path]:
    """The dotted name of each package module of the tree, with its file."""
    return {dotted(root, path)[0]: path for path in python_files(root, PACKAGES)}


def chain(node: ast.expr) -> str | None:
    """The dotted text of a name or a chain of attributes (`a.b.c`), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = chain(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def aliases(tree: ast.AST, package: str, modules: set[str]) -> dict[str, str]:
    """The local names a file binds to package modules (`import a.b as m`, `from a import b`)."""
    bound: dict[str, str] = {}
    for node in nodes_of(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name: a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, package)
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{base}.{a.name}"
    return bound


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from … import` reads from."""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
    return ".".join(p for p in (base, node.module or "") if p)


def exact_uses(tree: ast.AST, package: str, modules: set[str]) -> set[tuple[str, str]]:
    """The (module, name) pairs a file names exactly: `from m import name`, `m.name` through
    an alias or a full dotted path, and strings "pkg.m.name" or "pkg.m:name"."""
    bound, pairs = aliases(tree, package, modules), set()
    for node in nodes_of(tree):
        if isinstance(node, ast.ImportFrom) and absolute(node, package) in modules:
            pairs |= {(absolute(node, package), a.name) for a in node.names}
        elif isinstance(node, ast.Attribute):
            head = chain(node.value)
            module = bound.get(head or "", head)
            pairs |= {(module, node.attr)} if module in modules else set()
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            path = DOTTED_PATH.fullmatch(node.value)
            pairs |= {(path[1], path[2])} if path and path[1] in modules else set()
    return pairs


def restorable(root: Path) -> list[Candidate]:
    """Private module-level names that another file asks for under their public spelling (a
    branch that started using `name` while another renamed it `_name`): back to public."""
    modules = module_names(root)
    asked: set[tuple[str, str]] = set()
    for path in python_files(root, USERS):
        with contextlib.suppress(SyntaxError, UnicodeDecodeError):
            tree = parsed(path.read_text(encoding="utf-8"))
            own = dotted(root, path)[0]
            asked |= {
                p for p in exact_uses(tree, dotted(root, path)[1], set(modules)) if p[0] != own
            }
    found: list[Candidate] = []
    for module_name, path in sorted(modules.items()):
        wanted = {name for module, name in asked if module == module_name}
        found += restore(Module.read(path), wanted)
    return found


def restore(module: Module, wanted: set[str]) -> list[Candidate]:
    """The private definitions of a module to make public again, for the names asked for."""
    spelled, private = set(WORD.findall(module.text)), definitions(module.tree, private=True)
    blocked = shadowed(module.table) | strings_of(module.tree)
    found = []
    for name in sorted(wanted - spelled):
        old = f"_{name}"
        spans = (
            None
            if old not in private or old in blocked
            else occurrences(module.text, module.tree, old)
        )
        if spans:
            found.append(Candidate(module.path, private[old], old, spans, name))
    return found


def rename(found: list[Candidate]) -> None:
    """Rewrite each candidate at its exact places, file by file."""
    for path in sorted({c.path for c in found}):
        text = path.read_text(encoding="utf-8")
        spans = sorted(
            ((*s, c.new) for c in found if c.path == path for s in c.spans), reverse=True
        )
        for start, end, new in spans:
            text = f"{text[:start]}{new}{text[end:]}"
        ast.parse(text)  # a rewrite that does not parse is a bug here: fail before writing
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).parents[1])
    parser.add_argument("--check", action="store_true", help="list what is left, exit 1 if any")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    found = [*restorable(root), *candidates(root)]
    for candidate in found:
        print(replace(candidate, path=candidate.path.relative_to(root)))
    if args.check:
        return 1 if found else 0
    rename(found)
    print(f"renamed {len(found)} names", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
