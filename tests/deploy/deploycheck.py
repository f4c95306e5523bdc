"""Helpers for the tests of deploy/: where the files are, external tools, PromQL name checks.

`require_tool(name)` finds a command-line tool or skips the test; with COMMSCOPE_REQUIRE_TOOLS=1
(CI, after installing them) a missing tool fails the test instead, so a green run cannot hide
checks that never ran.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from pathlib import Path

from commscope.exporters.metricnames import FAMILIES, SHARD_LABEL
from tools import require_tool

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# The command-line interface of the live service, as specified (`commscope collect|aggregate`).
FLAGS = {
    "collect": {
        "--watch",
        "--aggregator",
        "--node",
        "--state",
        "--poll",
        "--poll-interval",
        "--settle",
        "--max-unacked",
        "--file-idle",
        "--once",
        "--keys",
        "--server-key",
        "--metrics-port",
        "--metrics-addr",
        "--job",
        "--jobs",
        "--drain",
    },
    "aggregate": {
        "--listen",
        "--metrics-port",
        "--metrics-addr",
        "--out",
        "--state",
        "--config",
        "--job",
        "--expect-nodes",
        "--idle-timeout",
        "--horizon",
        "--keys",
        "--allow",
        "--shard",
        "--max-rank-series",
        "--linger",
    },
}
REQUIRED = {
    # No deploy file runs without keys (`--insecure` is for loopback tests and demos only).
    "collect": {"--watch", "--aggregator", "--node", "--state", "--keys", "--server-key"},
    "aggregate": {"--listen", "--metrics-port", "--out", "--state", "--keys", "--allow"},
}
# A histogram is queried as its series: `_bucket` (with `le`), `_sum` and `_count`, all counters.
HISTOGRAM_SERIES = {"_bucket": ("le",), "_sum": (), "_count": ()}
SERIES = {
    f"{f.name}{end}": (f, extra)
    for f in FAMILIES
    for end, extra in (HISTOGRAM_SERIES.items() if f.kind == "histogram" else [("", ())])
}
NAMES = frozenset(SERIES)
KIND = {name: "counter" if f.kind == "histogram" else f.kind for name, (f, _) in SERIES.items()}
# A sharded aggregator (`--shard`) adds the shard label to every family.
LABELS = {name: {*f.labels, *extra, SHARD_LABEL} for name, (f, extra) in SERIES.items()}

# PromQL identifiers: metric names, recorded names (with colons), functions, labels, keywords.
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_SELECTOR = re.compile(r"\b(commscope_[a-z_]+)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_RATE_CALL = re.compile(r"\b(?:rate|irate|increase)\s*\(\s*(commscope_[a-z_]+)\b")


def commscope_names(expr: str) -> set[str]:
    """Every `commscope_…` metric name in a PromQL expression (not recorded `a:b:c` names)."""
    code = _STRING.sub('""', expr)
    return {t for t in _IDENT.findall(code) if t.startswith("commscope_")}


def recorded_names(expr: str) -> set[str]:
    """Every recording-rule name (identifiers with a colon) in a PromQL expression."""
    code = _STRING.sub('""', expr)
    return {t for t in _IDENT.findall(code) if ":" in t}


def unknown_labels(expr: str) -> set[str]:
    """Label names used in selectors and groupings that no metric of the expression carries."""
    names = commscope_names(expr)
    known = set().union(*(LABELS.get(n, set()) for n in names)) if names else set()
    used = set()
    for _name, matchers in _SELECTOR.findall(expr):
        used |= set(_MATCHER_LABEL.findall(_STRING.sub('""', matchers)))
    for group in _GROUPING.findall(expr):
        used |= {label.strip() for label in group.split(",") if label.strip()}
    return used - known


def misused_counters(expr: str) -> set[str]:
    """Counters read raw and gauges (or quantiles) put through rate(): both give meaningless
    numbers."""
    code = _STRING.sub('""', expr)
    every = Counter(t for t in _IDENT.findall(code) if t.startswith("commscope_"))
    rated = Counter(_RATE_CALL.findall(code))
    raw_counters = {n for n, k in every.items() if KIND.get(n) == "counter" and rated[n] < k}
    rated_gauges = {n for n in rated if KIND.get(n) in {"gauge", "summary"}}
    return raw_counters | rated_gauges


def env_file(path: Path) -> dict[str, str]:
    """VAR=value lines of an EnvironmentFile (double quotes removed, as systemd does)."""
    out = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = shlex.split(value)[0] if value else ""
    return out


__all__ = [
    "DEPLOY",
    "FLAGS",
    "KIND",
    "LABELS",
    "NAMES",
    "REPO",
    "REQUIRED",
    "commscope_names",
    "env_file",
    "misused_counters",
    "recorded_names",
    "require_tool",
    "unknown_labels",
]
