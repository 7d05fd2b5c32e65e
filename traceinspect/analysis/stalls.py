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
steps, a "stall" that costs nothing. Where the completions come in bunches, though (a
quarter of them or more a tiny fraction of the host's typical step apart), the stamps are
no throughput: the thread that stamps them needs the GIL, and a loop that holds it for
long (a ``gc.collect()`` over a large heap: 120-300 ms every 12 steps, dozens of steps
stamped within microseconds after each) stamps them late. The host's step times serve there: its
GIL-holding stall is the run's. A step is a stall when it takes more than
:data:`STALL_FACTOR` times the median step and at least :data:`STALL_MIN_NS` more; stalls
recur on a lattice of steps (every p-th step from some step) when at least
:data:`MIN_OCCURRENCES` of them lie on it, they are at least :data:`PERIOD_AGREEMENT` of
its steps, and at most :data:`STRAY_SHARE` of the steps off it stall (of such lattices, the
one holding the most stalls; a stall right beside one on it is part of that occurrence, not
a stray). Each occurrence costs its time above the median step, with the step beside it
that stalled too; the run pays their mean once a period.

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

from traceinspect.sidecar import HostStep
from traceinspect.thresholds import BUNCHED_SHARE, STAMPED_SHARE

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
#: A slow step off the lattice counts as a stray only when it took at least this share of
#: what a stall on the lattice took above the median: a waiting worker's burst is about as
#: slow as the others (the strays above), while a loaded machine's 40-110 ms steps are no
#: rival to a 2.5 s epoch restart (1 of 3 captures on the 3.12 stack had 12 such steps among
#: 230, and its restart every 40 steps went unfound). A quarter (chosen, not measured).
STRAY_SIZE = 0.25
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
    #: How much slower the steps run under the profiler than without it: the median of
    #: the window's steps that are no stall over the unprofiled ones' (1.0 where either holds
    #: fewer than MIN_SERIES steps, or the traced ones ran no slower). The window's own
    #: figures (the device's work per step) are in the traced pace, this stall's in the
    #: run's: on XLA's CPU backend a long trace slowed a Flax NNX + Orbax loop's steps
    #: 2.5-3x (92-127 ms of device work a step traced, 39-42 untraced).
    traced_slowdown: float = 1.0

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
            "traced_slowdown": round(self.traced_slowdown, 3),
        }


def step_series(steps: tuple[HostStep, ...]) -> tuple[np.ndarray, np.ndarray, bool]:
    """(step index, ns, whether the host's) per step after the first :data:`SKIP_FIRST`:
    the time from the completion of the step before to this step's, or the host's step time
    where the completions come in bunches (:func:`_bunched`); empty when fewer than half
    the steps have a completion stamp."""
    kept = [s for s in steps if s.index >= SKIP_FIRST]
    done = {s.index: s.done_unix_ns for s in kept if s.done_unix_ns}
    pairs = [(i, done[i] - done[i - 1]) for i in sorted(done) if i - 1 in done]
    if not pairs or len(pairs) < int(len(kept) * STAMPED_SHARE):
        return np.empty(0, np.int64), np.empty(0, np.float64), False
    host = [(s.index, s.wall_ms * 1e6) for s in kept if s.wall_ms is not None]
    from_host = bool(host) and _bunched([v for _, v in pairs], [v for _, v in host])
    index, value = zip(*(host if from_host else pairs), strict=True)
    return np.array(index, np.int64), np.array(value, np.float64), from_host


def _beside(index: np.ndarray, on: np.ndarray) -> np.ndarray:
    """The steps right before or after a step of ``on`` (and not on it themselves)."""
    hit = index[on]
    return (np.isin(index - 1, hit) | np.isin(index + 1, hit)) & ~on


def _bunched(completions: list[float], host: list[float]) -> bool:
    """Whether at least :data:`BUNCHED_SHARE` of the completions came within a
    :data:`STALL_FACTOR`-th of the host's typical step of the one before (stamped late,
    together): a device that finished its steps that fast would leave the host the slower
    one, its steps no shorter than the device's. Not "most" (a median): a collection every
    12 steps left 41-56% of the stamps bunched, and the median then fell on either side
    from one capture to the next."""
    tiny = np.asarray(completions, np.float64) * STALL_FACTOR < float(np.median(host))
    return float(np.mean(tiny)) >= BUNCHED_SHARE


def recurring_stall(
    steps: tuple[HostStep, ...],
    profiled: frozenset[int] = frozenset(),
    window: frozenset[int] = frozenset(),
) -> RecurringStall | None:
    """The stall that recurs every N steps over the run, or None when there is none.
    ``profiled``: the steps run under the profiler (the early trace's, the window's), which
    it may slow: a stall on the lattice there counts, a slow step off it is no stray.
    ``window``: the traced window's steps, whose pace against the unprofiled steps' is the
    stall's ``traced_slowdown``."""
    index, value, from_host = step_series(steps)
    if len(value) < MIN_SERIES:
        return None
    median = float(np.median(value))
    if median <= 0:
        return None
    # The typical step a stall stands above: the median, or the host's mean where the series
    # is the host's (a loop that runs ahead takes most steps in its dispatch time, and waits
    # for the queue in some: above its median, not a stall).
    typical = float(np.mean(value)) if from_host else median
    stall = (value > STALL_FACTOR * typical) & (value - median >= STALL_MIN_NS)
    at = index[stall]
    if len(at) < MIN_OCCURRENCES:
        return None
    traced = np.isin(index, np.fromiter(profiled, np.int64, len(profiled)))
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
            size = STRAY_SIZE * float(np.median(value[stall & on]) - median) if hits else 0.0
            rival = value - median >= size
            free = ~_beside(index, stall & on) & ~traced
            stray = int(np.count_nonzero(stall & ~on & free & rival))
            apart = stray <= STRAY_SHARE * np.count_nonzero(~on)
            if enough and apart and (best is None or hits > best[0]):
                best = (hits, period, phase)
    if best is None:
        return None
    _, period, phase = best
    # The pace without the stalls: the mean of the steps that are no stall at all (on the
    # lattice or off it: a 1.9 s step where capture wrote its trace is not the run's).
    pace = float(np.mean(value[~stall]))
    beside = stall & _beside(index, stall & (index % period == phase))
    stall &= index % period == phase
    # An occurrence may spread over the step beside it (a new iterator's workers start
    # while the step before still waits for its completion stamp): its cost is both steps'.
    extra = value[stall] - median
    for k in np.flatnonzero(beside).tolist():
        nearest = int(np.argmin(np.abs(index[stall] - index[k])))
        extra[nearest] += value[k] - median
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
        traced_slowdown=_slowdown(
            value,
            stall | beside,
            np.isin(index, np.fromiter(window, np.int64, len(window))),
            traced,
        ),
    )


def _slowdown(
    value: np.ndarray, stalled: np.ndarray, window: np.ndarray, profiled: np.ndarray
) -> float:
    """The window's steps' median over the unprofiled ones' (steps of a stall left out), at
    least 1.0; 1.0 where either side has fewer than MIN_SERIES steps."""
    inside, outside = value[~stalled & window], value[~stalled & ~profiled & ~window]
    if len(inside) < MIN_SERIES or len(outside) < MIN_SERIES:
        return 1.0
    low = float(np.median(outside))
    return max(1.0, float(np.median(inside)) / low) if low > 0 else 1.0
