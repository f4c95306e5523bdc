"""Intra- vs inter-node (`pipeline/hosts.py`): `--hosts` parsing, the class of a group against a
brute-force oracle over every way its unknown hosts could fall, and a hand-built job of 2 hosts x
2 ranks whose busbw and α-β fits per link are worked out by hand."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from commscope.model.errors import ConfigError
from commscope.model.schema import Clocks, Links, Matching, Report, TraceMeta
from commscope.pipeline import hosts, linkmerge, skew
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.merge import combine
from commscope.pipeline.report import LinksGiven, Options
from commscope.pipeline.reuse import WindowCache
from commscope.service.offline import analyse, parse_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inspector_builder import DUMP_US, coll
from kineto_builder import collective_args, dist_head, kernel, trace
from nsys_builder import COLL, INIT, Export, blob

# ---------------------------------------------------------------- --hosts


def test_hosts_are_rank_ranges_apart_by_commas_or_lines() -> None:
    assert hosts.parse_hosts("0-1=a, 2=b;3=b") == {0: "a", 1: "a", 2: "b", 3: "b"}
    text = "# rank ranges and hosts\n0-1 = node0\n\n2-3: node1  # the second node\n"
    assert hosts.parse_hosts(text) == {0: "node0", 1: "node0", 2: "node1", 3: "node1"}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("0-1=a,1=b", "rank 1 given two hosts"),
        ("node0", "is not RANK=HOST"),
        ("3-1=a", "is not a rank range"),
        ("# nothing", "no RANKS=HOST entry"),
    ],
)
def test_a_bad_hosts_spec_is_refused_with_the_reason(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        hosts.parse_hosts(spec)


def test_hosts_given_win_over_the_traces_and_each_says_its_source() -> None:
    metas = [
        (0, TraceMeta(rank=0, host="n0", source="nsys")),
        (1, TraceMeta(rank=1, host="n0", source="inspector")),
        (2, TraceMeta(rank=2)),
    ]
    found, sources = hosts.rank_hosts(metas, {1: "given"})
    assert found == {0: "n0", 1: "given"}
    assert sources == {0: hosts.RECORDED["nsys"], 1: hosts.HOSTS_FLAG}


def test_before_any_window_closes_hosts_and_peaks_are_said_and_no_instance() -> None:
    placed = ({0: "a"}, {0: hosts.HOSTS_FLAG})
    found = hosts.links(None, placed, (450e9, "H100 table value"), (None, hosts.NO_NIC))
    assert (found.hosts, found.na_reason) == ({"0": "a"}, hosts.NO_INSTANCES)
    assert (found.intra_node.peak_Bps, found.intra_node.peak_source) == (450e9, "H100 table value")
    assert (found.inter_node.peak_Bps, found.inter_node.peak_source) == (None, hosts.NO_NIC)


# ---------------------------------------------------------------- a group's class

POOL = ["a", "b", "c"]


def oracle(members: list[int], size: int, known: dict[int, str]) -> str:
    """Every completion: hosts for the members not in `known` and for the members not seen
    (size - len(members), hosts of a pool with one more than any seen); the class is definite
    when every completion agrees."""
    unknown = [m for m in members if m not in known] + [-1] * max(0, size - len(members))
    pool = [*POOL, "fresh"]
    verdicts = set()
    for choice in itertools.product(pool, repeat=len(unknown)):
        placed = [known[m] for m in members if m in known] + list(choice)
        same = all(x == y for x in placed for y in placed)
        verdicts.add(hosts.INTRA if same else hosts.INTER)
    return verdicts.pop() if len(verdicts) == 1 else hosts.UNKNOWN


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True),
    st.integers(1, 5),
    st.dictionaries(st.integers(0, 5), st.sampled_from(POOL), max_size=6),
)
def test_a_groups_class_agrees_with_every_way_its_unknown_hosts_could_fall(
    members: list[int], size: int, known: dict[int, str]
) -> None:
    assert hosts.locality(members, size, known) == oracle(members, size, known)


def test_a_group_of_unknown_size_is_whole_only_at_the_world_size() -> None:
    on_one = {0: "a", 1: "a"}
    assert hosts.locality([0, 1], None, on_one) == hosts.UNKNOWN
    assert hosts.locality([0, 1], 2, on_one) == hosts.INTRA


# ---------------------------------------------------------------- 2 hosts x 2 ranks

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
GROUPS = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}
BASE_NS = 1_700_000_000_000_000_000
ALPHA_US, BETA_BPS = 10.0, 50e9
# (group, message bytes, duration µs), every member the same start and duration (no waiting)
# group 0 (AllReduce, n = 4, F = 1.5): on the line T = α + S·F/β
# groups 1 and 2 (AllReduce, n = 2, F = 1): one instance each
INSTANCES = [
    ("0", 4_000_000, ALPHA_US + 6e6 / BETA_BPS * 1e6),  # S·F 6 MB: 130 µs
    ("0", 16_000_000, ALPHA_US + 24e6 / BETA_BPS * 1e6),  # 24 MB: 490 µs
    ("0", 64_000_000, ALPHA_US + 96e6 / BETA_BPS * 1e6),  # 96 MB: 1930 µs
    ("1", 4_000_000, 40.0),
    ("2", 8_000_000, 40.0),
]


def head(rank: int) -> dict:
    found = dist_head(rank=rank, world_size=4, gpu="NVIDIA H100 80GB HBM3")
    found["distributedInfo"]["pg_config"] = [
        {"pg_name": g, "pg_desc": "pg", "pg_size": len(m), "ranks": m} for g, m in GROUPS.items()
    ]
    return found


def events(rank: int, groups: set[str] | None = None) -> list[dict]:
    """The rank's kernels of every instance (of `groups` only, when given)."""
    found, seqs = [], dict.fromkeys(GROUPS, 0)
    for i, (group, size, dur_us) in enumerate(INSTANCES):
        if rank in GROUPS[group] and (groups is None or group in groups):
            args = collective_args("allreduce", size // 4, size // 4, "Float")
            args.update({"Group size": len(GROUPS[group]), "Process Group Name": group})
            args["Seq"] = seqs[group]
            seqs[group] += 1
            name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
            found.append(kernel(name, 10_000.0 * (i + 1), dur_us, args))
    return found


def job(folder: Path, options: Options, name: str = "rank{rank}_trace.json") -> Report:
    """The job's 4 files, each named `name` (formatted with its rank, host and a pid)."""
    for rank, host in HOSTS.items():
        tail = {"baseTimeNanoseconds": BASE_NS}
        named = name.format(rank=rank, host=host, pid=4100 + rank)
        (folder / named).write_bytes(trace(events(rank), head(rank), tail))
    return analyse(folder, options)


HANDLER = "{host}_{pid}.1700000000123456789.pt.trace.json"  # tensorboard_trace_handler's


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    folder = tmp_path_factory.mktemp("iteration_1")
    return job(folder, Options(hosts=HOSTS, net_peak_Bps=100e9))


def test_each_group_is_placed_by_its_members_hosts(report: Report) -> None:
    links = report.links
    assert links is not None
    assert links.hosts == {str(r): h for r, h in HOSTS.items()}
    assert set(links.host_sources.values()) == {hosts.HOSTS_FLAG}
    assert links.groups == {"0": "inter_node", "1": "intra_node", "2": "intra_node"}
    assert (links.intra_node.groups, links.inter_node.groups) == (["1", "2"], ["0"])
    assert (links.unknown_instances, links.na_reason) == (0, None)


def test_intra_node_busbw_is_bus_bytes_over_wait_free_time_against_nvlink(report: Report) -> None:
    assert report.links is not None
    intra = report.links.intra_node
    assert (intra.peak_Bps, intra.peak_source) == (450e9, "H100 table value")
    allreduce = intra.collectives["AllReduce"]
    # (4 MB x 1 + 8 MB x 1) / (40 µs + 40 µs) = 150 GB/s, a third of H100's 450
    assert (allreduce.instances, allreduce.sized) == (2, 2)
    assert allreduce.bus_bytes == 12e6
    assert allreduce.busbw_Bps == pytest.approx(150e9)
    assert allreduce.peak_ratio == pytest.approx(1 / 3)
    assert allreduce.fit is not None and allreduce.fit.na_reason == "fewer than 3 distinct sizes"


def test_inter_node_busbw_and_fit_against_the_net_peak(report: Report) -> None:
    assert report.links is not None
    inter = report.links.inter_node
    assert (inter.peak_Bps, inter.peak_source) == (100e9, hosts.NET_PEAK_FLAG)
    allreduce = inter.collectives["AllReduce"]
    # (6 + 24 + 96) MB / (130 + 490 + 1930) µs = 126 MB / 2.55 ms
    assert allreduce.bus_bytes == 126e6
    assert allreduce.busbw_Bps == pytest.approx(126e6 / 2550e-6)
    assert allreduce.peak_ratio == pytest.approx(126e6 / 2550e-6 / 100e9)
    fit = allreduce.fit
    assert fit is not None and fit.alpha_s is not None
    assert (fit.alpha_s, fit.beta_Bps) == (pytest.approx(ALPHA_US * 1e-6), pytest.approx(BETA_BPS))
    assert fit.peak_ratio == pytest.approx(0.5)


def test_without_hosts_every_group_is_unknown_and_the_report_says_why(tmp_path: Path) -> None:
    found = job(tmp_path, Options())
    assert found.links is not None
    assert set(found.links.groups.values()) == {hosts.UNKNOWN}
    assert found.links.unknown_instances == len(INSTANCES)
    assert found.links.na_reason == hosts.NO_HOSTS
    assert found.links.inter_node.peak_source == hosts.NO_NIC


def test_two_known_hosts_suffice_to_place_a_group_across_nodes(tmp_path: Path) -> None:
    found = job(tmp_path, Options(hosts={0: "node-a", 2: "node-b"}))
    assert found.links is not None
    assert found.links.groups == {"0": "inter_node", "1": "unknown", "2": "unknown"}
    assert found.links.unknown_instances == 2


def test_hosts_come_from_tensorboard_trace_handler_names_and_say_so(
    tmp_path: Path, report: Report
) -> None:
    found = job(tmp_path, Options(net_peak_Bps=100e9), HANDLER)
    assert found.links is not None and report.links is not None
    assert found.links.hosts == {str(r): h for r, h in HOSTS.items()}
    assert set(found.links.host_sources.values()) == {hosts.FILE_NAME}
    # the same split as the one --hosts gives
    assert msgspec.structs.replace(found.links, host_sources={}) == msgspec.structs.replace(
        report.links, host_sources={}
    )


def test_hosts_given_and_recorded_win_over_file_names() -> None:
    metas = [(0, TraceMeta(rank=0, host="n0", source="nsys")), (1, TraceMeta(rank=1))]
    metas.append((2, TraceMeta(rank=2)))
    named = {0: "from-name", 1: "from-name", 2: "from-name"}
    found, sources = hosts.rank_hosts(metas, {2: "given"}, named)
    assert found == {0: "n0", 1: "from-name", 2: "given"}
    assert sources == {0: hosts.RECORDED["nsys"], 1: hosts.FILE_NAME, 2: hosts.HOSTS_FLAG}


def test_a_ranks_first_file_named_by_a_host_gives_it() -> None:
    paths = [(0, "w/rank0_trace.json"), (0, "w2/a_1.2.pt.trace.json"), (0, "b_1.2.pt.trace.json")]
    assert hosts.named_hosts([*paths, (1, "w/worker1_7.2.pt.trace.json")]) == {0: "a"}


def test_rank_numbered_handler_names_give_no_host(tmp_path: Path) -> None:
    found = job(tmp_path, Options(), "worker{rank}_{pid}.1700000000123456789.pt.trace.json")
    assert found.links is not None
    assert (found.links.hosts, found.links.na_reason) == ({}, hosts.NO_HOSTS)


# ---------------------------------------------------------------- the real traces (../shared)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
real = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} not present")


