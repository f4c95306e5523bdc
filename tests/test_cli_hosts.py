"""`commscope report --hosts … --net-peak …`: which host each rank ran on, given inline or in a
file, the intra- vs inter-node section in the JSON and text reports, and bad values refused at
start with one line."""

from __future__ import annotations

from pathlib import Path

from builders import rank_trace, write
from test_cli import reports, run


def job(tmp_path: Path) -> Path:
    root = tmp_path / "profile_trace"
    for rank in (0, 1):
        write(root / "iteration_10" / f"rank{rank}_trace.json", rank_trace(rank, 2))
    return root


def test_hosts_inline_place_each_group_and_the_net_peak_is_the_inter_node_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    flags = ("--hosts", "0=n0,1=n1", "--net-peak", "25", "--out", out)
    result = run(job(tmp_path), *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text, doc = reports(out)
    links = doc["links"]
    assert links["hosts"] == {"0": "n0", "1": "n1"}
    assert links["host_sources"] == {"0": "--hosts", "1": "--hosts"}
    assert links["groups"] and set(links["groups"].values()) == {"inter_node"}
    assert (links["inter_node"]["peak_Bps"], links["inter_node"]["peak_source"]) == (
        25e9,
        "--net-peak",
    )
    assert "13b. INTRA- VS INTER-NODE" in text
    assert "Inter-node: peak 25.0 GB/s per direction (--net-peak)" in text


def test_hosts_from_a_file(tmp_path: Path) -> None:
    spec = tmp_path / "hosts.txt"
    spec.write_text("# rank ranges, host\n0-1 = node0\n")
    out = tmp_path / "out"
    result = run(job(tmp_path), "--hosts", spec, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    _, doc = reports(out)
    assert doc["links"]["hosts"] == {"0": "node0", "1": "node0"}
    assert set(doc["links"]["groups"].values()) == {"intra_node"}


def test_bad_hosts_and_net_peak_fail_at_start(tmp_path: Path) -> None:
    root = job(tmp_path)
    result = run(root, "--hosts", "0=a,0=b", cwd=tmp_path)
    assert (result.returncode, "--hosts: rank 0 given two hosts" in result.stderr) == (1, True)
    result = run(root, "--net-peak", "0", cwd=tmp_path)
    assert (result.returncode, "--net-peak must be positive" in result.stderr) == (1, True)
