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
    planes = trace.planes
    active = planes[planes[S.EVENT_COUNT] > 0]
    found: dict[str, list[str]] = {"TPU": [], "GPU": []}
    for name in active[S.PLANE].astype(str):
        m = _DEVICE_PLANE.match(name)
        if m:
            found[m.group(1)].append(name)
    for kind in ("TPU", "GPU"):
        devices = sorted(set(found[kind]), key=lambda n: int(n.rsplit(":", 1)[1]))
        if devices:
            n_planes = len(planes[planes[S.PLANE].astype(str).str.match(_DEVICE_PLANE.pattern)])
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
    names = trace.events[S.NAME].cat.categories
    if any(N.INLINE_EXECUTE.match(str(n)) for n in names):
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
    lines = trace.lines
    on_host = lines[S.PLANE].astype(str).str.startswith("/host:").to_numpy()
    has_events = lines[S.EVENT_COUNT].to_numpy() > 0
    named = np.fromiter(
        (N.XLA_CPU_LINE.match(str(n)) is not None for n in lines[S.LINE]), bool, len(lines)
    )
    stats = trace.event_stats
    if len(stats) and N.HLO_MODULE in stats[S.STAT].cat.categories:
        op_rows = stats.loc[stats[S.STAT] == N.HLO_MODULE, S.EVENT_ROW].to_numpy()
        line_of_event = trace.events[S.LINE_ROW].to_numpy()
        runs_ops = np.zeros(len(lines), dtype=bool)
        runs_ops[np.unique(line_of_event[op_rows])] = True
        candidates = np.flatnonzero(runs_ops & ~named & on_host & has_events)
        for row in candidates.tolist():
            codes = np.unique(trace.line_events(row).codes)
            names = trace.events[S.NAME].cat.categories[codes]
            if not any(N.PJIT.match(str(n)) for n in names):
                named[row] = True
    return lines.index.to_numpy()[named & on_host & has_events]
