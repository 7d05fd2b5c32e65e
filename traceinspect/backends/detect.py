"""Which backend produced a trace: TPU and GPU device planes, or XLA CPU host threads."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

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
    lines = trace.lines
    xla_cpu = lines[
        (lines[S.EVENT_COUNT] > 0) & lines[S.LINE].astype(str).str.match(N.XLA_CPU_LINE.pattern)
    ]
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
