"""Facts about the machine and the libraries, for the report: CPUs and memory, versions, the
jax backend the script chose, and its place in a jax.distributed run."""

from __future__ import annotations

import contextlib
import os
import pathlib
import platform
import socket
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: the child runs by path)
    from traceinspect.sidecar import HostJSON


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
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
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def _host_info() -> HostJSON:
    affinity: list[int] | None = None
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            affinity = sorted(os.sched_getaffinity(0))
    mem = _meminfo()
    return {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpus_available": len(affinity) if affinity is not None else os.cpu_count(),
        "memory_total_bytes": mem.get("MemTotal"),
        "memory_available_bytes": mem.get("MemAvailable"),
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
