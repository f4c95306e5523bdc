"""`commscope report` as a real process on folders that are not one clean job: several jobs
(a report each, exit 4), nothing usable (exit 1, no report), JSON that is not a trace beside
the traces (ignored, exit 0), a damaged or empty trace (exit 3), a lone trace without a rank
(rank 0)."""

from __future__ import annotations

import json
from pathlib import Path

from builders import A100, B200, GPU, JAN_NS, JUN_NS, MAR_NS, job_trace, rank_trace, write
from test_cli import reports, run
from tools import needs_shared, shared_traces


def three_jobs(root: Path) -> Path:
    """The issue's folder: ranks of a 16-, an 8- and a 2-GPU job, three GPU models, months
    apart, side by side."""
    for rank in range(3):
        write(root / f"b200_rank{rank}_trace.json", job_trace(rank, 16, B200, JAN_NS))
    for rank in (0, 1):
        write(root / f"a100_rank{rank}_trace.json", job_trace(rank, 8, A100, MAR_NS))
        write(root / f"h100_rank{rank}_trace.json", job_trace(rank, 2, GPU, JUN_NS))
    return root


def test_three_jobs_in_one_folder_are_reported_apart_and_exit_4(tmp_path: Path) -> None:
    result = run(three_jobs(tmp_path / "mixed"), "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    stems = sorted((p.stem for p in (tmp_path / "out").glob("*.json")), key=lambda s: s[-4:])
    assert [s.split("_", 2)[2] for s in stems] == [
        "mixed_gpu3of16_job1of3",  # the GPUs traced, of the job's world
        "mixed_gpu2of8_job2of3",
        "mixed_gpu2_job3of3",
    ]
    docs = [json.loads((tmp_path / "out" / f"{s}.json").read_text()) for s in stems]
    assert [(d["world_size"], d["ranks"], d["inputs"]["job"]) for d in docs] == [
        (16, [0, 1, 2], 1),
        (8, [0, 1], 2),
        (2, [0, 1], 3),
    ]
    # matched within each job only: one AllReduce per rank, all ending together
    assert [d["matching"]["instances"] for d in docs] == [1, 1, 1]
    assert all(o["offset_s"] == 0 for d in docs for o in d["clocks"]["per_rank"].values())
    text = (tmp_path / "out" / f"{stems[1]}.txt").read_text()
    assert (
        "Job: 2 of 3 in these files (world 8, nccl, NVIDIA A100-SXM4-80GB, "
        "started 2024-03-01 00:00:00 UTC)"
    ) in text
    this = "started 2024-03-01 00:00:00 UTC; 2 files  <- this report"
    assert f"  job 2: world 8, nccl, NVIDIA A100-SXM4-80GB, {this}" in text
    assert (
        "job 1 of 3 (world 16, nccl, NVIDIA B200, started 2024-01-01 00:00:00 UTC)" in result.stdout
    )
    assert "these files hold 3 jobs, each reported apart" in result.stderr


def test_a_folder_where_every_input_is_skipped_exits_1_and_writes_no_report(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "broken"
    good = rank_trace(0, 2)
    write(folder / "rank0_trace.json", good[: len(good) // 2])
    write(folder / "rank1_trace.json", b"\x00garbage")
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert f"commscope: skipped {folder / 'rank0_trace.json'}: truncated" in result.stderr
    assert f"commscope: skipped {folder / 'rank1_trace.json'}: corrupt JSON" in result.stderr
    assert "nothing analysed (2 trace file(s) skipped); no report written" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_folder_of_json_that_is_not_a_trace_exits_1(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    write(folder / "meta.json", b'{"step": 1200}')
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert f"commscope: ignored {folder / 'meta.json'}: not a trace" in result.stderr
    assert "nothing analysed (no trace, 1 other JSON file(s) ignored)" in result.stderr


def test_json_that_is_not_a_trace_beside_good_traces_is_ignored_and_exits_0(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "run"
    for rank in (0, 1):
        write(folder / f"rank{rank}_trace.json", rank_trace(rank, 2))
    write(folder / "meta.json", b'{"step": 1200, "world_size": 2}')
    write(folder / "config.json", b"[1, 2]")
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text, doc = reports(tmp_path / "out")
    assert doc["inputs"]["ignored"] == [str(folder / "config.json"), str(folder / "meta.json")]
    assert (doc["inputs"]["files"], doc["inputs"]["skipped"]) == (2, [])
    assert doc["ranks"] == [0, 1]
    ignored = "Ignored (valid JSON without traceEvents, not named as a trace):"
    assert f"{ignored}\n  {folder / 'config.json'}" in text


def test_a_corrupt_file_named_as_a_trace_is_skipped_and_exits_3(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    write(folder / "rank0_trace.json", rank_trace(0, 2))
    write(folder / "rank1_trace.json", b'{"traceEvents": [{"ph": "X", "ts": 1,,}]}')
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    _, doc = reports(tmp_path / "out")
    (skipped,) = doc["inputs"]["skipped"]
    assert skipped["path"] == str(folder / "rank1_trace.json")
    assert "corrupt JSON" in skipped["reason"]


def test_an_empty_trace_is_skipped_with_its_reason_not_analysed(tmp_path: Path) -> None:
    """`{"traceEvents": []}` beside a good trace: 2 files, 1 skipped (exit 3), the report
    over rank 0 alone; every file empty: nothing analysed (exit 1, no report)."""
    folder = tmp_path / "run"
    write(folder / "rank0_trace.json", rank_trace(0, 2))
    write(folder / "rank1_trace.json", b'{"traceEvents": []}')
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    _, doc = reports(tmp_path / "out")
    assert doc["inputs"]["files"] == 2 and doc["windows"][0]["ranks"] == [0]
    assert doc["inputs"]["skipped"] == [
        {
            "path": str(folder / "rank1_trace.json"),
            "reason": "empty trace: traceEvents holds no event",
        }
    ]
    (folder / "rank0_trace.json").write_bytes(b'{"schemaVersion": 1, "traceEvents": []}')
    result = run(folder, "--out", tmp_path / "none", cwd=tmp_path)
    assert result.returncode == 1 and not (tmp_path / "none").exists()
    assert result.stderr.endswith("nothing analysed (2 trace file(s) skipped); no report written\n")


def test_valid_json_named_as_a_trace_is_skipped_not_ignored(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    write(folder / "rank0_trace.json", rank_trace(0, 2))
    write(folder / "rank1_trace.json", b'{"hello": "world"}')
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    _, doc = reports(tmp_path / "out")
    assert doc["inputs"]["ignored"] == []
    assert [s["path"] for s in doc["inputs"]["skipped"]] == [str(folder / "rank1_trace.json")]


def test_a_lone_trace_without_a_rank_is_analysed_as_rank_0(tmp_path: Path) -> None:
    path = write(tmp_path / "bench" / "bench.json", job_trace(None, 2))
    result = run(path, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text, doc = reports(tmp_path / "out")
    assert doc["ranks"] == [0]
    # C = [50,200) µs, P = [0,100) ∪ [150,300): C ∩ P = 100 µs of 150 → 2/3
    assert doc["overlap"]["per_rank"]["0"]["ratio"] == 2 / 3
    note = f"{path}: no distributedInfo.rank, the only file of its window: taken as rank 0"
    assert doc["inputs"]["notes"] == [note]
    assert f"Notes:\n  {note}" in text
    assert "Ranks not all from the traces: see the notes in 15. INPUTS" in text


def test_traces_without_ranks_take_them_from_their_names(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    for rank in (0, 1):
        write(folder / f"trace_{rank}.json", job_trace(None, 2))
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    _, doc = reports(tmp_path / "out")
    assert doc["ranks"] == [0, 1] and doc["matching"]["instances"] == 1
    assert (
        "rank taken from the one number that tells the file names apart"
        in doc["inputs"]["notes"][0]
    )


def test_traces_without_ranks_and_with_process_ids_in_their_names_are_refused(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "tb"
    for pid in (4242, 4250):
        write(folder / f"host_{pid}.pt.trace.json", job_trace(None, 2))
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert "(4242, 4250) are not ranks below the world size 2" in result.stderr


# ---------------------------------------------------------------- Nsight Systems exports

NSYS_EXPORT = shared_traces("nsys", "h100x2_alltoall.sqlite")


@needs_shared("nsys", "h100x2_alltoall.sqlite")
def test_the_real_nsys_export_gives_its_readmes_facts(tmp_path: Path) -> None:
    """../shared/traces/nsys (README): 2 ranks, all-to-all as SendRecv kernels on the compute
    stream, so overlap 0; NCCL kernel time 17.2 ms vs 8.2 ms (rank 1 waits less)."""
    result = run(NSYS_EXPORT.resolve(), "--out", tmp_path / "out", "--print", cwd=tmp_path)
    print(result.stdout)
    assert result.returncode == 0, result.stderr
    text, doc = reports(tmp_path / "out")
    assert doc["ranks"] == [0, 1]
    per_rank = doc["overlap"]["per_rank"]
    assert [per_rank[r]["ratio"] for r in ("0", "1")] == [0.0, 0.0]
    # Σ of each process's ncclDevKernel_SendRecv durations (sqlite3: 17172652 and 8229100 ns)
    assert [round(per_rank[r]["comm_time_s"] * 1e9) for r in ("0", "1")] == [17172652, 8229100]
    # 32 calls inside PyTorch's nccl:all_to_all; the first kernel of each was launched
    # before the export's window, so its call is unknown (Other)
    assert {k: v["count"] for k, v in doc["collectives"]["all_ranks"].items()} == {
        "AllToAll": 64,
        "Other": 2,
    }
    assert doc["inputs"]["sources"] == {"nsys": 2}
    assert [f["meta"]["source"] for f in doc["windows"][0]["facts"].values()] == ["nsys", "nsys"]
    assert "Source: Nsight Systems SQLite exports (2 (window, rank) pairs)" in text
    assert "Sources by window:\n  nsys: nsys: ranks 0-1" in text
    assert (
        "ranks assumed from the order of the processes' CUDA devices: pid 144 (GPU 0) rank 0"
        in text
    )
    assert "  rank 0: 0.00%  [gpu kernels]" in text


def test_an_nsys_export_beside_kineto_windows_is_a_window_of_the_same_job(tmp_path: Path) -> None:
    root = tmp_path / "run"
    for rank in (0, 1):
        write(root / "iteration_10" / f"rank{rank}_trace.json", rank_trace(rank, 2))
    two_rank_export(root / "nsys" / "job.sqlite")
    outputs = []
    for jobs in ("1", "2"):
        result = run("run", "--out", tmp_path / jobs, "--jobs", jobs, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        outputs.append(reports(tmp_path / jobs))
    (text, doc), (_, parallel_doc) = outputs
    doc.pop("provenance"), parallel_doc.pop("provenance")  # when and how each was written
    assert doc == parallel_doc  # the same report whatever the runner
    assert [w["name"] for w in doc["windows"]] == ["iteration_10", "nsys"]
    assert doc["inputs"]["sources"] == {"kineto": 2, "nsys": 2}
    assert (
        "Source: PyTorch profiler (Kineto) traces (2 (window, rank) pairs), "
        "Nsight Systems SQLite exports (2 (window, rank) pairs)"
    ) in text
    assert "Sources by window:\n  iteration_10: kineto: ranks 0-1\n  nsys: nsys: ranks 0-1" in text


def two_rank_export(path: Path) -> None:
    """A 2-rank Nsight Systems export (NCCL's init payload names each process's rank)."""
    from nsys_builder import INIT, Export, blob

    export = Export(gpus={0: GPU, 1: GPU})
    for pid, device in ((10, 0), (11, 1)):
        init = blob(INIT, comm=1, ranks=2, rank=device)
        export.nvtx(pid, 1, 0, 5, "ncclCommInitRank", payload=init)
        export.kernel(pid, device, 10, 20, "ampere_sgemm_128x64_tn")
    export.write(path)


def test_a_damaged_export_beside_a_good_one_is_skipped_and_exits_3(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    two_rank_export(folder / "node1.sqlite")
    (folder / "node2.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x07" * 2000)
    (folder / "node3.nsys-rep").write_bytes(b"\x00" * 100)
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"commscope: skipped {folder / 'node2.sqlite'}: corrupt SQLite database (" in result.stderr
    )
    assert (
        f"commscope: skipped {folder / 'node3.nsys-rep'}: an Nsight Systems report, not an "
        "export: run `nsys export --type sqlite FILE` and give the .sqlite"
    ) in result.stderr
    _, doc = reports(tmp_path / "out")
    assert doc["ranks"] == [0, 1]
    assert [s["path"] for s in doc["inputs"]["skipped"]] == [
        str(folder / "node2.sqlite"),
        str(folder / "node3.nsys-rep"),
    ]
