"""Stalls that recur every N steps: synchronous checkpoints, evaluation, periodic logging.

A loop that checkpoints every 25 steps idles the device for a quarter of a second once per
25 steps. A 20-step window may hold one such stall or none, so the window alone misjudges
the run both ways. capture's sidecar keeps every step of the whole run (when its device work
finished, and when the host started it), so the run is judged over all of them: the steps
whose time stands far above the typical step, the period they recur at, and what each
occurrence costs.

The series: the time between consecutive completions of the steps' device work (the device's
throughput, a smooth series when the host runs ahead). The host's step times do not serve: a
loop that runs ahead of the device and reads every 10th step waits there for the whole queue
(47 ms in ``family/read_every10_w0``, 32 steps queued) and then bursts through the next
steps, a "stall" that costs nothing. A step is a stall when it takes more than
:data:`STALL_FACTOR` times the median step and at least :data:`STALL_MIN_NS` more; stalls
recur on a lattice of steps (every p-th step from some step) when at least
:data:`MIN_OCCURRENCES` of them lie on it, they are at least :data:`PERIOD_AGREEMENT` of
its steps, and at most :data:`STRAY_SHARE` of the steps off it stall (of such lattices, the
one holding the most stalls). Each occurrence costs its
time above the median step; the run pays their mean once a period.

Limits: a run without completion stamps (a jitted step that returns nothing capture can wait
on, or a sidecar older than them) is not searched; a stall shorter than :data:`STALL_FACTOR`
steps' time is not found (a cheap checkpoint is then not worth a verdict anyway); stalls at
irregular intervals are not called recurring; bursts of a Grain pipeline with several
workers (a slow step once per worker count) are left to the input analysis (their steps wait
in ``next()``), and a recurring stall in a run that stalls as often besides is not told
apart from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import most_common
from traceinspect.analysis.result import Table
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.training_thread import HostActivity, read_site_label
from traceinspect.intervals import Intervals
from traceinspect.sidecar import HostStep
from traceinspect.thresholds import EVALUATION_IDLE, STALL_READ_EARLY_NS, STAMPED_SHARE
from traceinspect.vocabulary import CAUSES, PRECEDENCE

#: A step is a stall when it takes this many times the median step...
STALL_FACTOR = 3.0
#: ... and at least this much more (ns): a 0.3 ms step three times a 0.1 ms one is noise.
STALL_MIN_NS = 2_000_000
#: Occurrences needed to call a stall recurring.
MIN_OCCURRENCES = 4
#: The shortest series a recurring stall is looked for in: twice its occurrences, so that
#: steps between them can show it is the exception.
MIN_SERIES = 2 * MIN_OCCURRENCES
#: The share of a lattice's steps that must be stalls.
PERIOD_AGREEMENT = 0.75
#: The most of the steps off the lattice that may be stalls: a recurring stall is the
#: exception between its occurrences. Pipelines of 2-3 waiting workers that cannot keep up
#: stall every few steps, and among the many lattices of such a run one may hold most of
#: its steps by chance: 5 of the family's captures (``io_w2``, ``io_w3``, ``io_read_w2``)
#: had one, every 12-54 steps, with 11-26% of the steps off it stalls (``io_w2`` every 26
#: steps, 9 of 11, was read as a recurring wait for input and its advice put first); the
#: synchronous checkpoints of 3 captures (every 25 and 60 steps), 0-0.2%.
STRAY_SHARE = 0.05
#: How many stalls ahead the spacings that may be the period are taken from.
_AHEAD = 4
#: Steps at the run's start left out: step 0 compiles, step 1 may still.
SKIP_FIRST = 2


@dataclass(frozen=True)
class RecurringStall:
    """Steps that take far longer than the rest, recurring every ``period`` steps."""

    period: int
    #: Step indices (capture's, 0-based) of the occurrences over the whole run.
    indices: tuple[int, ...]
    #: Median time of a stall step above the median step (ns): what one occurrence costs.
    cost_ns: float
    #: The run's mean step (ns): its steps' pace without any slow step, plus the stalls'
    #: share (slow steps off the lattice, such as capture writing its trace, left out),
    #: and the median step.
    mean_ns: float
    median_ns: float
    #: The stalls' total extra time spread over the series' steps (ns per step).
    per_step_ns: float

    @property
    def share(self) -> float:
        """The share of the run's step time the stalls take."""
        return self.per_step_ns / self.mean_ns if self.mean_ns > 0 else 0.0

    @property
    def expected_ns(self) -> float:
        """The run's mean step without the stalls."""
        return self.mean_ns - self.per_step_ns

    def to_dict(self) -> dict[str, object]:
        return {
            "period_steps": self.period,
            "occurrences": len(self.indices),
            "first_step": self.indices[0],
            "cost_ms": round(self.cost_ns / 1e6, 3),
            "per_step_ms": round(self.per_step_ns / 1e6, 4),
            "run_mean_step_ms": round(self.mean_ns / 1e6, 4),
            "share": round(self.share, 4),
        }


