"""Facts about the machine and the libraries, for the report: CPUs and memory, versions, the
jax backend the script chose, and its place in a jax.distributed run."""

from __future__ import annotations

import contextlib
import os
import pathlib
import platform
import socket
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: the child runs by path)
    from traceinspect.sidecar import HostJSON


def _meminfo(proc: str = "/proc") -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        text = pathlib.Path(proc, "meminfo").read_text(encoding="ascii")
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def _machine_busy_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot, all cores (/proc/stat)."""
    try:
        with pathlib.Path("/proc/stat").open(encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    idle = sum(fields[3:5])  # idle, iowait
    return (sum(fields[:8]) - idle) / ticks  # guest time is counted in user already


def _tree_cpu_s(root: int) -> float | None:
    """CPU seconds used so far by process ``root`` and every live descendant (Grain workers,
    a forkserver, the script's own pools), from /proc/<pid>/stat."""
    split = tree_cpu_split_s(root)
    return None if split is None else split[0] + split[1]


def tree_cpu_split_s(root: int) -> tuple[float, float] | None:
    """CPU seconds used so far by process ``root`` itself, and by its live descendants
    together, from /proc/<pid>/stat; None where /proc or ``root`` is not there."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        entries = [p for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()]
    except (OSError, ValueError, AttributeError):
        return None
    for entry in entries:
        try:
            text = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # ended meanwhile
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        fields = text[text.rfind(")") + 2 :].split()
        with contextlib.suppress(ValueError, IndexError):
            pid = int(entry.name)
            parents[pid] = int(fields[1])
            cpu[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    if root not in cpu:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    below, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        below += cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return cpu[root], below


# A cgroup v1 limit this large is "no limit" (the kernel writes LONG_MAX rounded to a page).
_V1_UNLIMITED = 1 << 62


class CgroupMemory(NamedTuple):
    """The tightest memory limit of this process's cgroup and its ancestors (those visible
    under the cgroup mount), and what is left of it."""

    limit_bytes: int
    available_bytes: int
    source: str  # "cgroup v2 <path of memory.max>" or "cgroup v1 <path of memory.limit_in_bytes>"


def _cgroup_memory(proc: str = "/proc", root: str = "/") -> CgroupMemory | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, else v1
    ``memory.limit_in_bytes``), found through ``proc/self/cgroup`` and
    ``proc/self/mountinfo``; the mount points there are read under ``root``. None when no
    limit is set or nothing can be read.

    What is left counts a level's usage less its inactive page cache (``inactive_file``),
    which the kernel reclaims before it fails an allocation, as MemAvailable and
    Kubernetes' working set do. Each ancestor up to the mount is a limit too: the smallest
    space left wins.
    """
    try:
        cgroups = pathlib.Path(proc, "self", "cgroup").read_text(encoding="utf-8")
        mountinfo = pathlib.Path(proc, "self", "mountinfo").read_text(encoding="utf-8")
    except OSError:
        return None
    v2_path: str | None = None
    v1_path: str | None = None
    for line in cgroups.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif "memory" in parts[1].split(","):
            v1_path = parts[2]
    v2_mounts: list[tuple[str, str]] = []
    v1_mounts: list[tuple[str, str]] = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, fs = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(fs) < 3:
            continue
        mount = (_unescape(fields[3]), _unescape(fields[4]))
        if fs[0] == "cgroup2":
            v2_mounts.append(mount)
        elif fs[0] == "cgroup" and "memory" in fs[2].split(","):
            v1_mounts.append(mount)
    # The memory controller is in one hierarchy only: v2 where its files exist (a hybrid
    # system mounts cgroup2 without it), else v1.
    for version, path, mounts in ((2, v2_path, v2_mounts), (1, v1_path, v1_mounts)):
        if path is None:
            continue
        for mount_root, mount_point in mounts:
            top = pathlib.Path(root, mount_point.lstrip("/"))
            found = _cgroup_limit(version, _cgroup_dir(top, mount_root, path), top)
            if found is not None:
                return found if found.limit_bytes else None
    return None


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _cgroup_dir(top: pathlib.Path, mount_root: str, path: str) -> pathlib.Path:
    """The directory of cgroup ``path`` (as /proc/self/cgroup gives it) under a mount of the
    hierarchy's ``mount_root`` at ``top``."""
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root) :]
    elif mount_root != "/":
        # Another namespace's view (a container's own cgroup mounted at its root): the
        # process's cgroup is the mount itself.
        path = ""
    return top / path.lstrip("/") if path.strip("/") else top


