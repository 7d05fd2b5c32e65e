"""Device work per step: each step's share found from the executions it dispatched.

When the host runs ahead of the device (asynchronous dispatch; the CPU client queues ~32
steps), the device work that falls between two host step annotations belongs to earlier
steps. So each step's device work is the work of the programs *it* launched:

- Executions: device work events carrying a ``run_id`` stat (one id per execution), grouped
  by id, named by their ``hlo_module`` stat (``jit_train_step``). On the CPU backend every op
  carries both, and the client's wait for the execution to complete carries the id; an
  execution's work is the union of those events' time: its span.
- Dispatches: the training thread's outermost ``PjitFunction(<fn>)`` events, in order.
- Link: the executions of ``jit_<fn>`` run in dispatch order (one device, one queue), so the
  k-th dispatch of ``fn`` ran as the (k + q)-th execution of ``jit_<fn>`` in the trace (in
  order of their start; run ids count up only within one compiled executable), where
  q counts the executions still queued from before the trace began. q is the smallest offset
  that no execution starts before its dispatch: exact as soon as the device went idle once in
  the trace (the execution after an idle period starts right after its dispatch), and
  harmless otherwise (a device that never idles runs the same program back to back).

Layouts without per-execution ids (GPU kernels here, traces without ``hlo_module``) are not
linked, nor are programs with more dispatches than executions in the trace beyond those
still in flight (:data:`_MAX_UNMATCHED`); the analysis then falls back to device busy time
inside each step's host window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import lookup, members
from traceinspect.analysis.steps import Steps, nested_spans
from traceinspect.analysis.training_thread import ThreadEvents, thread_events
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace

# The offsets tried: the CPU client keeps about 32 executions in flight.
_MAX_OFFSET = 4096
# Dispatches that may lack their execution in the trace: those still in flight when the trace
# stopped (about 32 on the CPU client), with a margin. More than that and the program's
# executions are not all device work events (tiny programs run inline on the calling thread,
# seen on an op-by-op loop: half of 17,904 calls had no ops): no one-to-one link.
_MAX_UNMATCHED = 64
# A function's calls left without an execution may exceed those queued when the trace began
# by this many steps' worth of calls and its links still be kept (chosen, not measured).
_LINK_SLACK_STEPS = 2
# One running maximum serves every group while the groups, lifted one above the other, fit
# in half of int64's range (room to spare for the sums).
_LIFT_LIMIT = np.iinfo(np.int64).max // 2


@dataclass(frozen=True, eq=False)
class StepWork:
    """Device work each step dispatched (ns; NaN where its executions are not in the trace)."""

    work_ns: np.ndarray
    queued: int  # steps whose programs were in flight when the trace began
    #: The step program's linked executions (the jitted function with the most device work),
    #: in order: the end of each one's dispatch on the training thread (the start of the trace
    #: for those dispatched before it), and its start and end on the device.
    dispatched_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    exec_start_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    exec_end_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @property
    def waiting(self) -> Intervals:
        """When the device had a program waiting: from each dispatch's end to its execution's
        start. Idle time then is the runtime's (launch, scheduling), not the host's."""
        lo, hi = self.dispatched_ns, self.exec_start_ns
        return Intervals.union_of(lo[lo < hi], hi[lo < hi])

    @property
    def linked(self) -> int:
        """Steps whose device work was found."""
        return int(np.isfinite(self.work_ns).sum())


@dataclass(frozen=True, eq=False)
class _Executions:
    """One entry per execution on the device work lines, in order of start."""

    module: np.ndarray  # the program's name (object array of str)
    start_ns: np.ndarray
    end_ns: np.ndarray
    work_ns: np.ndarray  # the union of its events' time

    def of(self, module: str) -> _Executions:
        keep = self.module == module
        return _Executions(
            self.module[keep], self.start_ns[keep], self.end_ns[keep], self.work_ns[keep]
        )

    def __len__(self) -> int:
        return len(self.start_ns)


def _executions(trace: Trace, work_rows: np.ndarray) -> _Executions | None:
    """Every execution on the device work lines: its program, start, end and work."""
    c = trace.columns
    ids = c.stat_rows(N.RUN_ID)
    if len(ids["owner"]) == 0:
        return None
    ev = c.events
    on_work = members(ev[S.LINE_ROW][ids["owner"]], work_rows)
    id_rows, id_values = ids["owner"][on_work], ids[S.INT_VALUE][on_work]
    modules = c.stat_rows(N.HLO_MODULE)
    # Each id event's program, where the event names it (the first such stat).
    module_rows, first = np.unique(modules["owner"], return_index=True)
    module_codes = modules[S.STR_VALUE][first]
    at, named = lookup(module_rows, id_rows)
    if not named.any():
        return None
    named_ids, named_modules = id_values[named], module_codes[at[named]]
    # The events of an execution that name no program (the CPU client's ``ThunkExecutor::
    # Execute (wait for completion)``, which spans the whole execution: jaxlib 0.12 runs
    # parts of a program on threads it does not trace, seen as hundreds of ms without an op
    # inside one MaxText step) take the program of their run id's ops, where only one
    # program has that id.
    by_id = np.lexsort((named_modules, named_ids))
    ids_sorted, modules_sorted = named_ids[by_id], named_modules[by_id]
    new_pair = np.r_[
        True, (ids_sorted[1:] != ids_sorted[:-1]) | (modules_sorted[1:] != modules_sorted[:-1])
    ]
    id_of_pair, module_of_pair = ids_sorted[new_pair], modules_sorted[new_pair].astype(np.int64)
    distinct_ids, first_pair, programs = np.unique(
        id_of_pair, return_index=True, return_counts=True
    )
    single_ids = distinct_ids[programs == 1]
    single_modules = module_of_pair[first_pair[programs == 1]]
    unnamed_ids = id_values[~named]
    k, found = lookup(single_ids, unnamed_ids)
    rows = np.concatenate((id_rows[named], id_rows[~named][found]))
    run_ids = np.concatenate((named_ids, unnamed_ids[found]))
    module = np.concatenate((named_modules, single_modules[k[found]])).astype(np.int64)
    starts, ends = c.spans(rows)
    # Programs ordered by name, as the ids' programs are compared.
    used, module_at = np.unique(module, return_inverse=True)
    names = c.strings(used)
    by_name = np.empty(len(used), dtype=np.int64)
    by_name[np.argsort(names.astype(str), kind="stable")] = np.arange(len(used))
    module_rank = by_name[module_at]
    # Each execution's work is the union of its events' time (ops of one execution overlap
    # on several threads): per execution, sorted by start, an op opens a new merged span when
    # it starts after every earlier op of that execution has ended.
    order = np.lexsort((starts, module_rank, run_ids))
    run_ids, module_rank, starts, ends = (
        run_ids[order], module_rank[order], starts[order], ends[order]
    )  # fmt: skip
    first_of = np.r_[True, (run_ids[1:] != run_ids[:-1]) | (module_rank[1:] != module_rank[:-1])]
    keys = np.cumsum(first_of) - 1
    group_start = np.flatnonzero(first_of)
    reach = _cummax_per_group(ends, group_start)
    opens = first_of | (starts > np.r_[0, reach[:-1]])
    span_lo = np.minimum.reduceat(starts, np.flatnonzero(opens))
    span_hi = np.maximum.reduceat(ends, np.flatnonzero(opens))
    work = np.bincount(keys[opens], weights=span_hi - span_lo)
    exec_start = np.minimum.reduceat(starts, group_start)
    exec_end = np.maximum.reduceat(ends, group_start)
    rank_to_name = np.empty(len(used), dtype=object)
    rank_to_name[by_name] = names
    # In execution order: run ids count up for one executable but not across recompiled
    # ones (sample_traces/scenarios/recompiling), and one device runs its queue in order.
    in_order = np.argsort(exec_start, kind="stable")
    return _Executions(
        module=rank_to_name[module_rank[group_start]][in_order],
        start_ns=exec_start[in_order],
        end_ns=exec_end[in_order],
        work_ns=work.astype(np.int64)[in_order],
    )


def _cummax_per_group(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` within each group (groups are consecutive runs
    starting at ``group_start``)."""
    # Offset every group above all earlier ones, so one running maximum serves them all.
    if len(values) == 0:
        return values
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    group = np.zeros(len(values), dtype=np.int64)
    group[group_start[1:]] = 1
    group = np.cumsum(group)
    if span * (int(group[-1]) + 1) < _LIFT_LIMIT:
        lifted = (values - lo) + group * span
        return np.maximum.accumulate(lifted) - group * span + lo
    out = np.empty_like(values)
    bounds = np.r_[group_start, len(values)]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def _offset(dispatch_ns: np.ndarray, exec_start_ns: np.ndarray) -> int | None:
    """The smallest q >= 0 such that no execution k + q starts before dispatch k."""
    n, m = len(dispatch_ns), len(exec_start_ns)
    for q in range(min(m, _MAX_OFFSET) + 1):
        k = min(n, m - q)
        if k <= 0 or np.all(exec_start_ns[q : q + k] >= dispatch_ns[:k]):
            return q
    return None