def step_series(steps: tuple[HostStep, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(step index, ns) per step after the first :data:`SKIP_FIRST`: the time from the
    completion of the step before to this step's; empty when fewer than half the steps
    have a completion stamp."""
    kept = [s for s in steps if s.index >= SKIP_FIRST]
    done = {s.index: s.done_unix_ns for s in kept if s.done_unix_ns}
    pairs = [(i, done[i] - done[i - 1]) for i in sorted(done) if i - 1 in done]
    if not pairs or len(pairs) < int(len(kept) * STAMPED_SHARE):
        return np.empty(0, np.int64), np.empty(0, np.float64)
    index, value = zip(*pairs, strict=True)
    return np.array(index, np.int64), np.array(value, np.float64)


def recurring_stall(steps: tuple[HostStep, ...]) -> RecurringStall | None:
    """The stall that recurs every N steps over the run, or None when there is none."""
    index, value = step_series(steps)
    if len(value) < MIN_SERIES:
        return None
    median = float(np.median(value))
    if median <= 0:
        return None
    stall = (value > STALL_FACTOR * median) & (value - median >= STALL_MIN_NS)
    at = index[stall]
    if len(at) < MIN_OCCURRENCES:
        return None
    # The period and phase: the lattice of steps (every p-th, from some step) that holds the
    # most stalls, among those where most of its steps are stalls. Other slow steps (the
    # profiler writing, a busy machine) fall off it; a multiple of the period holds fewer
    # stalls, a divisor of it too few of its steps.
    best: tuple[int, int, int] | None = None  # (stalls on it, period, phase)
    # Candidate periods: the spacings between each stall and the next few (a slow step off
    # the lattice may fall between two stalls on it).
    spacings = {int(d) for k in range(1, _AHEAD + 1) for d in (at[k:] - at[:-k]) if d >= 2}
    for period in sorted(spacings):
        for phase in sorted({int(i) % period for i in at}):
            on = index % period == phase
            hits = int(np.count_nonzero(stall & on))
            enough = hits >= MIN_OCCURRENCES and hits >= PERIOD_AGREEMENT * np.count_nonzero(on)
            stray = int(np.count_nonzero(stall & ~on))
            apart = stray <= STRAY_SHARE * np.count_nonzero(~on)
            if enough and apart and (best is None or hits > best[0]):
                best = (hits, period, phase)
    if best is None:
        return None
    _, period, phase = best
    # The pace without the stalls: the mean of the steps that are no stall at all (on the
    # lattice or off it: a 1.9 s step where capture wrote its trace is not the run's).
    pace = float(np.mean(value[~stall]))
    stall &= index % period == phase
    extra = value[stall] - median
    # Once a period: the steps with a completion stamp may be fewer than the run's (a CPU
    # run's rare checkpoint, 4 stalls 100 steps apart among 160 stamped steps, read 0.58 ms
    # a step against the 0.23 its 23 ms cost every 100 steps is).
    per_step = float(extra.mean()) / period
    return RecurringStall(
        period=period,
        indices=tuple(int(i) for i in index[stall]),
        cost_ns=float(np.median(extra)),
        mean_ns=pace + per_step,
        median_ns=median,
        per_step_ns=per_step,
    )


@dataclass(frozen=True)
class StallNature:
    """What an occurrence of the stall inside the analysed window shows."""

    #: ``checkpoint`` (a read of device values, then the loop's own work), ``host`` (the
    #: loop's own work), ``evaluation`` (other jitted programs run and read), ``input``,
    #: ``compile``, ``sync`` (a read alone), or ``unseen`` (no occurrence in the window).
    kind: str
    #: Occurrences inside the analysed steps.
    in_window: int = 0
    read_site: str | None = None
    #: The loop's own code there: where it sits, and the sampled sites (most looks first).
    where: str | None = None
    sites: tuple[tuple[str, int], ...] = ()
    #: Other jitted functions the loop called in the stall step: (name, calls).
    programs: tuple[tuple[str, int], ...] = ()

    def what(self) -> str:
        """The stall in a few words, for the summary and the advice."""
        site = f" at {self.sites[0][0]}" if self.sites else ""
        if self.kind == "checkpoint":
            read = f"{self.read_site}, then" if self.read_site else "a read of device values, then"
            return f"a synchronous checkpoint: {read} the loop's own work{site}"
        if self.kind == "host":
            return f"the loop's own work{site}"
        if self.kind == "evaluation":
            calls = ", ".join(f"{n} call(s) of {name}" for name, n in self.programs[:2])
            return f"evaluation: {calls}"
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
) -> StallNature:
    """What the occurrences inside the analysed steps show (``base_ns``: the trace's start
    on the Unix clock, to place capture's steps on the trace's time)."""
    chosen = _window_steps(stall, sidecar_steps, base_ns, steps, gaps)
    if not chosen:
        return StallNature("unseen")
    by_cause: dict[str, int] = dict.fromkeys(CAUSES, 0)
    read_site: str | None = None
    for k in chosen:
        mine = gaps[S.STEP_INDEX] == k
        for c in CAUSES:
            by_cause[c] += int(gaps[c][mine].sum())
        sites = [s for s in gaps[S.SYNC_SITE][mine].tolist() if s]
        read_site = read_site or (sites[0] if sites else None) or _read_before(gaps, mine, host)
    spans = Intervals.union_of(steps.starts[chosen], steps.ends[chosen])
    where: str | None = None
    sampled: tuple[tuple[str, int], ...] = ()
    if host.loop_code is not None:
        described = [
            host.loop_code.described(int(a), int(b))
            for a, b in zip(spans.starts, spans.ends, strict=True)
        ]
        found = [d for d in described if d is not None]
        if found:
            where = max(found, key=lambda d: d[0])[1]
            counts: dict[str, int] = {}
            for _, _, sites_here in found:
                for site, n in sites_here:
                    counts[site] = counts.get(site, 0) + n
            sampled = tuple(sorted(counts.items(), key=lambda kv: -kv[1]))
    programs = _other_programs(host, steps, chosen)
    idle = sum(by_cause.values())
    top = max(PRECEDENCE, key=lambda c: by_cause[c])
    wall = int(steps.wall_ns[chosen].sum())
    if programs and idle < int(wall * EVALUATION_IDLE):
        kind = "evaluation"  # the device was busy: other programs ran in the stall
    elif top == "host" and read_site is not None:
        kind = "checkpoint"
    elif top == "host":
        kind = "host"
    else:
        kind = top
    return StallNature(kind, len(chosen), read_site, where, sampled, programs)


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
) -> list[int]:
    """Analysed steps holding an occurrence: of the host steps around each stall (the step
    before its completion came late, and that one), the one whose device idled most."""
    if base_ns is None or len(steps) == 0:
        return []
    start_of = {s.index: s.start_unix_ns for s in sidecar_steps if s.start_unix_ns}
    idle = np.zeros(len(steps), dtype=np.int64)
    np.add.at(idle, gaps[S.STEP_INDEX], gaps[S.DURATION_NS])
    chosen: list[int] = []
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
    return sorted(set(chosen))


def _other_programs(
    host: HostActivity, steps: Steps, chosen: list[int]
) -> tuple[tuple[str, int], ...]:
    """Jitted functions called in the chosen steps other than the one the loop calls most
    (over all analysed steps): (name, calls), most calls first."""
    thread = host.events
    if thread is None:
        return ()
    positions = thread.named(N.PJIT)
    if len(positions) == 0:
        return ()
    line = thread.line
    codes = line.codes[positions]
    main = most_common(codes)
    starts = line.starts[positions]
    counts: dict[str, int] = {}
    for k in chosen:
        inside = (starts >= steps.starts[k]) & (starts < steps.ends[k]) & (codes != main)
        for code in codes[inside].tolist():
            m = N.PJIT.match(str(line.names[code]))
            name = m.group("fn") if m else str(line.names[code])
            counts[name] = counts.get(name, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: -kv[1]))
