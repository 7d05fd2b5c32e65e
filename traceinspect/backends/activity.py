"""Where "the device is busy" comes from, per layout: GPU streams, TPU ops, XLA CPU threads.

- GPU (NVIDIA and AMD): the physical stream lines ``Stream #N(...)`` of each
  ``/device:GPU:N`` plane (kernels and memory copies). Derived lines (``TensorFlow Ops``,
  ``XLA Ops``, ``Steps``, name scopes) repeat the same time and are left out.
- TPU: the ``XLA Ops`` line of each ``/device:TPU:N`` plane; ``XLA Modules`` when a trace
  has no op line.
- CPU backend: no device plane. XLA runs compiled programs on host threads
  (``tf_XLAPjRtCpuClient/*`` and ``tf_XLAEigen/*`` with jaxlib 0.10, ``tf_XLAExecute/*``
  and ``tf_XLAEigen/*`` with 0.12; see ``detect.xla_cpu_line_rows``); their op and
  ``ThunkExecutor::Execute`` events are the "device" work (one execution is a
  ``ThunkExecutor::Execute`` and its ``(wait for completion)`` twin on the client thread,
  with ops on the Eigen threads).
  Thread-pool bookkeeping (``ThreadpoolListener::*``), the zero-length ``end: <op>``
  markers and ``H2D Dispatch`` transfers are not work. Programs small enough for XLA to
  run inline on the calling thread show only as that thread's execute calls, which are
  then the work.

Busy time per device is the union of its work events; idle time is the rest.

Collectives (all-reduce, all-gather, reduce-scatter, collective-permute, all-to-all, and
NCCL/RCCL kernels on GPUs) are kept apart as well: in a multi-host run a device that waits
for a slower host waits *inside* a collective, so its busy time hides that wait.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.backends.detect import BackendInfo, detect_backend, xla_cpu_line_rows
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace

_GPU_STREAM = re.compile(r"^Stream #\d+")
_TPU_OPS = "XLA Ops"
_TPU_MODULES = "XLA Modules"
# Not program work: thread-pool bookkeeping, zero-length op-end markers, and host-to-device
# transfers (sample_traces/scenarios/FINDINGS.md).
_CPU_NOT_WORK = re.compile(r"^(ThreadpoolListener::|end: |H2D Dispatch)")
# HLO collectives by op name (CPU: ``all-reduce.3``; TPU ``XLA Ops`` names are the HLO
# text, ``%all-reduce.1 = f32[...] all-reduce(...)``), and GPU collective kernels.
COLLECTIVE = re.compile(
    r"(?:^|[%\s])(?:all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all"
    r"|ragged-all-to-all|collective-broadcast)(?:-start|-done)?(?:[.\s=(]|$)"
    r"|(?i:nccl|rccl)"
)


@dataclass(frozen=True, eq=False)
class DeviceActivity:
    """Busy intervals per device, and their union (any device busy)."""

    backend: BackendInfo
    busy: dict[str, Intervals]
    work_lines: dict[str, tuple[int, ...]]  # device -> line rows whose events are work
    #: The part of each device's busy time spent in collectives (a subset of ``busy``).
    collectives: dict[str, Intervals] = field(default_factory=dict)

    @property
    def union(self) -> Intervals:
        return _union(self.busy.values())

    @property
    def work_line_rows(self) -> tuple[int, ...]:
        """Every device's work lines, sorted."""
        return tuple(sorted({int(r) for rows in self.work_lines.values() for r in rows}))

    @property
    def collective_union(self) -> Intervals:
        """Any device inside a collective."""
        return _union(self.collectives.values())


def _union(parts: Iterable[Intervals]) -> Intervals:
    out = Intervals.empty()
    for iv in parts:
        out = out.union(iv)
    return out


def _lines_for_device(trace: Trace, backend: BackendInfo) -> dict[str, list[int]]:
    c = trace.columns
    plane = np.array(c.plane_of_line(), dtype=object)
    name = np.array(c.line_name(), dtype=object)
    has_events = c.lines[S.EVENT_COUNT] > 0
    rows = np.arange(len(has_events))
    out: dict[str, list[int]] = {}
    if backend.kind == "gpu":
        stream = np.array([bool(_GPU_STREAM.match(n)) for n in name], dtype=bool)
        for device in backend.devices:
            keep = (plane == device) & has_events & stream
            out[device] = rows[keep].tolist()
    elif backend.kind == "tpu":
        for device in backend.devices:
            on_device = (plane == device) & has_events
            ops = on_device & (name == _TPU_OPS)
            out[device] = rows[ops if ops.any() else on_device & (name == _TPU_MODULES)].tolist()
    elif backend.kind == "cpu":
        out["cpu"] = xla_cpu_line_rows(trace).tolist()
        if not out["cpu"]:
            out["cpu"] = rows[has_events & (plane == "/host:CPU")].tolist()
    return {device: rows_ for device, rows_ in out.items() if rows_}


def device_activity(trace: Trace) -> DeviceActivity:
    """Busy intervals of every device of the trace's backend (empty for "unknown")."""
    backend = detect_backend(trace)
    names = trace.columns.event_names
    # Matched once per distinct name, then looked up per event of the work lines only.
    not_work: np.ndarray | None = None
    if backend.kind == "cpu":
        regex = N.INLINE_EXECUTE if backend.inline else _CPU_NOT_WORK
        hit = np.fromiter((regex.search(str(n)) is not None for n in names), bool, len(names))
        # Inline programs ran on the calling thread: only their execute calls are work.
        not_work = ~hit if backend.inline else hit
    collective = np.fromiter(
        (COLLECTIVE.search(str(n)) is not None for n in names), bool, len(names)
    )
    busy: dict[str, Intervals] = {}
    collectives: dict[str, Intervals] = {}
    work_lines: dict[str, tuple[int, ...]] = {}
    for device, rows in _lines_for_device(trace, backend).items():
        lines = [trace.line_events(row) for row in rows]
        starts = np.concatenate([line.starts for line in lines])
        ends = np.concatenate([line.ends for line in lines])
        codes = np.concatenate([line.codes for line in lines])
        work = ~not_work[codes] if not_work is not None else np.ones(len(codes), dtype=bool)
        busy[device] = Intervals.union_of(starts[work], ends[work])
        work &= collective[codes]
        collectives[device] = Intervals.union_of(starts[work], ends[work])
        work_lines[device] = tuple(rows)
    return DeviceActivity(
        backend=backend, busy=busy, work_lines=work_lines, collectives=collectives
    )
