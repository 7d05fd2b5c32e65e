"""What a recurring stall is, from what happened during its occurrences.

Over the whole run (capture's ``run_events``, so a stall outside the traced window is named
too): Python's garbage collections long enough to matter, and the first batch of each new
Grain iterator (a loop that starts a new iterator every epoch starts Grain's worker processes
again each time). Inside the window: where the stack sampler found the training thread (a
network library: remote logging) and which other jitted programs ran (an evaluation).

An occurrence is matched to the run's events by time: from half a period before the step
whose completion came late (the host may run that far ahead of the device, and does its
work between steps there) to that completion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import most_common
from traceinspect.analysis.result import Table
from traceinspect.analysis.stalls import PERIOD_AGREEMENT, RecurringStall
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.training_thread import HostActivity, read_site_label
from traceinspect.intervals import Intervals
from traceinspect.sidecar import HostStep, RunEvents
from traceinspect.thresholds import (
    EVALUATION_HOST,
    EVALUATION_IDLE,
    EVALUATION_WORK,
    GC_STALL_SHARE,
    NETWORK_LOOKS,
    STALL_READ_EARLY_NS,
)
from traceinspect.vocabulary import CAUSES, PRECEDENCE

#: A recurring stall in which other jitted programs than the loop's step ran at least this
#: many times an occurrence is an evaluation (a checkpoint may call one to gather its
#: arrays; an evaluation runs one a batch): two (chosen, not measured).
EVALUATION_CALLS = 2

#: The modules (file names) of network libraries whose functions the sampler names beside
#: the user's line (``train.py:88 log (in socket readinto)``): the standard library's
#: socket, ssl, selectors, http.client and urllib.request, urllib3's, requests' and grpc's.
NETWORK_MODULES = frozenset(
    {
        "socket",
        "ssl",
        "selectors",
        "client",
        "request",
        "connection",
        "connectionpool",
        "response",
        "sessions",
        "adapters",
        "_channel",
    }
)


def occurrence_spans(stall: RecurringStall, steps: Sequence[HostStep]) -> list[tuple[int, int]]:
    """Each occurrence's time on the Unix clock (ns): from the start of the step half a
    period before the late one to the late step's completion; occurrences whose steps have
    no stamps are left out."""
    start = {s.index: s.start_unix_ns for s in steps if s.start_unix_ns}
    done = {s.index: s.done_unix_ns for s in steps if s.done_unix_ns}
    back = max(1, stall.period // 2)
    spans = []
    for i in stall.indices:
        lo = next((start[k] for k in range(i - back, i + 1) if k in start), None)
        if lo is not None and i in done and done[i] > lo:
            spans.append((lo, done[i]))
    return spans


def _most(hits: Sequence[bool]) -> bool:
    """Whether at least PERIOD_AGREEMENT of the occurrences (one entry each) show it."""
    return bool(hits) and sum(hits) >= PERIOD_AGREEMENT * len(hits)


def run_kind(
    stall: RecurringStall, steps: Sequence[HostStep], events: RunEvents | None
) -> str | None:
    """``epoch`` when the occurrences begin with a new iterator, ``gc`` when garbage
    collection took most of what they cost, else None (or without capture's events)."""
    if events is None:
        return None
    spans = occurrence_spans(stall, steps)
    iterators = np.asarray(events.iterator_start_unix_ns, dtype=np.int64)
    if len(iterators):
        restarts = [bool(np.any((iterators >= lo) & (iterators < hi))) for lo, hi in spans]
        if _most(restarts):
            return "epoch"
    gc_start = np.asarray(events.gc_start_unix_ns, dtype=np.int64)
    gc_ns = np.asarray(events.gc_ns, dtype=np.int64)
    if len(gc_start):
        took = [int(gc_ns[(gc_start >= lo) & (gc_start < hi)].sum()) for lo, hi in spans]
        if _most([t >= GC_STALL_SHARE * stall.cost_ns for t in took]):
            return "gc"
    return None


def network_share(sites: Sequence[tuple[str, int]]) -> float:
    """The share of the sampler's looks (``(site, looks)``) that were inside a network
    library."""
    total = sum(n for _, n in sites)
    if not total:
        return 0.0
    return sum(n for site, n in sites if _library_module(site) in NETWORK_MODULES) / total


def is_logging(sites: Sequence[tuple[str, int]]) -> bool:
    """Whether most looks inside the stall were in a network call (remote logging)."""
    return network_share(sites) >= NETWORK_LOOKS


def _library_module(site: str) -> str | None:
    """``socket`` of ``train.py:88 log (in socket readinto)``; None without a library."""
    _, found, inner = site.partition("(in ")
    return inner.split(" ", 1)[0] if found else None


@dataclass(frozen=True)
class StallNature:
    """What the stall is: from the run's events, and its occurrences inside the window."""

    #: ``epoch`` (a new iterator: Grain's workers start again), ``gc`` (garbage collection),
    #: ``logging`` (a network call on the training thread), ``evaluation`` (other jitted
    #: programs run, and read), ``checkpoint`` (a read of device values, then the loop's
    #: own work), ``host`` (the loop's own work), ``input``, ``compile``, ``sync`` (a read
    #: alone), or ``unseen`` (no occurrence in the window, and nothing in the run's events).
    kind: str
    #: Occurrences inside the analysed steps.
    in_window: int = 0
    read_site: str | None = None
    #: The loop's own code there: where it sits, and the sampled sites (most looks first).
    where: str | None = None
    sites: tuple[tuple[str, int], ...] = ()
    #: Other jitted functions the loop called in the stall step: (name, calls).
    programs: tuple[tuple[str, int], ...] = ()
    #: The loop's own code's time in an occurrence (in the window), as a share of its cost.
    host_share: float = 1.0
    #: Grain's worker processes, where the script set them (an epoch restart starts them).
    workers: int | None = None

    @property
    def device_busy(self) -> bool:
        """The loop's own code took less than most of the stall (EVALUATION_HOST): the
        device's programs (an evaluation's) the rest."""
        return self.host_share < EVALUATION_HOST

    def what(self) -> str:
        """The stall in a few words, for the summary and the advice."""
        site = f" at {self.sites[0][0]}" if self.sites else ""
        if self.kind == "epoch":
            workers = (
                f": Grain starts its {self.workers} worker process(es) again"
                if self.workers
                else ": Grain fills its buffers again"
            )
            return f"an epoch restart, a new iterator over the dataset{workers}"
        if self.kind == "gc":
            return f"garbage collection: Python's collector walking the heap{site}"
        if self.kind == "logging":
            return f"remote logging: a network call on the training thread{site}"
        if self.kind == "checkpoint":
            read = f"{self.read_site}, then" if self.read_site else "a read of device values, then"
            return f"a synchronous checkpoint: {read} the loop's own work{site}"
        if self.kind == "host":
            return f"the loop's own work{site}"
        if self.kind == "evaluation":
            calls = ", ".join(f"{n} call(s) of {name}" for name, n in self.programs[:2])
            scored = "" if self.device_busy else ", each result read and scored on the host"
            return f"evaluation: {calls}{scored}"
        if self.kind == "input":
            return "waiting for input (a file or shard switch, a slow record?)"
        if self.kind == "compile":
            return "recompilation"
        if self.kind == "sync":
            return f"a read of device values ({self.read_site or 'unknown site'})"
        return "not in the traced window: capture a window that holds one to see what it is"


def stall_nature(
    stall: RecurringStall,
    sidecar_steps: tuple[HostStep, ...],
    base_ns: int | None,
    steps: Steps,
    gaps: Table,
    host: HostActivity,
    events: RunEvents | None = None,
    workers: int | None = None,
    others_work: Callable[[Intervals, str], np.ndarray | None] | None = None,
) -> StallNature:
    """What the stall is: a kind the run's ``events`` show (an epoch restart, garbage
    collection), else what its occurrences inside the analysed steps show (``base_ns``: the
    trace's start on the Unix clock, to place capture's steps on the trace's time)."""
    from_run = run_kind(stall, sidecar_steps, events)
    chosen, spans = _window_steps(stall, sidecar_steps, base_ns, steps, gaps)
    if not chosen:
        return StallNature(from_run or "unseen", workers=workers)
    by_cause: dict[str, int] = dict.fromkeys(CAUSES, 0)
    read_site: str | None = None
    for k in chosen:
        mine = gaps[S.STEP_INDEX] == k
        for c in CAUSES:
            by_cause[c] += int(gaps[c][mine].sum())
        sites = [s for s in gaps[S.SYNC_SITE][mine].tolist() if s]
        read_site = read_site or (sites[0] if sites else None) or _read_before(gaps, mine, host)
    where, sampled, _ = _sampled(host, Intervals.union_of(steps.starts[chosen], steps.ends[chosen]))
    # The loop's own time over the host steps around each occurrence: an evaluation's
    # scoring may run in the step before the one the device idled in.
    _, _, own_ns = _sampled(host, spans)
    # Other programs anywhere around each occurrence: an evaluation after step k runs in
    # the host's time of k while the device may idle in a later step.
    programs, each, step_fn = _other_programs(host, steps, spans)
    idle = sum(by_cause.values())
    top = max(PRECEDENCE, key=lambda c: by_cause[c])
    wall = int(steps.wall_ns[chosen].sum())
    idle_share = idle / wall if wall > 0 else 1.0
    host_share = own_ns / (len(chosen) * stall.cost_ns) if stall.cost_ns > 0 else 1.0
    # An evaluation runs its programs in (most of) its occurrences: a metrics computation
    # beside one checkpoint in four (12 small programs once) is no evaluation.
    ran_others = _most([n > 0 for n in each]) and _programs_work(stall, spans, step_fn, others_work)
    evaluating = _most([n >= EVALUATION_CALLS for n in each])
    if from_run is not None:
        kind = from_run
    elif is_logging(sampled):
        kind = "logging"
    elif ran_others and (evaluating or idle_share < EVALUATION_IDLE):
        kind = "evaluation"  # other programs ran in the stall, one a batch
    elif top == "host" and read_site is not None:
        kind = "checkpoint"
    elif top == "host":
        kind = "host"
    else:
        kind = top
    return StallNature(kind, len(chosen), read_site, where, sampled, programs, host_share, workers)


def _programs_work(
    stall: RecurringStall,
    spans: Intervals,
    step_fn: str | None,
    others_work: Callable[[Intervals, str], np.ndarray | None] | None,
) -> bool:
    """Whether the programs other than the loop's step (``step_fn``, the jitted function
    :func:`_other_programs` found) did device work of an evaluation's size around the
    occurrences (``EVALUATION_WORK`` of what an occurrence cost, in most of them); True
    where the trace cannot say (no execution ids: GPU kernels here)."""
    if others_work is None or step_fn is None:
        return True
    work = others_work(spans, f"jit_{step_fn}")
    if work is None or len(work) == 0:
        return True
    return _most([w >= EVALUATION_WORK * stall.cost_ns for w in work.tolist()])


def _sampled(
    host: HostActivity, spans: Intervals
) -> tuple[str | None, tuple[tuple[str, int], ...], int]:
    """Where the loop's own code sits in ``spans`` (its longest stretch), the sampler's
    sites there (most looks first), and its time there (ns)."""
    if host.loop_code is None:
        return None, (), 0
    described = [
        host.loop_code.described(int(a), int(b))
        for a, b in zip(spans.starts, spans.ends, strict=True)
    ]
    found = [d for d in described if d is not None]
    if not found:
        return None, (), 0
    counts: dict[str, int] = {}
    for _, _, sites_here in found:
        for site, n in sites_here:
            counts[site] = counts.get(site, 0) + n
    where = max(found, key=lambda d: d[0])[1]
    return where, tuple(sorted(counts.items(), key=lambda kv: -kv[1])), sum(d[0] for d in found)


def _read_before(gaps: Table, mine: np.ndarray, host: HostActivity) -> str | None:
    """The read that held the host until the step's longest idle period began (it may wake
    later than the sync rule's 2 ms on a loaded machine: up to 5% of that period), as
    the analysis names reads; None without one."""
    rows = np.flatnonzero(mine)
    if len(rows) == 0:
        return None
    longest = rows[int(np.argmax(gaps[S.DURATION_NS][rows]))]
    p0 = int(gaps[S.PERIOD_START_NS][longest])
    late = max(2_000_000, int(gaps[S.DURATION_NS][longest]) // 20)
    reads = host.sync_events
    hit = np.flatnonzero(
        (reads.starts < p0) & (reads.ends >= p0 - STALL_READ_EARLY_NS) & (reads.ends <= p0 + late)
    )
    if len(hit) == 0:
        return None
    first = int(hit[0])
    site = host.frames.innermost_at(int(reads.starts[first])) if host.frames else None
    return read_site_label(reads.names[first], site or reads.site(first))


def _window_steps(
    stall: RecurringStall,
    sidecar_steps: tuple[HostStep, ...],
    base_ns: int | None,
    steps: Steps,
    gaps: Table,
) -> tuple[list[int], Intervals]:
    """Analysed steps holding an occurrence: of the host steps around each stall (the step
    before its completion came late, that one and the next), the one whose device idled
    most; and the time of those host steps (trace ns)."""
    if base_ns is None or len(steps) == 0:
        return [], Intervals.empty()
    start_of = {s.index: s.start_unix_ns for s in sidecar_steps if s.start_unix_ns}
    idle = np.zeros(len(steps), dtype=np.int64)
    np.add.at(idle, gaps[S.STEP_INDEX], gaps[S.DURATION_NS])
    chosen: list[int] = []
    lo: list[int] = []
    hi: list[int] = []
    for index in stall.indices:
        near = [start_of[i] - base_ns for i in (index - 1, index + 2) if i in start_of]
        if len(near) < 2:
            continue
        # The analysed steps overlapping those capture steps; the one whose device idled most.
        ks = np.flatnonzero((steps.starts < near[1]) & (steps.ends > near[0]))
        if len(ks):
            best = int(ks[np.argmax(idle[ks])])
            if idle[best] > 0:
                chosen.append(best)
                lo.append(near[0])
                hi.append(near[1])
    spans = Intervals.union_of(np.array(lo, np.int64), np.array(hi, np.int64))
    return sorted(set(chosen)), spans


def _other_programs(
    host: HostActivity, steps: Steps, spans: Intervals
) -> tuple[tuple[tuple[str, int], ...], list[int], str | None]:
    """Jitted functions called in ``spans`` other than the loop's own step (the one
    called in the most analysed steps: an evaluation may call its own more often in all,
    twenty times in each of a few steps): (name, calls), most calls first; the calls in
    each span; and the step's own function (None: no jitted call)."""
    thread = host.events
    if thread is None:
        return (), [], None
    positions = thread.named(N.PJIT)
    if len(positions) == 0:
        return (), [], None
    line = thread.line
    codes = line.codes[positions]
    starts = line.starts[positions]
    step_of = np.searchsorted(steps.starts, starts, side="right") - 1
    seen = np.unique(np.stack([codes, step_of]), axis=1)[0]  # each (code, step) once
    main = most_common(seen)
    counts: dict[str, int] = {}
    each: list[int] = []
    for a, b in zip(spans.starts.tolist(), spans.ends.tolist(), strict=True):
        inside = (starts >= a) & (starts < b) & (codes != main)
        each.append(int(np.count_nonzero(inside)))
        for code in codes[inside].tolist():
            name = _fn_name(str(line.names[code]))
            counts[name] = counts.get(name, 0) + 1
    ranked = tuple(sorted(counts.items(), key=lambda kv: -kv[1]))
    return ranked, each, _fn_name(str(line.names[main]))


def _fn_name(event: str) -> str:
    """The jitted function a ``PjitFunction(<fn>)`` event calls (the name as it is else)."""
    m = N.PJIT.match(event)
    return m.group("fn") if m else event
