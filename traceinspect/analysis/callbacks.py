"""Host callbacks inside jitted programs: when each ran, for how long, and what the device did.

``jax.debug.callback``, ``jax.debug.print``, ``jax.pure_callback`` and ``io_callback`` stop a
compiled program to run Python on the host. XLA names each one's custom call after jax's
primitive (:data:`~traceinspect.names.HOST_CALLBACK`: ``debug_callback.N``,
``debug_print.N``, ``pure_callback.N``, ``io_callback.N``), and that name is what a default
capture (Python tracer off) shows. What each layout writes (``docs/field-notes.md``):

- **GPU** (jax 0.11.2, H200, ``sample_traces/gpu/callback``): the callback runs on the thread
  that dispatched the program, inside the dispatch (``PjitFunction(f)`` >
  ``PjRtCApiLoadedExecutable::Execute`` > ``GpuExecutable::ExecuteThunks`` >
  ``jit_f:XLA GPU module`` > ``debug_callback.1``). Inside it, a host ``MemcpyD2H`` copies the
  callback's operands and waits for the device to reach the callback (the device is busy
  then), then the Python function runs while the GPU streams hold nothing: **the device is
  idle**, and the host cannot dispatch the next step until the callback has returned and the
  rest of the program is launched. On the device the only trace of it is the operand copy
  (``MemcpyD2H`` on the compute stream, stat ``hlo_op`` = ``debug_callback.1``). The
  ``py_xla_callback`` thread holds only allocator events.
- **CPU backend** (jax 0.10.2 and 0.12.0.1): the callback op (stats ``hlo_op``,
  ``hlo_module``, ``run_id``) runs inside the program's execution, on the training thread or
  on a ``tf_XLAEigen`` thread, while the program's other ops go on on the other threads.
  A program with a callback runs on the thread that dispatched it (no
  ``tf_XLAPjRtCpuClient`` / ``tf_XLAExecute`` line in the trace; without the callback the
  same loop has one): the host cannot run ahead of the device, and the callback's time is
  inside the execution's span, so the device reads busy.
- **TPU**: not seen in a trace (the public TPU trace has none). jax lowers a callback to
  sends and receives to the host; the device waits in them on its ``XLA Ops`` line
  (:data:`~traceinspect.names.HOST_TRANSFER_OP`, or ops named after the callback): such waits
  come back as :attr:`Callbacks.device_wait`.

The Python function's name is in the trace only with the Python tracer on, and only where
the callback ran on a traced thread (the training thread; not a ``tf_XLAEigen`` one): the
longest frame that jax's callback machinery called directly (``train.py:12 log_metrics``).
``jax.debug.print`` has none of its own (jax formats and prints).

How to use it (not wired into ``analyze`` yet): ``cb = host_callbacks(trace, steps)``, then

- **Device work.** :attr:`Callbacks.alone` is the callback time during which no device work
  ran. On the CPU backend, count the program's ops on the training thread (events with an
  ``hlo_op`` stat; today ``backends.activity`` leaves that thread out because it dispatches)
  as device work, never the ``ThunkExecutor::Execute`` envelope around them (it spans the
  callback), and subtract ``alone``: ``busy = busy.union(ops).difference(cb.alone)``. On a
  TPU subtract :attr:`Callbacks.device_wait` from the ``XLA Ops`` busy time. On a GPU the
  streams are already empty during the callback: nothing to subtract.
- **Idle time's cause.** Give idle instants inside :attr:`Callbacks.host` to a ``callback``
  cause ahead of ``host`` (the training thread is inside the dispatch: today such gaps read
  "host, PjitFunction(train_step)"), naming ``names[0]`` (and ``functions[0]`` when known).
  Like a blocking read (the sync rule), a callback keeps the host from preparing the next step
  while it runs: the rest of that idle period (the next batch, the arguments' transfer, the
  dispatch) is the callback's too, unless that host work is itself longer than the device's
  step. On the GPU capture the callback's own time is 6.5 ms of a 17.3 ms step and that rest
  ~2.8 ms; the step less both is the device's work (7.96 ms), the loop measured 8.86 ms a step
  without the callback (16.06 with it).
- **Its cost per step** is :attr:`Callbacks.ms_per_step` (the union of callback time in each
  step, averaged over the steps). On the CPU backend the device reads busy meanwhile (the
  program's other ops run beside it: ``alone`` is 2.3 of 7.5 ms a step), yet the step pays
  for it: the program cannot end before its callback returns, and the host cannot run
  ahead. The step less ``ms_per_step`` (22.4 - 7.5 = 14.9 ms) matched the loop without the
  callback (16.5 ms measured) within 10%; the step less ``alone`` did not (20.1 ms). So judge
  it by ``ms_per_step`` against the step time, not by the idle time.
- **Wording and fix.** "A host callback inside the jitted step (``jax.debug.callback``,
  ``debug_callback.1``) runs 6.5 ms of each 17.3 ms step; the device waits for it. Return the
  values from the step and log them from the loop (a step behind, or every N steps), or
  make the callback return at once (hand the values to a queue that a thread of your own
  drains)." Measured on an H200 (``sample_traces/habits/gpu_callbacks.json``, a 7.1 ms
  device step, a 6 ms logger): 14.7-15.0 ms a step as a callback, 15.2 ordered, 8.4 handing
  over to a queue, 7.4 logged by the loop a step behind. Unordered is no fix:
  ``ordered=False`` is ``jax.debug.callback``'s default. Expect the step after the fix at the
  device's work per step (on the CPU backend, the step less ``ms_per_step``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.steps import Steps
from traceinspect.backends.activity import DeviceActivity, device_activity
from traceinspect.backends.detect import detect_backend
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace

Layout = Literal["gpu", "cpu", "tpu", "none"]

_WHERE = {
    "gpu": "on the thread that dispatched the program, inside its execution; the device "
    "waits while the host runs it",
    "cpu": "inside the program's execution on host threads; the program runs on the thread "
    "that dispatched it, and the device reads busy",
    "tpu": "on the host while the device waits in its host transfers",
    "none": "no host callback in the trace",
}


@dataclass(frozen=True, eq=False)
class Callbacks:
    """The host callbacks of a trace, one entry per call, in order of start (ns)."""

    layout: Layout
    where: str  # where they were found, in words
    names: tuple[str, ...]  # the callbacks' op names, most time first (``debug_callback.1``)
    apis: tuple[str, ...]  # the jax API of each name (``jax.debug.callback``)
    #: Each name's Python function (``train.py:12 log_metrics``), "" where the trace does not
    #: hold it (Python tracer off).
    functions: tuple[str, ...]
    name_index: np.ndarray  # each call's index into ``names``
    line_rows: np.ndarray  # the host line each call ran on
    starts: np.ndarray  # the callback op's span on the host
    ends: np.ndarray
    #: When the host began running the callback: the start, or on a GPU the end of the
    #: operand copy (before it, the host waited for the device to reach the callback).
    host_starts: np.ndarray
    step_index: np.ndarray  # the step each call began in (-1: outside the steps)
    per_step_ns: np.ndarray  # callback time in each step (the union of ``host``)
    alone_per_step_ns: np.ndarray  # of it, the time no device work ran
    host: Intervals  # the union of ``[host_starts, ends)``
    alone: Intervals  # ``host`` less device work: when the device did nothing else
    device_wait: Intervals  # device ops waiting for the host's callback (TPU host transfers)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total_ns(self) -> int:
        return self.host.total

    @property
    def ms_per_step(self) -> float:
        """Callback time per step, over all the steps (0 without steps)."""
        n = len(self.per_step_ns)
        return float(self.per_step_ns.sum()) / n / 1e6 if n else 0.0

    @property
    def alone_ms_per_step(self) -> float:
        """Callback time per step during which the device did nothing else."""
        n = len(self.alone_per_step_ns)
        return float(self.alone_per_step_ns.sum()) / n / 1e6 if n else 0.0

    @property
    def steps_with_callback(self) -> float:
        """The share of steps in which a callback ran."""
        n = len(self.per_step_ns)
        return float((self.per_step_ns > 0).sum()) / n if n else 0.0

    @property
    def call_ms(self) -> float:
        """The median call's host time (ms)."""
        return float(np.median(self.ends - self.host_starts)) / 1e6 if len(self) else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "where": self.where,
            "calls": len(self),
            "names": list(self.names),
            "apis": list(self.apis),
            "functions": list(self.functions),
            "call_ms": self.call_ms,
            "ms_per_step": self.ms_per_step,
            "alone_ms_per_step": self.alone_ms_per_step,
            "steps_with_callback": self.steps_with_callback,
            "device_wait_ms": self.device_wait.total / 1e6,
        }


