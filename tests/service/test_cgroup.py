"""The default `--jobs` follows a cgroup CPU quota: v1 and v2 files written by hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from commscope.service import cgroup, parallel
from hypothesis import given
from hypothesis import strategies as st

POD = "/libpod_parent/libpod-0bfb"
# What podman 4.3 (runc, cgroup v1 hybrid) shows a container started with --cpus=1.5.
V1_CONTAINER_MOUNTINFO = f"""\
90 78 0:50 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
91 90 0:29 {POD} /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
92 90 0:30 {POD} /sys/fs/cgroup/cpuacct ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpuacct
94 90 0:32 {POD} /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
"""
V1_CONTAINER_CGROUP = f"""\
9:name=systemd:{POD}
4:memory:{POD}
2:cpuacct:{POD}
1:cpu:{POD}
0::/
"""
# A host on cgroup v1 hybrid: cpu,cpuacct co-mounted, an empty unified hierarchy beside it.
V1_HOST_MOUNTINFO = """\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_HOST_CGROUP = "3:cpu,cpuacct:/kubepods/pod1/ctr\n0::/\n"
# A Kubernetes node on cgroup v2 with a private cgroup namespace would show root "/"; this
# one without a namespace shows the pod's path under the host's root.
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CGROUP = "0::/kubepods.slice/pod1.slice/ctr.scope\n"


def reader(files: dict[str, str]) -> cgroup.Read:
    return files.get


def test_v2_cpu_max_reads_quota_over_period() -> None:
    assert cgroup.v2_cpus("200000 100000\n") == 2.0
    assert cgroup.v2_cpus("150000 100000") == 1.5
    assert cgroup.v2_cpus("max 100000\n") is None
    assert cgroup.v2_cpus("") is None


def test_v1_quota_minus_one_is_no_limit() -> None:
    assert cgroup.v1_cpus("-1\n", "100000\n") is None
    assert cgroup.v1_cpus("50000\n", "100000\n") == 0.5
    assert cgroup.v1_cpus("50000", "0") is None


def test_usable_is_whole_cpus_at_least_one_within_affinity() -> None:
    assert cgroup.usable(96, 2.0) == 2
    assert cgroup.usable(96, 1.5) == 1
    assert cgroup.usable(96, 0.25) == 1
    assert cgroup.usable(2, 8.0) == 2
    assert cgroup.usable(96, None) == 96
    assert cgroup.usable(0, None) == 1


@given(st.integers(1, 512), st.floats(0.01, 1024.0) | st.none())
def test_usable_never_exceeds_affinity_nor_the_quota_rounded_up(
    affinity: int, cpus: float | None
) -> None:
    workers = cgroup.usable(affinity, cpus)
    assert 1 <= workers <= affinity
    if cpus is not None:
        assert workers <= max(1, cpus)


def test_memberships_split_v1_controllers_and_keep_v2_under_empty() -> None:
    assert cgroup.memberships(V1_HOST_CGROUP) == {
        "cpu": "/kubepods/pod1/ctr",
        "cpuacct": "/kubepods/pod1/ctr",
        "": "/",
    }


def test_mounts_keep_cgroup2_and_v1_cpu_only() -> None:
    assert cgroup.mounts(V1_CONTAINER_MOUNTINFO) == [
        cgroup.Mount(POD, "/sys/fs/cgroup/cpu", v2=False)
    ]
    assert cgroup.mounts(V1_HOST_MOUNTINFO) == [
        cgroup.Mount("/", "/sys/fs/cgroup/cpu,cpuacct", v2=False),
        cgroup.Mount("/", "/sys/fs/cgroup/unified", v2=True),
    ]


def test_mount_point_with_a_space_is_unescaped() -> None:
    line = r"5 1 0:9 / /mnt/cg\040v2 rw - cgroup2 cgroup2 rw" + "\n"
    assert cgroup.mounts(line) == [cgroup.Mount("/", "/mnt/cg v2", v2=True)]


