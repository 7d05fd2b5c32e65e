"""The memory the capture child records (capture/_child/facts.py): MemAvailable, bounded by the
process's cgroup limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, their ancestors'),
read from /proc-like and cgroup-like files built in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from traceinspect.capture._child.facts import CgroupMemory, _cgroup_memory, _memory_facts

MIB = 1 << 20
GIB = 1 << 30
V1_NO_LIMIT = 9223372036854771712  # what the kernel shows for an unlimited v1 cgroup


def _files(root: Path, files: dict[str, str | int]) -> None:
    for name, text in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{text}\n")


def _mount(point: str, fstype: str, options: str, mount_root: str = "/") -> str:
    """One /proc/self/mountinfo line."""
    return f"35 31 0:32 {mount_root} {point} rw,relatime - {fstype} {fstype} {options}"


def _proc(root: Path, cgroup: list[str], mounts: list[str], meminfo_kib: int = 0) -> str:
    _files(
        root,
        {
            "proc/self/cgroup": "\n".join(cgroup),
            "proc/self/mountinfo": "\n".join(
                [_mount("/proc", "proc", "rw"), *mounts]  # other mounts are skipped
            ),
            "proc/meminfo": f"MemTotal: 16777216 kB\nMemAvailable: {meminfo_kib} kB",
        },
    )
    return str(root / "proc")


def test_cgroup_v2_in_a_container(tmp_path: Path) -> None:
    # A container with its own cgroup namespace: its cgroup is the mount's root.
    proc = _proc(tmp_path, ["0::/"], [_mount("/sys/fs/cgroup", "cgroup2", "rw")])
    _files(
        tmp_path / "sys/fs/cgroup",
        {
            "memory.max": 2 * GIB,
            "memory.current": 600 * MIB,
            # Inactive page cache is reclaimed before an allocation fails: not a use.
            "memory.stat": f"anon {400 * MIB}\nfile {200 * MIB}\ninactive_file {100 * MIB}",
        },
    )
    assert _cgroup_memory(proc, str(tmp_path)) == CgroupMemory(
        2 * GIB, 2 * GIB - 500 * MIB, f"cgroup v2 {tmp_path}/sys/fs/cgroup/memory.max"
    )


def test_cgroup_v2_an_ancestors_limit_binds(tmp_path: Path) -> None:
    # Kubernetes: the pod's cgroup holds the limit, the container's own has none.
    proc = _proc(tmp_path, ["0::/kubepods/pod1/c1"], [_mount("/sys/fs/cgroup", "cgroup2", "rw")])
    cg = tmp_path / "sys/fs/cgroup"
    _files(
        cg,
        {
            "cgroup.controllers": "cpu memory",  # the root cgroup has no memory.max
            "kubepods/memory.max": "max",
            "kubepods/memory.current": 3 * GIB,
            "kubepods/pod1/memory.max": GIB,
            "kubepods/pod1/memory.current": 700 * MIB,
            "kubepods/pod1/c1/memory.max": "max",
            "kubepods/pod1/c1/memory.current": 650 * MIB,
        },
    )
    assert _cgroup_memory(proc, str(tmp_path)) == CgroupMemory(
        GIB, 324 * MIB, f"cgroup v2 {cg}/kubepods/pod1/memory.max"
    )
    # The tighter of two limits is the one with less left, not the smaller limit.
    _files(cg, {"kubepods/pod1/c1/memory.max": 900 * MIB})
    assert _cgroup_memory(proc, str(tmp_path)) == CgroupMemory(
        900 * MIB, 250 * MIB, f"cgroup v2 {cg}/kubepods/pod1/c1/memory.max"
    )


def test_cgroup_v1_docker(tmp_path: Path) -> None:
    # Docker on cgroup v1 without a cgroup namespace: /proc/self/cgroup names the container's
    # cgroup, which is also the root of the mount the container sees.
    proc = _proc(
        tmp_path,
        ["12:pids:/docker/abc", "4:memory:/docker/abc", "1:name=systemd:/docker/abc"],
        [
            _mount("/sys/fs/cgroup/pids", "cgroup", "rw,pids", "/docker/abc"),
            _mount("/sys/fs/cgroup/memory", "cgroup", "rw,memory", "/docker/abc"),
        ],
    )
    _files(
        tmp_path / "sys/fs/cgroup/memory",
        {
            "memory.limit_in_bytes": 2 * GIB,
            "memory.usage_in_bytes": GIB,
            "memory.stat": f"cache {300 * MIB}\ninactive_file 1\ntotal_inactive_file {256 * MIB}",
        },
    )
    assert _cgroup_memory(proc, str(tmp_path)) == CgroupMemory(
        2 * GIB,
        GIB + 256 * MIB,
        f"cgroup v1 {tmp_path}/sys/fs/cgroup/memory/memory.limit_in_bytes",
    )


def test_cgroup_v1_beside_a_cgroup2_mount_without_memory(tmp_path: Path) -> None:
    # A hybrid host (this project's test machine): cgroup2 is mounted, but the memory
    # controller is v1's; the process's cgroup is a child of the host's hierarchy.
    proc = _proc(
        tmp_path,
        ["4:memory:/jobs/run 1", "0::/"],
        [
            _mount("/sys/fs/cgroup/memory", "cgroup", "rw,memory"),
            _mount("/sys/fs/cgroup/unified", "cgroup2", "rw"),
        ],
    )
    _files(
        tmp_path / "sys/fs/cgroup",
        {
            "unified/cgroup.procs": 1,
            "memory/memory.limit_in_bytes": V1_NO_LIMIT,
            "memory/memory.usage_in_bytes": 5 * GIB,
            "memory/jobs/memory.limit_in_bytes": V1_NO_LIMIT,
            "memory/jobs/memory.usage_in_bytes": GIB,
            "memory/jobs/run 1/memory.limit_in_bytes": 1536 * MIB,
            "memory/jobs/run 1/memory.usage_in_bytes": 36 * MIB,
        },
    )
    found = _cgroup_memory(proc, str(tmp_path))
    assert found == CgroupMemory(
        1536 * MIB,
        1500 * MIB,
        f"cgroup v1 {tmp_path}/sys/fs/cgroup/memory/jobs/run 1/memory.limit_in_bytes",
    )


def test_mountinfo_paths_are_unescaped(tmp_path: Path) -> None:
    proc = _proc(tmp_path, ["0::/a b"], [_mount("/sys/fs/my\\040cgroup", "cgroup2", "rw")])
    _files(tmp_path / "sys/fs/my cgroup/a b", {"memory.max": GIB, "memory.current": 0})
    found = _cgroup_memory(proc, str(tmp_path))
    assert found is not None and found.available_bytes == GIB


def test_no_limit_no_cgroup_or_nothing_readable(tmp_path: Path) -> None:
    proc = _proc(tmp_path, ["4:memory:/"], [_mount("/sys/fs/cgroup/memory", "cgroup", "memory")])
    _files(
        tmp_path / "sys/fs/cgroup/memory",
        {"memory.limit_in_bytes": V1_NO_LIMIT, "memory.usage_in_bytes": GIB},
    )
    assert _cgroup_memory(proc, str(tmp_path)) is None
    # The v2 root cgroup has no memory.max; a cgroup directory that is not there.
    other = tmp_path / "v2"
    proc = _proc(other, ["0::/"], [_mount("/sys/fs/cgroup", "cgroup2", "rw")])
    _files(other / "sys/fs/cgroup", {"cgroup.controllers": "memory"})
    assert _cgroup_memory(proc, str(other)) is None
    proc = _proc(other, ["0::/gone"], [_mount("/sys/fs/cgroup", "cgroup2", "rw")])
    assert _cgroup_memory(proc, str(other)) is None
    assert _cgroup_memory(str(tmp_path / "nowhere"), str(tmp_path)) is None


def test_the_smaller_of_meminfo_and_the_cgroup(tmp_path: Path) -> None:
    proc = _proc(
        tmp_path, ["0::/job"], [_mount("/sys/fs/cgroup", "cgroup2", "rw")], meminfo_kib=8 << 20
    )
    cg = tmp_path / "sys/fs/cgroup/job"
    _files(cg, {"memory.max": 2 * GIB, "memory.current": 0})
    facts = _memory_facts(proc, str(tmp_path))
    assert facts == (16 * GIB, 2 * GIB, 2 * GIB, f"cgroup v2 {cg}/memory.max")
    # The host has less left than the container's limit allows: the host's figure, and the
    # limit still recorded.
    _files(tmp_path, {"proc/meminfo": "MemTotal: 16777216 kB\nMemAvailable: 1048576 kB"})
    assert _memory_facts(proc, str(tmp_path)).available_bytes == GIB
    assert _memory_facts(proc, str(tmp_path)).limit_bytes == 2 * GIB
    # A limit at or above the host's memory is no limit.
    _files(cg, {"memory.max": 32 * GIB})
    assert _memory_facts(proc, str(tmp_path)) == (16 * GIB, GIB, None, None)
