"""Which backend produced a trace: TPU and GPU device planes, or XLA CPU host threads."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.trace import Trace

BackendKind = Literal["tpu", "gpu", "cpu", "unknown"]

_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
# Threads on which XLA's CPU client runs compiled programs (jaxlib >= 0.4.30 names).
# Small programs run synchronously on the thread that calls them: only the execute call shows.


@dataclass(frozen=True)
class BackendInfo:
    """The backend of a trace and the devices (or CPU lines) that show its activity."""

    kind: BackendKind
    devices: tuple[str, ...]
    evidence: str
    # CPU backend whose programs ran inline on the calling thread (no XLA threads).
    inline: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def detect_backend(trace: Trace) -> BackendInfo:
    """Accelerator planes with events win; otherwise XLA CPU executions on host threads."""
    c = trace.columns
    plane_names = [c.plane_names[k] for k in c.planes[S.PLANE].tolist()]
    events_per_plane = np.bincount(
        c.lines[S.PLANE_ROW], weights=c.lines[S.EVENT_COUNT], minlength=len(plane_names)
    )
    found: dict[str, list[str]] = {"TPU": [], "GPU": []}
    for name, events in zip(plane_names, events_per_plane.tolist(), strict=True):
        m = _DEVICE_PLANE.match(name)
        if m and events > 0:
            found[m.group(1)].append(name)
    for kind in ("TPU", "GPU"):
        devices = sorted(set(found[kind]), key=lambda n: int(n.rsplit(":", 1)[1]))
        if devices:
            n_planes = sum(1 for n in plane_names if _DEVICE_PLANE.match(n))
            return BackendInfo(
                kind="tpu" if kind == "TPU" else "gpu",
                devices=tuple(devices),
                evidence=f"{len(devices)} of {n_planes} /device:{kind}:N planes hold events",
            )
    xla_cpu = xla_cpu_line_rows(trace)
    if len(xla_cpu):
        return BackendInfo(
            kind="cpu",
            devices=("cpu",),
            evidence=f"no device planes; XLA CPU executions on {len(xla_cpu)} host threads",
        )
    if any(N.INLINE_EXECUTE.match(n) for n in c.event_names):
        return BackendInfo(
            kind="cpu",
            devices=("cpu",),
            evidence="no device planes; XLA CPU programs ran inline on the calling thread",
            inline=True,
        )
    return BackendInfo(
        kind="unknown",
        devices=(),
        evidence="no /device:TPU or /device:GPU plane with events and no XLA CPU threads",
    )


def xla_cpu_line_rows(trace: Trace) -> np.ndarray:
    """The host lines (with events) on which XLA's CPU client runs compiled programs.

    By name (:data:`~traceinspect.names.XLA_CPU_LINE`: each jaxlib names these threads its
    own way), and by content, so that the next renaming does not turn the device's work into
    idle time: a host thread whose events carry ``hlo_module`` stats (a program's ops) and
    that dispatches no jitted call (not the Python thread, where tiny programs run inline).
    """
    c = trace.columns
    n_lines = len(c.lines[S.LINE])
    on_host = np.array([p.startswith("/host:") for p in c.plane_of_line()], dtype=bool)
    has_events = c.lines[S.EVENT_COUNT] > 0
    named = np.array([N.XLA_CPU_LINE.match(n) is not None for n in c.line_name()], dtype=bool)
    op_rows = c.stat_rows(N.HLO_MODULE)["owner"]
    if len(op_rows):
        line_of_event = c.events[S.LINE_ROW]
        runs_ops = np.bincount(line_of_event[op_rows], minlength=n_lines) > 0
        candidates = np.flatnonzero(runs_ops & ~named & on_host & has_events)
        for row in candidates.tolist():
            codes = np.flatnonzero(np.bincount(trace.line_events(row).codes))
            if not any(N.PJIT.match(c.event_names[k]) for k in codes.tolist()):
                named[row] = True
    return np.flatnonzero(named & on_host & has_events)