def test_folders_walk_up_to_the_mount_point() -> None:
    mount = cgroup.Mount("/", "/sys/fs/cgroup", v2=True)
    assert cgroup.folders(mount, "/a/b") == [
        "/sys/fs/cgroup/a/b",
        "/sys/fs/cgroup/a",
        "/sys/fs/cgroup",
    ]
    assert cgroup.folders(mount, "/") == ["/sys/fs/cgroup"]


def test_folders_of_a_container_whose_mount_is_its_own_cgroup() -> None:
    mount = cgroup.Mount(POD, "/sys/fs/cgroup/cpu", v2=False)
    assert cgroup.folders(mount, POD) == ["/sys/fs/cgroup/cpu"]
    assert cgroup.folders(mount, "/elsewhere") == []
    assert cgroup.folders(mount, POD + "x") == []
    assert cgroup.folders(mount, None) == []


def test_v1_container_quota_at_the_mount_root() -> None:
    files = {
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "150000\n",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
    }
    assert cgroup.quota(V1_CONTAINER_CGROUP, V1_CONTAINER_MOUNTINFO, reader(files)) == 1.5


def test_v1_host_takes_the_smallest_quota_of_the_cgroup_and_its_ancestors() -> None:
    base = "/sys/fs/cgroup/cpu,cpuacct"
    files = {
        f"{base}/kubepods/pod1/ctr/cpu.cfs_quota_us": "-1\n",
        f"{base}/kubepods/pod1/ctr/cpu.cfs_period_us": "100000\n",
        f"{base}/kubepods/pod1/cpu.cfs_quota_us": "300000\n",
        f"{base}/kubepods/pod1/cpu.cfs_period_us": "100000\n",
        f"{base}/kubepods/cpu.cfs_quota_us": "6400000\n",
        f"{base}/kubepods/cpu.cfs_period_us": "100000\n",
        f"{base}/cpu.cfs_quota_us": "-1\n",
        f"{base}/cpu.cfs_period_us": "100000\n",
    }
    assert cgroup.quota(V1_HOST_CGROUP, V1_HOST_MOUNTINFO, reader(files)) == 3.0


def test_v2_quota_of_a_nested_scope() -> None:
    files = {
        "/sys/fs/cgroup/kubepods.slice/pod1.slice/ctr.scope/cpu.max": "max 100000\n",
        "/sys/fs/cgroup/kubepods.slice/pod1.slice/cpu.max": "250000 100000\n",
        "/sys/fs/cgroup/kubepods.slice/cpu.max": "max 100000\n",
    }
    assert cgroup.quota(V2_CGROUP, V2_MOUNTINFO, reader(files)) == 2.5


def test_no_quota_files_no_limit() -> None:
    assert cgroup.quota(V2_CGROUP, V2_MOUNTINFO, reader({})) is None
    assert cgroup.quota("", "", reader({})) is None


def affinity() -> int:
    return len(os.sched_getaffinity(0))


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_cores_reads_a_v1_container_quota_from_the_files(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "/proc/self/cgroup": V1_CONTAINER_CGROUP,
            "/proc/self/mountinfo": V1_CONTAINER_MOUNTINFO,
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n",
            "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        },
    )
    assert parallel.cores(tmp_path) == 1


def test_cores_reads_a_v2_quota_from_the_files(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "/proc/self/cgroup": V2_CGROUP,
            "/proc/self/mountinfo": V2_MOUNTINFO,
            "/sys/fs/cgroup/kubepods.slice/pod1.slice/ctr.scope/cpu.max": "100000 100000\n",
        },
    )
    assert parallel.cores(tmp_path) == 1


def test_cores_without_cgroup_files_is_the_affinity(tmp_path: Path) -> None:
    assert parallel.cores(tmp_path) == affinity()


@pytest.mark.parametrize("command", ["report", "collect"])
def test_jobs_help_says_the_default_follows_the_cpu_limit(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from commscope.service.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "CPU limit" in " ".join(capsys.readouterr().out.split())
