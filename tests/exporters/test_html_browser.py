"""The HTML report in a real headless browser (Debian's chromium): the page loads without a
console error and without asking any host for anything, and its screenshot is not blank.

The report is written by `commscope report` (a real process) on the bundled sample and on a
real trace of ../shared/traces. The browser may reach loopback only: its proxy is a closed
port on 127.0.0.1, and its net log (`--log-net-log`) lists every request the page made (those
keyed by the page's file:// origin; the browser's own background requests are not the page's).
A control page with a console error, a bad SVG attribute and a remote image proves the checks
see what they look for. CI installs chromium and sets COMMSCOPE_REQUIRE_TOOLS=…,chromium, so
there a missing browser fails instead of skipping.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from commscope.exporters import html
from commscope.model.schema import Report
from graphs_builder import write_job
from tools import needs_shared, require_tool, shared_traces

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
DLRM = shared_traces("kineto", "dlrm_8rank_v100")
SIZE = (1000, 2400)  # a laptop's width; tall enough for the first plots
CONTROL = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<script>console.error("control: an error")</script><img src="http://example.invalid/x.png">
<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><rect width="-3" height="4"/></svg>
</body></html>"""


@dataclass(frozen=True)
class Visit:
    console: list[str]  # every console message (the page writes none at all)
    requests: list[str]  # URLs the page asked the network for
    png: bytes


def browse(page: Path, scratch: Path) -> Visit:
    """One headless chromium run: the page's console, its network requests, a screenshot."""
    shot, netlog = scratch / "shot.png", scratch / "net.json"
    command = [
        *headless(scratch / "profile"),
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        f"--log-net-log={netlog}",
        f"--window-size={SIZE[0]},{SIZE[1]}",
        f"--screenshot={shot}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-3000:]
    console = re.findall(r":CONSOLE[:(]\d+\)?\] (.*)", done.stderr)
    return Visit(console, page_requests(json.loads(netlog.read_text())), shot.read_bytes())


def headless(profile: Path) -> list[str]:
    """Headless chromium that can reach nothing beyond the machine."""
    return [
        require_tool("chromium"),
        "--headless",
        "--no-sandbox",  # root in CI containers
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--proxy-server=127.0.0.1:9",  # loopback only: nothing can leave the machine
        f"--user-data-dir={profile}",
    ]


def page_requests(log: dict) -> list[str]:  # type: ignore[type-arg]
    """The URLs of requests keyed by a file:// page (not the browser's own)."""
    found = []
    for event in log.get("events", []):
        params = event.get("params", {})
        key = str(params.get("network_isolation_key", ""))
        if "url" in params and key.startswith("file://"):
            found.append(params["url"])
    return sorted(set(found))


# ---------------------------------------------------------------- a tiny PNG decoder


def pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA PNG, not interlaced."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind = png[at + 4 : at + 8]
        chunks[kind] = chunks.get(kind, b"") + png[at + 8 : at + 8 + length]
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and colour in (2, 6) and interlace == 0
    step = 3 if colour == 2 else 4
    raw = zlib.decompress(chunks[b"IDAT"])
    rows, previous, stride = [], bytes(width * step), width * step
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        previous = unfilter(line[0], bytearray(line[1:]), previous, step)
        rows.append(b"".join(previous[x : x + 3] for x in range(0, stride, step)))
    return width, height, rows


def unfilter(kind: int, line: bytearray, above: bytes, step: int) -> bytes:
    """PNG's five row filters undone (None, Sub, Up, Average, Paeth)."""
    for i in range(len(line)):
        left = line[i - step] if i >= step else 0
        up, corner = above[i], above[i - step] if i >= step else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            line[i] = (line[i] + paeth(left, up, corner)) & 0xFF
    return bytes(line)


def paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def colours(png: bytes) -> dict[bytes, int]:
    """Pixel count per RGB colour, over every 3rd pixel of every 3rd row."""
    _, _, rows = pixels(png)
    counts: dict[bytes, int] = {}
    for row in rows[::3]:
        for x in range(0, len(row), 9):
            counts[row[x : x + 3]] = counts.get(row[x : x + 3], 0) + 1
    return counts


def test_the_png_decoder_reads_back_a_png_written_by_hand() -> None:
    # 2 x 2 RGB: red, green / blue, white; rows filtered None and Sub (the second row's
    # white is stored as its difference to blue: (255, 255, 0))
    rows = b"\x00\xff\x00\x00\x00\xff\x00" + b"\x01\x00\x00\xff\xff\xff\x00"
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(data)) + kind + data + b"\0\0\0\0"
        for kind, data in ((b"IHDR", ihdr), (b"IDAT", zlib.compress(rows)), (b"IEND", b""))
    )
    assert pixels(png) == (2, 2, [b"\xff\x00\x00\x00\xff\x00", b"\x00\x00\xff\xff\xff\xff"])


# ---------------------------------------------------------------- the browser


def test_the_checks_see_a_console_error_a_bad_svg_and_a_remote_request(tmp_path: Path) -> None:
    page = tmp_path / "control.html"
    page.write_text(CONTROL)
    visit = browse(page, tmp_path)
    assert any("control: an error" in line for line in visit.console)
    assert any("A negative value is not valid" in line for line in visit.console)
    assert visit.requests == ["http://example.invalid/x.png"]


def report_page(traces: Path, out: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "commscope.service.cli",
        "report",
        str(traces),
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (page,) = out.glob("*.html")
    assert f"commscope: wrote {page}" in done.stdout
    # the page is drawn from the report document: the JSON report gives the very same page
    document = msgspec.json.decode(page.with_suffix(".json").read_bytes(), type=Report)
    assert html.render(document) == page.read_text(encoding="utf-8")
    return page


@pytest.mark.parametrize(
    "traces",
    [
        SAMPLE,
        pytest.param(DLRM, marks=needs_shared("kineto", "dlrm_8rank_v100")),
    ],
    ids=["sample", "dlrm_8rank_v100"],
)
def test_the_report_loads_cleanly_and_draws_its_plots(traces: Path, tmp_path: Path) -> None:
    visit = browse(report_page(traces, tmp_path / "out"), tmp_path)
    assert visit.console == [] and visit.requests == []
    width, height, _ = pixels(visit.png)
    assert (width, height) == SIZE
    seen = colours(visit.png)
    assert len(seen) >= 64  # text, axes, heat maps: far from a blank page
    assert max(seen.values()) < 0.95 * sum(seen.values())  # not one colour with specks
    assert bytes.fromhex("0072b2") in seen  # the plots' blue (legend swatches, points)


def dom(page: Path, scratch: Path) -> str:
    """The page's DOM as headless chromium serialises it once parsed (`--dump-dom`)."""
    command = [*headless(scratch / "dom-profile"), "--dump-dom", page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_cuda_graphs_section_renders_every_rank_and_graph(tmp_path: Path) -> None:
    page = report_page(write_job(tmp_path / "job"), tmp_path / "out")
    visit = browse(page, tmp_path)
    assert visit.console == [] and visit.requests == []
    section = dom(page, tmp_path).split("<h2>CUDA graphs</h2>")[1].split("<h2>")[0]
    tables = section.split("<table>")[1:]
    # launches: the head, all ranks, rank 0, rank 1; graphs: the head, rank 0's graphs 7, 9 and
    # the row without an id, rank 1's row without an id (`graphs_builder`)
    assert [t.count("<tr>") for t in tables] == [4, 5]
    assert "<td>all</td><td>6</td><td>27.0 µs</td><td>3 (50%)</td>" in tables[0]
    assert tables[1].count("<td>not recorded</td>") == 2