@real
def test_the_real_nsys_export_names_its_host_and_stays_on_it() -> None:
    found = analyse(SHARED / "nsys" / "h100x2_alltoall.sqlite", Options())
    assert found.links is not None
    assert found.links.hosts == {"0": "modal", "1": "modal"}
    assert set(found.links.host_sources.values()) == {hosts.RECORDED["nsys"]}
    assert set(found.links.groups.values()) == {hosts.INTRA}
    assert found.links.intra_node.collectives["AllToAll"].instances == 32
    # the export has no TARGET_INFO_NIC_INFO: no NIC named, no network peak
    assert found.links.inter_node.peak_source == hosts.NO_NIC


@real
def test_dlrm_on_one_host_pools_the_same_fits_as_its_one_group() -> None:
    found = analyse(
        SHARED / "kineto" / "dlrm_8rank_v100", Options(hosts=dict.fromkeys(range(8), "a"))
    )
    assert found.links is not None
    ((group, fits),) = found.alpha_beta.items()
    assert found.links.groups == {group: hosts.INTRA}
    for kind, fit in fits.items():
        pooled = found.links.intra_node.collectives[kind]
        plotted = msgspec.structs.replace(fit, points=[], points_total=0, bus_factor=None)
        assert pooled.fit == plotted and pooled.instances == fit.instances
    assert found.links.intra_node.peak_Bps == 150e9  # V100 NVLink 2 per direction