def _name_hits(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """One bool per name code: a callback's op, and a TPU host transfer."""
    n = len(names)
    callback = np.fromiter((N.HOST_CALLBACK.search(s) is not None for s in names), bool, n)
    transfer = np.fromiter((N.HOST_TRANSFER_OP.search(s) is not None for s in names), bool, n)
    return callback, transfer


def _first_inside(
    starts: np.ndarray, cb_starts: np.ndarray, cb_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each callback, the position in the sorted ``starts`` of the first event starting
    inside it, and whether there is one."""
    at = np.searchsorted(starts, cb_starts, side="left")
    found = at < len(starts)
    found[found] = starts[at[found]] < cb_ends[found]
    return np.minimum(at, max(len(starts) - 1, 0)), found


def _frame_label(name: str) -> str | None:
    """``file.py:line function`` of a Python-tracer frame, else None."""
    m = N.PYTHON_FRAME.match(name)
    if m is None:
        return None
    return f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')} {m.group('func')}"


def _labels_matching(labels: list[str | None], regex: re.Pattern[str]) -> np.ndarray:
    return np.array([label is not None and regex.search(label) is not None for label in labels])


def _called_by_jax(
    starts: np.ndarray, ends: np.ndarray, wrapper: np.ndarray, jax_own: np.ndarray
) -> int | None:
    """Of one callback's Python frames (in order of start), the longest that jax's callback
    machinery called directly: the user's function (not jax's conversion of its arguments,
    nor what the function itself calls)."""
    stack: list[int] = []
    best: int | None = None
    for k in range(len(starts)):
        while stack and ends[stack[-1]] <= starts[k]:
            stack.pop()
        called = bool(stack) and bool(wrapper[stack[-1]]) and not (wrapper[k] or jax_own[k])
        if called and (best is None or ends[k] - starts[k] > ends[best] - starts[best]):
            best = k
        stack.append(k)
    return best


def _on_line(
    trace: Trace, row: int, cb_starts: np.ndarray, cb_ends: np.ndarray
) -> tuple[np.ndarray, list[str | None]]:
    """The callbacks of one line: when the host began running each (after the first operand
    copy inside it, where there is one), and the user's Python function, where traced."""
    line = trace.line_events(row)
    host_starts = cb_starts.copy()
    copies = np.flatnonzero(line.name_mask(line.names_matching(N.CALLBACK_OPERAND_COPY)))
    if len(copies):
        at, found = _first_inside(line.starts[copies], cb_starts, cb_ends)
        copy_end = line.end_at(copies[at])
        host_starts[found] = np.clip(copy_end[found], cb_starts[found], cb_ends[found])
    labels: list[str | None] = [None] * len(cb_starts)
    label_of_code = [_frame_label(n) for n in line.names]
    is_frame = np.array([label is not None for label in label_of_code], dtype=bool)
    is_wrapper = _labels_matching(label_of_code, N.CALLBACK_WRAPPER_FRAME)
    is_jax_own = _labels_matching(label_of_code, N.CALLBACK_JAX_FRAME)
    frames = np.flatnonzero(line.name_mask(is_frame))
    if len(frames):
        frame_starts = line.starts[frames]
        frame_ends = line.end_at(frames)
        wrapper = is_wrapper[line.codes[frames]]
        jax_own = is_jax_own[line.codes[frames]]
        lo = np.searchsorted(frame_starts, cb_starts, side="left")
        hi = np.searchsorted(frame_starts, cb_ends, side="left")
        for k in np.flatnonzero(hi > lo).tolist():
            inside = slice(lo[k], hi[k])
            best = _called_by_jax(
                frame_starts[inside], frame_ends[inside], wrapper[inside], jax_own[inside]
            )
            if best is not None:
                labels[k] = label_of_code[int(line.codes[frames[lo[k] + best]])]
    return host_starts, labels


def _device_work(trace: Trace, not_work: np.ndarray, activity: DeviceActivity | None) -> Intervals:
    """Device work less the callbacks' own ops: on the CPU backend every XLA op (events with
    an ``hlo_op`` stat, wherever they ran), elsewhere the device's work lines."""
    c = trace.columns
    activity = activity if activity is not None else device_activity(trace)
    if activity.backend.kind == "cpu":
        ops = c.stat_rows(N.HLO_OP)["owner"]
        ops = ops[~not_work[c.events[S.NAME][ops]]]
        return Intervals.union_of(*c.spans(ops))
    starts, ends = [], []
    for row in activity.work_line_rows:
        line = trace.line_events(row)
        keep = ~line.name_mask(not_work)
        starts.append(line.starts[keep])
        ends.append(line.end_at(keep))
    if not starts:
        return Intervals.empty()
    return Intervals.union_of(np.concatenate(starts), np.concatenate(ends))


def _device_wait(trace: Trace, hit: np.ndarray) -> Intervals:
    """Device-plane events that are a callback's op or a host transfer (TPU)."""
    c = trace.columns
    on_device = np.array([p.startswith("/device:TPU") for p in c.plane_of_line()], dtype=bool)
    rows = np.flatnonzero(hit[c.events[S.NAME]] & on_device[c.events[S.LINE_ROW]])
    return Intervals.union_of(*c.spans(rows))


def host_callbacks(trace: Trace, steps: Steps, activity: DeviceActivity | None = None) -> Callbacks:
    """Every host callback of the trace, its time per step and the device's work meanwhile
    (``activity``: the trace's :func:`~traceinspect.backends.activity.device_activity`, made
    here when not given)."""
    c = trace.columns
    callback, transfer = _name_hits(c.event_names)
    on_host = np.array([p.startswith("/host:") for p in c.plane_of_line()], dtype=bool)
    codes, line_of = c.events[S.NAME], c.events[S.LINE_ROW]
    rows = np.flatnonzero(callback[codes] & on_host[line_of] & (c.events[S.DURATION_NS] > 0))
    starts, ends = c.spans(rows)
    order = np.argsort(starts, kind="stable")
    rows, starts, ends = rows[order], starts[order], ends[order]
    line_rows = line_of[rows].astype(np.int64)
    host_starts = starts.copy()
    labels: list[str | None] = [None] * len(rows)
    for row in np.unique(line_rows).tolist():
        mine = np.flatnonzero(line_rows == row)
        line_starts, line_labels = _on_line(trace, row, starts[mine], ends[mine])
        host_starts[mine] = line_starts
        for k, label in zip(mine.tolist(), line_labels, strict=True):
            labels[k] = label
    host = Intervals.union_of(host_starts, ends)
    device_wait = _device_wait(trace, callback | transfer)
    kind = activity.backend.kind if activity is not None else detect_backend(trace).kind
    layout: Layout = "none"
    if len(rows):
        layout = "gpu" if kind == "gpu" else "tpu" if kind == "tpu" else "cpu"
    elif len(device_wait):
        layout = "tpu"
    alone = host
    if len(rows):
        alone = host.difference(_device_work(trace, callback | transfer, activity))

    # Names, most time first, with their API and (Python tracer on) their function.
    op_names = [c.event_names[k] for k in codes[rows].tolist()]
    time_of: Counter[str] = Counter()
    for name, ns in zip(op_names, (ends - host_starts).tolist(), strict=True):
        time_of[name] += ns
    names = tuple(sorted(time_of, key=lambda n: (-time_of[n], n)))
    index = {name: k for k, name in enumerate(names)}
    name_index = np.array([index[n] for n in op_names], dtype=np.int64)
    apis = tuple(_api(name) for name in names)
    functions: list[str] = []
    for name, api in zip(names, apis, strict=True):
        found = Counter(
            label
            for n, label in zip(op_names, labels, strict=True)
            if n == name and label is not None
        )
        # jax.debug.print's function is jax's own formatting: the op's name says it all.
        own = api == N.CALLBACK_API["debug_print"]
        functions.append(found.most_common(1)[0][0] if found and not own else "")

    step_index = np.searchsorted(steps.starts, host_starts, side="right") - 1
    inside = step_index >= 0
    inside[inside] = host_starts[inside] < steps.ends[step_index[inside]]
    step_index[~inside] = -1
    return Callbacks(
        layout=layout,
        where=_WHERE[layout],
        names=names,
        apis=apis,
        functions=tuple(functions),
        name_index=name_index,
        line_rows=line_rows,
        starts=starts,
        ends=ends,
        host_starts=host_starts,
        step_index=step_index.astype(np.int64),
        per_step_ns=host.overlap_with(steps.starts, steps.ends),
        alone_per_step_ns=alone.overlap_with(steps.starts, steps.ends),
        host=host,
        alone=alone,
        device_wait=device_wait,
    )


def _api(name: str) -> str:
    m = N.HOST_CALLBACK.search(name)
    return N.CALLBACK_API[m.group("kind")] if m else "unknown"