def _cgroup_limit(version: int, where: pathlib.Path, top: pathlib.Path) -> CgroupMemory | None:
    """The tightest limit from ``where`` up to its mount ``top``; None when ``where`` is no
    cgroup of this version's memory controller, a limit of 0 bytes when none is set."""
    names = (
        ("memory.max", "memory.current", "inactive_file")
        if version == 2
        else ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    )
    if not (where / names[0]).is_file():
        return None
    best: CgroupMemory | None = None
    level = where
    while (level / names[0]).is_file():
        limit = _read_limit(level / names[0])
        if limit is not None and limit < _V1_UNLIMITED:
            usage = _read_limit(level / names[1]) or 0
            usage -= _memory_stat(level / "memory.stat", names[2])
            left = min(limit, max(0, limit - usage))
            if best is None or left < best.available_bytes:
                best = CgroupMemory(limit, left, f"cgroup v{version} {level / names[0]}")
        if level in (top, level.parent):
            break
        level = level.parent
    return best or CgroupMemory(0, 0, "")


def _read_limit(path: pathlib.Path) -> int | None:
    """An integer file of the memory controller; None for "max" (no limit) or unreadable."""
    try:
        text = path.read_text(encoding="ascii").strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _memory_stat(path: pathlib.Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


class MemoryFacts(NamedTuple):
    total_bytes: int | None
    available_bytes: int | None
    limit_bytes: int | None
    limit_source: str | None


def _memory_facts(proc: str = "/proc", root: str = "/") -> MemoryFacts:
    """The memory this process may still use: the smaller of the host's MemAvailable and
    what is left under its cgroup's limit (a container's: Docker, Kubernetes), and that
    limit when it is below the host's memory."""
    mem = _meminfo(proc)
    total, available = mem.get("MemTotal"), mem.get("MemAvailable")
    cgroup = _cgroup_memory(proc, root)
    if cgroup is None or (total is not None and cgroup.limit_bytes >= total):
        return MemoryFacts(total, available, None, None)
    if available is None or cgroup.available_bytes < available:
        available = cgroup.available_bytes
    return MemoryFacts(total, available, cgroup.limit_bytes, cgroup.source)


def _host_info(memory: MemoryFacts | None = None) -> HostJSON:
    """The host's facts; ``memory`` as read earlier (the capture reads it when the script
    starts), else now."""
    affinity: list[int] | None = None
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            affinity = sorted(os.sched_getaffinity(0))
    mem = memory if memory is not None else _memory_facts()
    return {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpus_available": len(affinity) if affinity is not None else os.cpu_count(),
        "memory_total_bytes": mem.total_bytes,
        "memory_available_bytes": mem.available_bytes,
        "memory_limit_bytes": mem.limit_bytes,
        "memory_limit_source": mem.limit_source,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("jax", "jaxlib", "grain"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _backend_info() -> dict[str, Any] | None:
    # Only when the script imported jax itself: we never initialise a backend on our own.
    jax = sys.modules.get("jax")
    if jax is None or not hasattr(jax, "devices"):
        return None
    try:
        devices = jax.devices()
        return {
            "platform": jax.default_backend(),
            "device_count": len(devices),
            "process_count": jax.process_count(),
            "devices": [
                {
                    "id": d.id,
                    "platform": d.platform,
                    "kind": getattr(d, "device_kind", None),
                    "process_index": d.process_index,
                }
                for d in devices
            ],
        }
    except Exception as exc:
        return {"error": str(exc)}


_NOT_DISTRIBUTED: dict[str, int | None] = {"process_index": None, "process_count": None}


def _distributed_info() -> dict[str, int] | None:
    """This process's index and the process count, if the script called jax.distributed."""
    jax = sys.modules.get("jax")
    is_initialized = getattr(getattr(jax, "distributed", None), "is_initialized", None)
    if jax is None or is_initialized is None:
        return None
    try:
        if not is_initialized():
            return None
        return {
            "process_index": int(jax.process_index()),
            "process_count": int(jax.process_count()),
        }
    except Exception:
        return None