@real
def test_dlrm_names_are_rank_numbered_and_give_no_host() -> None:
    # worker0_step_12.1694128201545.pt.trace.json: a worker name, `worker0_step` and `12` no
    # host and pid
    found = analyse(SHARED / "kineto" / "dlrm_8rank_v100", Options())
    assert found.links is not None
    assert (found.links.hosts, found.links.na_reason) == ({}, hosts.NO_HOSTS)


# ---------------------------------------------------------------- NCCL Inspector, 2 hosts x 2


def inspector_job(folder: Path) -> Report:
    """A world communicator of 4 ranks (AllReduce 4 MB, 120 µs on every member) and one of 2
    ranks per node (AllReduce 4 MB, 40 µs); each log names its host."""
    folder.mkdir()
    for rank in range(4):
        host, local = f"node{rank // 2}", rank % 2
        start = DUMP_US + 1000
        lines = [
            coll(rank, comm="0xw", n_ranks=4, size=4_000_000, exec_us=120, start_us=start,
                 host=host),
            coll(local, comm=f"0x{host}", n_ranks=2, size=4_000_000, exec_us=40,
                 start_us=start + 500, host=host, comm_name="tp"),
        ]  # fmt: skip
        (folder / f"{host}-pid{100 + rank}.log").write_text("\n".join(lines) + "\n")
    return analyse(folder, Options())