def step_work(
    trace: Trace, steps: Steps, work_rows: np.ndarray, thread: ThreadEvents | None = None
) -> StepWork | None:
    """Each step's device work from the executions it dispatched, or None when the trace
    cannot link them (no execution ids, no dispatches on the training thread).
    ``thread``: the events of the steps' thread, when the caller has them already."""
    if steps.main_line_row is None or len(steps) == 0:
        return None
    execs = _executions(trace, work_rows)
    if execs is None:
        return None
    if thread is None or thread.line.line_row != steps.main_line_row:
        thread = thread_events(trace, steps.main_line_row)
    main = thread.line
    # The calls in order of start (the thread's arrays are), outermost only; each one's
    # jitted function from its name, matched once per name.
    positions = thread.named(N.PJIT, envelopes=True)
    if len(positions) == 0:
        return None
    fn_of_name = np.full(len(main.names), None, dtype=object)
    for code in set(main.codes[positions].tolist()):
        m = N.PJIT.match(str(main.names[code]))
        fn_of_name[code] = m.group("fn") if m else None
    call_starts, call_ends = main.starts[positions], main.end_at(positions)
    outer = ~nested_spans(call_starts, call_ends)
    call_starts, call_ends = call_starts[outer], call_ends[outer]
    fn = fn_of_name[main.codes[positions[outer]]]
    work = np.zeros(len(steps), dtype=float)
    found = False
    queued = 0
    # Per function: its total device work in the steps, and its linked executions.
    linked: list[tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray]]] = []
    step_of = np.searchsorted(steps.starts, call_starts, side="right") - 1
    inside = (step_of >= 0) & (call_starts < steps.ends[np.maximum(step_of, 0)])
    for name in dict.fromkeys(fn.tolist()):
        runs = execs.of(f"jit_{name}")
        if len(runs) == 0:
            continue
        where = fn == name
        t = call_starts[where]
        q = _offset(t, runs.start_ns)
        if q is None:
            continue
        if len(t) + q - len(runs) > _MAX_UNMATCHED:
            return None
        found = True
        calls = int(np.sum(inside[where]))
        # Calls a step: a function called 4 times a step with 4 calls queued is a step ahead.
        per_step = max(1, round(calls / len(steps)))
        if calls:
            queued = max(queued, -(-q // per_step))
        k = np.arange(len(t)) + q
        have = k < len(runs)
        # Dispatches left without an execution are those still queued when the trace stopped:
        # about as many as were queued when it began. More, and some executions are missing
        # from the device's lines (tiny programs run inline on the calling thread: the
        # op-by-op scenario's 40 calls of one function had 30), so the order links some
        # calls to later executions: not kept.
        # Each execution was dispatched when its call ended; those queued before the trace
        # began, before the trace's start.
        dispatched = np.concatenate((np.full(q, trace.start_ns), call_ends[where][have]))
        ran = np.concatenate((np.arange(q), k[have]))
        execs_ran = (runs.start_ns[ran], runs.end_ns[ran])
        per_call = np.where(have, runs.work_ns[np.minimum(k, len(runs) - 1)], np.nan)
        s = step_of[where]
        ok = inside[where]
        np.add.at(work, s[ok], per_call[ok])
        if len(t) + q - len(runs) <= q + _LINK_SLACK_STEPS * per_step:
            linked.append((float(np.nansum(per_call[ok])), (dispatched, *execs_ran)))
    if not found:
        return None
    # The step program's executions: the function with the most device work. Tiny programs
    # beside it (a learning-rate schedule, metrics) link less surely: they run in bursts and
    # partly inline, and one mislinked call would make an idle gap look like waiting work.
    empty = np.empty(0, np.int64)
    dispatched, starts, ends = max(linked, key=lambda x: x[0])[1] if linked else (empty,) * 3
    return StepWork(work, queued, dispatched, starts, ends)


def others_work_in(
    trace: Trace, work_rows: np.ndarray, spans: Intervals, step_program: str
) -> np.ndarray | None:
    """In each of ``spans`` (in order), the device work (ns) of executions that began there
    of programs other than ``step_program`` (the loop's step, ``jit_<fn>``); None where the
    trace has no execution ids (GPU kernels here). An evaluation's forward passes are real
    device work; the few element-wise programs of a metrics computation are not
    (``stall_kinds``)."""
    execs = _executions(trace, work_rows)
    if execs is None or len(execs) == 0:
        return None
    other = execs.module.astype(str) != step_program
    starts, work = execs.start_ns[other], execs.work_ns[other]
    out = np.zeros(len(spans), dtype=np.float64)
    for i, (a, b) in enumerate(zip(spans.starts.tolist(), spans.ends.tolist(), strict=True)):
        inside = (starts >= a) & (starts < b)
        out[i] = float(work[inside].sum())
    return out