def test_inspector_logs_name_their_hosts_and_split_by_link(tmp_path: Path) -> None:
    found = inspector_job(tmp_path / "logs")
    links = found.links
    assert links is not None
    assert links.hosts == {"0": "node0", "1": "node0", "2": "node1", "3": "node1"}
    assert set(links.host_sources.values()) == {hosts.RECORDED["inspector"]}
    assert links.groups == {"world 0xw": "inter_node", "tp 0xnode0": "intra_node",
                            "tp 0xnode1": "intra_node"}  # fmt: skip
    # intra: (4 MB x 1) x 2 / (40 µs x 2) = 100 GB/s; inter: 4 MB x 1.5 / 120 µs = 50 GB/s
    intra = links.intra_node.collectives["AllReduce"]
    inter = links.inter_node.collectives["AllReduce"]
    assert (intra.instances, intra.bus_bytes, intra.busbw_Bps) == (2, 8e6, pytest.approx(100e9))
    assert (inter.instances, inter.bus_bytes, inter.busbw_Bps) == (1, 6e6, pytest.approx(50e9))


# ---------------------------------------------------------------- Nsight Systems, 2 hosts x 2

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def nsys_node(host: str, ranks: tuple[int, int]) -> Export:
    """One node's export: two processes, NCCL ranks `ranks` of a world of 4, each an AllReduce
    of 4 MB run for 120 µs; the export's Hostname row names `host`."""
    export = Export(gpus={0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3"})
    export.hosts = {1 << 48: host}
    for pid, device, rank in ((200, 0, ranks[0]), (300, 1, ranks[1])):
        export.nvtx(
            pid, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=7, ranks=4, rank=rank)
        )
        size = blob(COLL, comm=7, size=4_000_000)
        export.nvtx(pid, 1, 1_000, 1_100, "ncclAllReduce", payload=size)
        export.launched(pid, 1, 1_050, corr=9, kernel=(device, 2_000, 122_000, ALLREDUCE))
    return export


def test_nsight_exports_of_two_nodes_name_their_hosts_and_cross_nodes(tmp_path: Path) -> None:
    folder = tmp_path / "iteration_1"
    nsys_node("node-a", (0, 1)).write(folder / "node-a.sqlite")
    nsys_node("node-b", (2, 3)).write(folder / "node-b.sqlite")
    found = analyse(folder, Options(net_peak_Bps=100e9))
    assert found.links is not None
    assert found.links.hosts == {"0": "node-a", "1": "node-a", "2": "node-b", "3": "node-b"}
    assert set(found.links.host_sources.values()) == {hosts.RECORDED["nsys"]}
    assert set(found.links.groups.values()) == {hosts.INTER}
    allreduce = found.links.inter_node.collectives["AllReduce"]
    # 4 MB x 2·3/4 = 6 MB over 120 µs: 50 GB/s, half the 100 GB/s given
    assert (allreduce.instances, allreduce.bus_bytes) == (1, 6e6)
    assert allreduce.busbw_Bps == pytest.approx(50e9)
    assert allreduce.peak_ratio == pytest.approx(0.5)


CX7, X710 = (0x15B3, 0x1021), (0x8086, 0x1572)  # ConnectX-7; an Intel management port


def test_a_named_connectx7_gives_the_net_peak_said_as_assumed(tmp_path: Path) -> None:
    folder = tmp_path / "iteration_1"
    for host, ranks in (("node-a", (0, 1)), ("node-b", (2, 3))):
        export = nsys_node(host, ranks)
        export.nics = [CX7, CX7, X710]
        export.write(folder / f"{host}.sqlite")
    found = analyse(folder, Options())
    assert found.links is not None
    inter = found.links.inter_node
    # NDR 400 Gb/s = 50 GB/s per direction; the AllReduce's 50 GB/s busbw is all of it
    assert inter.peak_Bps == 50e9
    assert inter.peak_source == "ConnectX-7 table value 400 Gb/s, one port per rank: assumed"
    assert inter.collectives["AllReduce"].peak_ratio == pytest.approx(1.0)
    assert found.windows[0].facts["0"].meta.nics == ["15b3:1021", "8086:1572"]
    given = analyse(folder, Options(net_peak_Bps=100e9))  # --net-peak wins
    assert given.links is not None
    assert (given.links.inter_node.peak_Bps, given.links.inter_node.peak_source) == (
        100e9,
        hosts.NET_PEAK_FLAG,
    )


def test_the_section_is_found_again_only_when_its_facts_or_options_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache, calls = WindowCache(), []

    def find(cross: CrossRank | None, *given: object) -> Links:
        calls.append(1)
        return Links(unknown_instances=len(calls))

    monkeypatch.setattr(hosts, "links", find)
    given: LinksGiven = (({}, {}), (1.0, "given"), (None, hosts.NO_NIC), None)
    changed: LinksGiven = (({}, {}), (2.0, "given"), (None, hosts.NO_NIC), None)
    cross = CrossRank(Matching(), Clocks(), skew.tally([]), Counter(), {})
    first = cache.links(cross, given)
    assert cache.links(cross, given) is first  # the very same facts, equal options
    assert cache.links(cross, changed).unknown_instances == 2  # an option changed
    other = CrossRank(Matching(), Clocks(), skew.tally([]), Counter(), {})
    assert cache.links(other, changed).unknown_instances == 3  # equal, not the same


# ---------------------------------------------------------------- per window, and merged shards


def test_each_window_has_its_own_section_and_the_run_pools_them(
    tmp_path: Path, report: Report
) -> None:
    for window in ("iteration_1", "iteration_2"):
        (tmp_path / window).mkdir()
        job(tmp_path / window, Options())
    found = analyse(tmp_path, Options(hosts=HOSTS, net_peak_Bps=100e9))
    assert found.links is not None and report.links is not None
    for window in found.windows:
        # each window holds the one-window job's instances: its section is that job's
        assert window.links is not None
        assert msgspec.to_builtins(window.links) == msgspec.to_builtins(report.links)
    # the run: every group's instances twice, the same points twice
    intra = found.links.intra_node.collectives["AllReduce"]
    assert (intra.instances, intra.bus_bytes) == (4, 24e6)
    assert intra.busbw_Bps == pytest.approx(150e9)
    inter = found.links.inter_node.collectives["AllReduce"]
    assert (inter.instances, inter.bus_bytes) == (6, 252e6)
    assert inter.fit is not None and inter.fit.beta_Bps == pytest.approx(BETA_BPS)


def test_the_live_build_gives_each_window_the_same_section(tmp_path: Path) -> None:
    for window in ("iteration_1", "iteration_2"):
        (tmp_path / window).mkdir()
        job(tmp_path / window, Options())
    options = Options(hosts=HOSTS)
    offline = analyse(tmp_path, options)
    parsed = [
        parse_file(w.name, path)
        for w in offline.windows
        for path in sorted((tmp_path / w.name).iterdir())
    ]
    names = [w.name for w in offline.windows]
    cache = WindowCache()
    cache.build(names, parsed, options)
    live = cache.build(names, parsed, options)  # the second build reuses the first's windows
    assert [w.links for w in live.windows] == [w.links for w in offline.windows]
    assert live.links == offline.links


def shard_reports(
    root: Path, shards: list[list[int]], groups: set[str] | None = None
) -> list[Report]:
    """`commscope report` on each shard's ranks (only the instances of `groups`, None: all),
    each report through its JSON as `commscope merge` reads it."""
    found = []
    for index, ranks in enumerate(shards):
        folder = root / f"shard{index}" / "iteration_1"
        folder.mkdir(parents=True)
        for rank in ranks:
            tail = {"baseTimeNanoseconds": BASE_NS}
            (folder / f"rank{rank}_trace.json").write_bytes(
                trace(events(rank, groups), head(rank), tail)
            )
        report = analyse(folder, Options(hosts=HOSTS, net_peak_Bps=100e9))
        found.append(msgspec.json.decode(msgspec.json.encode(report), type=Report))
    return found


def test_merged_shards_of_two_nodes_keep_the_node_groups_and_leave_the_world_out(
    tmp_path: Path, report: Report
) -> None:
    a, b = shard_reports(tmp_path, [[0, 1], [2, 3]])
    merged = combine([("a.json", a), ("b.json", b)]).links
    assert merged is not None and report.links is not None
    assert merged.hosts == report.links.hosts  # every shard's ranks
    assert merged.groups == {"1": hosts.INTRA, "2": hosts.INTRA}  # the world group: across
    assert merged.intra_node == report.links.intra_node  # 150 GB/s, exactly the one-process
    assert merged.inter_node.collectives == {}
    assert merged.inter_node.peak_source == hosts.NET_PEAK_FLAG


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(0, 2), min_size=4, max_size=4))
def test_a_merge_is_the_one_process_section_without_the_groups_across_shards(
    tmp_path_factory: pytest.TempPathFactory, owner: list[int]
) -> None:
    root = tmp_path_factory.mktemp("shards")
    shards = [[r for r in range(4) if owner[r] == s] for s in sorted(set(owner))]
    inside = {g for g, members in GROUPS.items() if len({owner[m] for m in members}) == 1}
    reports = shard_reports(root / "split", shards)
    merged = combine([(f"{i}.json", r) for i, r in enumerate(reports)]).links
    # the oracle: one process on every file, the groups across shards never run
    assert merged is not None
    if not inside:
        assert (merged.groups, merged.na_reason) == ({}, linkmerge.ACROSS)
        return
    (whole,) = shard_reports(root / "whole", [[0, 1, 2, 3]], inside)
    assert whole.links is not None
    # a rank of no group inside ran no collective in the oracle (its file is skipped): the
    # hosts are every shard's
    assert merged.hosts == {str(r): h for r, h in HOSTS.items()}
    plain = {"hosts": {}, "host_sources": {}, "na_reason": None}
    assert msgspec.structs.replace(merged, **plain) == msgspec.structs.replace(whole.links, **plain)
