"""Why was the device idle? Gaps per step, their causes, the verdict and what to do.

For each complete step, the idle gaps of the device (the union of all devices' busy
intervals) are split by what the training thread was doing during them, each instant
counted once, in this precedence: compile > sync > input > host > unknown.

Then the key rule: a gap that opens when a blocking read of a device value ends
(``float(loss)``: the host waited for the device to finish, so it could not prepare the
next step in advance) is *caused by the sync*, even though the host spends it fetching
the next batch or dispatching. Removing the sync would let that work overlap the
device's work, as long as the input work per step is shorter than the device's busy
time per step. When input work per step is longer than the device's busy time per step
the run is input-bound whatever the sync does, and that time stays ``input``.

Bands as in XProf: a cause taking >= 5% of step time matters, >= 20% dominates. The
verdict is the largest known cause if it matters, else ``device-bound``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.executions import StepWork, step_work
from traceinspect.analysis.host import (
    HostActivity,
    training_thread_activity,
)
from traceinspect.analysis.steps import Steps, find_steps
from traceinspect.analysis.workers import recommend_workers, worker_inputs
from traceinspect.backends.activity import DeviceActivity, device_activity
from traceinspect.errors import AnalysisError
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace
from traceinspect.vocabulary import CAUSES, MATTERS, PRECEDENCE, VERDICTS, band

# How long after the device went idle a blocking read may end and still be the reason:
# the host wakes up shortly after the device finishes the value it waits for.
SYNC_WAKE_TOLERANCE_NS = 2_000_000
# Gaps between device operations shorter than this are launch latency on the device side,
# not something the host caused: they count as busy.
MIN_GAP_NS = 10_000
# Gaps whose evidence is gathered (the longest; `gaps` rows beyond have none).
EVIDENCE_GAPS = 200
# Steps come in bursts when (p90 - p10) / mean of their times exceeds this: Grain's
# mp_prefetch hands over a batch per worker at once, then none for a while (the scenario
# family's bursty runs: 1.5-3; steady runs: 0.05-0.4). Then throughput (the mean) is what a
# step costs, and the verdict and the worker count use it.
BURSTY_SPREAD = 1.0
# Below this share of steps with their own device work found, the window holds none.
MIN_LINKED = 0.5
# A sync is the verdict only when its idle time recurs in at least this share of the steps.
SYNC_RECURS = 0.5


@dataclass(frozen=True)
class StepSummary:
    count: int
    source: str
    median_ms: float
    p90_ms: float
    dropped: int
    mean_ms: float = 0.0  # throughput: the window's wall time over its steps
    p10_ms: float = 0.0
    bursty: bool = False  # (p90 - p10) / mean > BURSTY_SPREAD

    @property
    def spread(self) -> float:
        return (self.p90_ms - self.p10_ms) / self.mean_ms if self.mean_ms else 0.0

    @property
    def typical_ms(self) -> float:
        """What one step costs: the mean when steps come in bursts, else the median."""
        return self.mean_ms if self.bursty else self.median_ms


@dataclass(frozen=True, eq=False)
class Analysis:
    """The result of :func:`analyze`; ``to_dict()`` is what ``analyze --json`` prints."""

    path: str
    backend: str
    devices: tuple[str, ...]
    steps: StepSummary
    busy_fraction: float
    idle_fraction: float
    idle_by_cause_ms: dict[str, float]
    cause_fractions: dict[str, float]
    verdict: str
    summary: str
    input_ms_per_step: float
    device_busy_ms_per_step: float
    sync_sites: tuple[str, ...]
    recommendations: tuple[dict[str, Any], ...]
    per_step: pd.DataFrame = field(repr=False)
    gaps: pd.DataFrame = field(repr=False)
    notes: tuple[str, ...] = ()
    #: Median device time per step inside collectives (all-reduce, all-gather, ...): part
    #: of the busy time, and in a multi-host run the time spent waiting for other hosts.
    collective_ms_per_step: float = 0.0
    #: How the capture chose the window and whether it is representative of the run (from
    #: the capture sidecar; None without one).
    window: dict[str, Any] | None = None

    def to_dict(self, max_gaps: int | None = None) -> dict[str, Any]:
        gaps = self.gaps.sort_values(S.DURATION_NS, ascending=False)
        if max_gaps is not None:
            gaps = gaps.iloc[:max_gaps]
        return {
            "path": self.path,
            "backend": self.backend,
            "devices": list(self.devices),
            "steps": {
                "count": self.steps.count,
                "source": self.steps.source,
                "median_ms": self.steps.median_ms,
                "p90_ms": self.steps.p90_ms,
                "dropped_partial": self.steps.dropped,
                "mean_ms": self.steps.mean_ms,
                "p10_ms": self.steps.p10_ms,
                "spread": round(self.steps.spread, 4),
                "bursty": self.steps.bursty,
            },
            "device": {"busy_fraction": self.busy_fraction, "idle_fraction": self.idle_fraction},
            "idle_by_cause_ms": self.idle_by_cause_ms,
            "idle_fraction_by_cause": self.cause_fractions,
            "verdict": self.verdict,
            "summary": self.summary,
            "input_ms_per_step": self.input_ms_per_step,
            "device_busy_ms_per_step": self.device_busy_ms_per_step,
            "collective_ms_per_step": self.collective_ms_per_step,
            "sync_sites": list(self.sync_sites),
            "recommendations": [dict(r) for r in self.recommendations],
            "per_step": [
                {
                    "step": int(r[S.STEP]),
                    "wall_ms": round(r[S.WALL_NS] / 1e6, 4),
                    "busy_ms": round(r[S.BUSY_NS] / 1e6, 4),
                    "idle_ms": round(r[S.IDLE_NS] / 1e6, 4),
                    "collective_ms": round(r[S.COLLECTIVE_NS] / 1e6, 4),
                    "idle_by_cause_ms": {c: round(r[S.idle_cause_ns(c)] / 1e6, 4) for c in CAUSES},
                }
                for _, r in self.per_step.iterrows()
            ],
            "gaps": [
                {
                    "step": int(g.step),
                    S.START_MS: round(float(g.start_ms), 4),
                    "duration_ms": round(g.duration_ns / 1e6, 4),
                    "cause": str(g.cause),
                    "evidence": list(g.evidence),
                }
                for g in gaps.itertuples()
            ],
            "notes": list(self.notes),
            "window": self.window,
        }

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{c}</td><td>{self.idle_by_cause_ms[c]:,.1f}</td>"
            f"<td>{self.cause_fractions[c]:.1%}</td></tr>"
            for c in CAUSES
        )
        recs = "".join(
            f"<li>{html.escape(str(r.get('message', r['kind'])))}</li>"
            for r in self.recommendations
        )
        return (
            f"<p><b>{html.escape(self.verdict)}</b>: {html.escape(self.summary)}</p>"
            f"<table><tr><th>cause</th><th>idle ms</th><th>of step time</th></tr>{rows}</table>"
            f"<ul>{recs}</ul>"
        )


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else 0.0


def _typical(values: np.ndarray, bursty: bool) -> float:
    """The median of the known values, or their mean when steps come in bursts."""
    values = values[np.isfinite(values)]
    if not len(values):
        return 0.0
    return float(np.mean(values)) if bursty else float(np.median(values))


def _step_summary(steps: Steps, wall_ms: np.ndarray) -> StepSummary:
    p10, median, p90 = (float(np.percentile(wall_ms, q)) for q in (10, 50, 90))
    mean = float(np.mean(wall_ms))
    return StepSummary(
        count=len(steps),
        source=steps.source,
        median_ms=round(median, 4),
        p90_ms=round(p90, 4),
        dropped=steps.dropped,
        mean_ms=round(mean, 4),
        p10_ms=round(p10, 4),
        bursty=bool(mean > 0 and (p90 - p10) / mean > BURSTY_SPREAD),
    )


def _drop_contextless_first_step(
    trace: Trace, steps: Steps, busy: Intervals
) -> tuple[Steps, str | None]:
    """Leave out the first step of a window that ``traceinspect capture`` opened when the
    device was idle from the start of the trace until after that step began. capture starts
    the trace at a step boundary, so the end of the step before (where a blocking read would
    be) is never in the trace: what opened that idle period cannot be known, and one
    context-less step must not flip a verdict (a loop reading every step was judged
    input-bound in 1 of 3 captures for this). A trace started elsewhere usually begins
    mid-step, and the partial step already left out gives the first complete one its
    context."""
    if len(steps) < 3 or not (trace.capture or {}).get("window"):
        return steps, None
    first = int(steps.starts[0])
    before = busy.clip(trace.start_ns, first + 1)
    if before.total > 0 and int(before.ends[-1]) > first:
        return steps, None  # busy when the step began
    if before.total > 0:
        return steps, None  # the idle period began inside the trace: its opener is traced
    trimmed = Steps(
        source=steps.source,
        starts=steps.starts[1:],
        ends=steps.ends[1:],
        numbers=steps.numbers[1:],
        main_line_row=steps.main_line_row,
        dropped=steps.dropped + 1,
        marker_names=steps.marker_names,
    )
    return trimmed, None


# The traced window is representative when its mean host step time is within this share of
# the untraced steps after it (the profiler itself slows CPU-backend steps by 5-20%).
REPRESENTATIVE = 0.25
_MIN_STEPS_AFTER = 5


def _window_check(capture: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """The capture's window (why it opened there) against the untraced steps after it."""
    window = (capture or {}).get("window")
    steps = (capture or {}).get("steps") or []
    if not window:
        return None, None
    traced = [s["wall_ms"] for s in steps if s.get("traced") and s.get("wall_ms") is not None]
    last = window.get("last_step")
    after = [
        s["wall_ms"]
        for s in steps
        if not s.get("traced")
        and last is not None
        and s["index"] > last
        and s.get("wall_ms") is not None
    ]
    out: dict[str, Any] = {
        "rule": window.get("rule"),
        "reason": window.get("reason"),
        "first_step": window.get("first_step"),
        "last_step": last,
        "traced_mean_ms": round(float(np.mean(traced)), 4) if traced else None,
        "after_mean_ms": None,
        "after_steps": len(after),
        "representative": None,
    }
    if not traced or len(after) < _MIN_STEPS_AFTER:
        return out, None
    t_mean, a_mean = float(np.mean(traced)), float(np.mean(after))
    out["after_mean_ms"] = round(a_mean, 4)
    off = t_mean / a_mean - 1 if a_mean > 0 else 0.0
    out["representative"] = abs(off) <= REPRESENTATIVE
    if out["representative"]:
        return out, None
    return out, (
        f"The traced steps ran at {t_mean:.2f} ms/step, the {len(after)} untraced steps after "
        f"them at {a_mean:.2f} ms/step ({off:+.0%}): the window may not represent the run "
        "(the pace changed, or the profiler slowed it); capture again, later in the run "
        "(--skip-steps) or with more steps."
    )


def _check_own_work(trace: Trace, steps: Steps, work: StepWork | None) -> None:
    """No verdict from a window whose steps' device work is not in the trace."""
    if work is None or work.linked >= MIN_LINKED * len(steps):
        return
    raise AnalysisError(
        f"{trace.path}: only {work.linked} of the {len(steps)} traced steps have their device "
        f"work in the trace: the host ran {work.queued} or more steps ahead of the device, "
        "which ran the window's steps after the trace stopped. Capture with traceinspect "
        "capture's default window (it waits until the run is steady), or trace more steps "
        "(--steps)."
    )


def _gap_table(
    steps: Steps, busy: Intervals, host: HostActivity, input_bound: bool, busy_per_step: float
) -> pd.DataFrame:
    """Per gap piece: idle time split by cause, with the sync rule applied.

    Idle periods are found over the whole analysed window first, so that one period that
    runs across a step boundary (the end of a step and the start of the next) is judged
    as one, then cut at step boundaries so each piece belongs to one step. Vectorised:
    a GPU trace has as many gaps as kernels.
    """
    lo, hi = int(steps.starts[0]), int(steps.ends[-1])
    periods = busy.complement(lo, hi)
    after_sync = _after_sync(periods, host)
    # Cut periods at the step boundaries inside them (steps tile [lo, hi) without gaps).
    cuts = steps.starts[1:]
    k = np.searchsorted(periods.starts, cuts, side="right") - 1
    valid = k >= 0
    inside = np.zeros(len(cuts), dtype=bool)
    inside[valid] = (cuts[valid] > periods.starts[k[valid]]) & (
        cuts[valid] < periods.ends[k[valid]]
    )
    starts = np.sort(np.concatenate((periods.starts, cuts[inside])))
    period = np.searchsorted(periods.starts, starts, side="right") - 1
    ends = periods.ends[period].copy()
    same = period[1:] == period[:-1]
    ends[:-1][same] = starts[1:][same]
    step_index = np.searchsorted(steps.starts, starts, side="right") - 1
    # Each instant goes to one cause, in precedence order: compile > sync > input > host.
    claimed = Intervals.empty()
    parts: dict[str, np.ndarray] = {}
    for cause in PRECEDENCE:
        source = getattr(host, cause)
        own = _minus(source, claimed)
        parts[cause] = own.overlap_with(starts, ends)
        claimed = claimed.union(source)
    duration = ends - starts
    parts["unknown"] = duration - sum(parts.values())
    synced = after_sync[period] if len(period) else np.zeros(0, dtype=bool)
    # What the host did after each read, per idle period: if that alone takes longer than
    # the device's step, the host could not run ahead even without the read, so the time
    # is not the sync's (the loop is input- or host-bound whatever it reads).
    late = parts["input"] + parts["host"] + parts["unknown"]
    per_period = np.bincount(period[synced], weights=late[synced], minlength=len(periods))
    after_read = per_period[after_sync]
    sync_hides = len(after_read) == 0 or float(np.median(after_read)) <= busy_per_step
    if not input_bound and sync_hides:
        # The host was held by the read until the device finished: what it did next
        # (fetch, dispatch, or untraced Python) is late because of the sync.
        moved = parts["input"] + parts["host"] + parts["unknown"]
        parts["sync"] = np.where(synced, parts["sync"] + moved, parts["sync"])
        for cause in ("input", "host", "unknown"):
            parts[cause] = np.where(synced, 0, parts[cause])
    gaps = pd.DataFrame(
        {
            S.STEP: steps.numbers[step_index],
            S.STEP_INDEX: step_index,
            S.START_NS: starts,
            "end_ns": ends,
            S.PERIOD_START_NS: periods.starts[period],
            S.AFTER_SYNC: synced,
            **{str(c): parts[c].astype(np.int64) for c in CAUSES},
            S.DURATION_NS: duration,
        }
    )
    return gaps


def _close_short_gaps(busy: Intervals, min_gap_ns: int) -> Intervals:
    if len(busy) < 2:
        return busy
    short = (busy.starts[1:] - busy.ends[:-1]) < min_gap_ns
    return Intervals.union_of(
        np.concatenate((busy.starts, busy.ends[:-1][short])),
        np.concatenate((busy.ends, busy.starts[1:][short])),
    )


def _minus(a: Intervals, b: Intervals) -> Intervals:
    """The parts of ``a`` not in ``b``."""
    if len(a) == 0 or len(b) == 0:
        return a
    lo = min(int(a.starts[0]), int(b.starts[0]))
    hi = max(int(a.ends[-1]), int(b.ends[-1]))
    return a.intersect(b.complement(lo, hi))


def _after_sync(periods: Intervals, host: HostActivity) -> np.ndarray:
    """Idle periods that open when a blocking read ends: a wait that began while the
    device was still busy and ended at (or shortly after) the moment it went idle, so the
    host was held until the device finished.
    """
    waits = host.sync_events
    out = np.zeros(len(periods), dtype=bool)
    if waits.empty or len(periods) == 0:
        return out
    w_start = waits[S.START_NS].to_numpy()
    w_end = waits["end_ns"].to_numpy()
    for k, p0 in enumerate(periods.starts.tolist()):
        hit = (w_start < p0) & (w_end >= p0) & (w_end <= p0 + SYNC_WAKE_TOLERANCE_NS)
        out[k] = bool(hit.any())
    return out


def _evidence(gap: pd.Series, host: HostActivity, after_sync: bool, input_bound: bool) -> list[str]:
    out: list[str] = []
    g0, g1 = int(gap[S.START_NS]), int(gap["end_ns"])
    # The idle period this piece belongs to opened when a read returned.
    read = host.read_ending_at(int(gap[S.PERIOD_START_NS])) if after_sync else None
    if read is not None:
        name, start, end, where = read
        site = f" at {where}" if where else ""
        out.append(
            f"{name}{site} blocked the host for {(end - start) / 1e6:.2f} ms "
            f"until the device finished; the device then waited for the host"
            + (" (input is slower than the device anyway)" if input_bound else "")
        )
    # Outermost events first: a Grain __next__ explains more than its children.
    for name, category, overlap in host.events_in(g0, g1):
        out.append(f"{name} ({category}) {overlap / 1e6:.2f} ms of the gap")
    if gap["compile"] > 0:
        out.append(f"XLA compilation during {gap['compile'] / 1e6:.2f} ms of the gap")
    if gap["unknown"] > 0 and not out:
        out.append(
            "no traced activity on the training thread (Python code is invisible with the "
            "Python tracer off: capture with --python-tracer to see it)"
        )
    return out


def analyze(trace: Trace) -> Analysis:
    """Find every idle gap of the device within complete steps and name its cause.

    Raises :class:`~traceinspect.errors.AnalysisError` when the trace shows no device
    activity or no steps, saying what was found and what to capture instead.
    """
    activity: DeviceActivity = device_activity(trace)
    if not activity.busy:
        raise AnalysisError(
            f"{trace.path}: no device activity found ({activity.backend.evidence}). "
            "Capture a window where the training loop runs (traceinspect capture -- python "
            "train.py) with the device tracer on."
        )
    steps = find_steps(trace)
    if len(steps) < 2:
        found = "no steps" if len(steps) == 0 else "only one complete step"
        raise AnalysisError(
            f"{trace.path}: {found} in the trace (source: {steps.source}). Capture more "
            "steps (traceinspect capture --steps 5), or mark each step with "
            "jax.profiler.StepTraceAnnotation."
        )
    busy = _close_short_gaps(activity.union, MIN_GAP_NS)
    lo, hi = int(steps.starts[0]), int(steps.ends[-1])
    window = busy.clip(lo, hi)
    if window.total == 0 and busy.total > 0:
        if hi <= busy.starts[0] <= hi + 1_000_000_000:
            raise AnalysisError(
                f"{trace.path}: the host dispatched all {len(steps)} traced steps before the "
                "device started on them, so no step shows its own device work. Capture more "
                "steps, so the window covers the steady state (on the CPU backend jax "
                "queues about 32 steps ahead)."
            )
        raise AnalysisError(
            f"{trace.path}: the device's activity and the host's steps do not overlap in time "
            f"(device {busy.starts[0]}-{busy.ends[-1]} ns, steps {lo}-{hi} ns): clock skew "
            "between host and device lines? Re-capture, or report the trace layout."
        )
    outside = 1 - window.total / busy.total
    notes: list[str] = []
    steps, edge_note = _drop_contextless_first_step(trace, steps, busy)
    if edge_note:
        notes.append(edge_note)
    work_rows = np.array(sorted({r for rows in activity.work_lines.values() for r in rows}))
    work = step_work(trace, steps, work_rows)
    _check_own_work(trace, steps, work)
    host = training_thread_activity(trace, steps)
    per_step = pd.DataFrame(
        {
            S.STEP: steps.numbers,
            S.START_NS: steps.starts,
            S.WALL_NS: steps.wall_ns,
            S.BUSY_NS: busy.overlap_with(steps.starts, steps.ends),
            S.COLLECTIVE_NS: activity.collective_union.overlap_with(steps.starts, steps.ends),
            S.INPUT_WORK_NS: host.input.overlap_with(steps.starts, steps.ends),
        }
    )
    # The device work each step needs: from the executions it dispatched where the trace
    # links them, else the device's busy time inside the step's host window.
    per_step[S.DEVICE_WORK_NS] = work.work_ns if work is not None else per_step[S.BUSY_NS]
    wall_ms = per_step[S.WALL_NS].to_numpy() / 1e6
    step_summary = _step_summary(steps, wall_ms)
    # Input work per step against device work per step decides whether a sync or the
    # pipeline is to blame for what happens after a blocking read. Per step as a step
    # typically costs: the mean when steps come in bursts (a burst's fast steps wait for
    # nothing, its slow step waits for the whole burst), else the median.
    input_per_step = _typical(per_step[S.INPUT_WORK_NS].to_numpy(), step_summary.bursty)
    busy_per_step = _typical(per_step[S.DEVICE_WORK_NS].to_numpy(), False)
    input_bound = input_per_step > busy_per_step and input_per_step > 0
    gaps = _gap_table(steps, busy, host, input_bound, busy_per_step)
    gaps[S.CAUSE] = gaps[list(CAUSES)].idxmax(axis=1) if len(gaps) else []
    # Evidence costs a lookup per gap: gather it for the longest gaps, the ones reported
    # (a GPU trace can hold as many gaps as kernels).
    # (gaps has a RangeIndex, so labels are positions.)
    longest = gaps[S.DURATION_NS].nlargest(EVIDENCE_GAPS).index
    evidence: list[list[str]] = [[] for _ in range(len(gaps))]
    for row in longest.tolist():
        g = gaps.loc[row]
        evidence[int(row)] = _evidence(g, host, bool(g[S.AFTER_SYNC]), input_bound)
    gaps[S.EVIDENCE] = evidence
    gaps[S.START_MS] = (gaps[S.START_NS] - trace.start_ns) / 1e6

    total_wall = int(per_step[S.WALL_NS].sum())
    by_cause = {c: int(gaps[c].sum()) for c in CAUSES}
    for c in CAUSES:
        per_step[S.idle_cause_ns(c)] = (
            gaps.groupby(S.STEP_INDEX)[c]
            .sum()
            .reindex(range(len(per_step)), fill_value=0)
            .to_numpy()
        )
    per_step[S.IDLE_NS] = per_step[S.WALL_NS] - per_step[S.BUSY_NS]
    fractions: dict[str, float] = {
        c: by_cause[c] / total_wall if total_wall else 0.0 for c in CAUSES
    }
    idle_total = sum(by_cause.values())
    known = {c: fractions[c] for c in VERDICTS}
    # Sync-bound means the loop reads a device value every step. A read every N steps
    # (logging every N steps, as MaxText recommends) idles the device once per N steps: a
    # cost worth a note, not the verdict (scenario family: reading every 10th step costs no
    # measurable time, sample_traces/scenarios/family/MEASUREMENTS.md).
    sync_steps = float((per_step[S.idle_cause_ns("sync")] > 0).mean()) if len(per_step) else 0.0
    occasional_sync = fractions["sync"] >= MATTERS and sync_steps < SYNC_RECURS
    if occasional_sync:
        known["sync"] = 0.0
    top = max(known, key=lambda c: known[c])
    verdict = VERDICTS[top] if known[top] >= MATTERS else "device-bound"
    if fractions["unknown"] >= MATTERS and fractions["unknown"] > known[top]:
        # Idle time that nothing on the host explains: say so rather than pick a cause.
        top, verdict = "unknown", "unknown"
    sync_sites = _sync_sites(host, gaps)
    if occasional_sync:
        notes.append(
            f"A read of a device value idles the device in {sync_steps:.0%} of the steps "
            f"({fractions['sync']:.1%} of step time): an occasional read (logging every N "
            "steps), not a per-step sync, so not the verdict."
        )
    if step_summary.bursty:
        notes.append(
            f"Steps come in bursts (p10 {step_summary.p10_ms:.2f} ms, median "
            f"{step_summary.median_ms:.2f} ms, p90 {step_summary.p90_ms:.2f} ms): several "
            "batches arrive at once (one per Grain worker), then the loop waits for the next "
            f"ones. The figures use throughput, {step_summary.mean_ms:.2f} ms per step over "
            "the window."
        )
    if work is not None and work.queued > 1:
        notes.append(
            f"The host ran {work.queued} step(s) ahead of the device; each step's device work "
            "is that of the programs it dispatched (linked by execution order), not what ran "
            "during it."
        )
    if fractions["unknown"] >= MATTERS:
        notes.append(
            f"{fractions['unknown']:.0%} of step time is idle with nothing traced on the "
            "training thread to explain it; capture with --python-tracer to see Python code."
        )
    if outside >= 0.5:
        notes.append(
            f"{outside:.0%} of the device's work lies outside the analysed steps (the host ran "
            "ahead of the device, or host and device clocks are skewed); capture more steps."
        )
    if steps.dropped:
        notes.append(
            f"{steps.dropped} step(s) at the edges of the trace left out (partial, or idle "
            "from the trace's start with nothing traced before to say why)."
        )
    window_info, window_note = _window_check(trace.capture)
    if window_note:
        notes.append(window_note)
    if len(trace.hosts) > 1:
        notes.append(
            f"This trace merges {len(trace.hosts)} hosts into one timeline (their clocks "
            "differ); traceinspect.analyze_run() analyses each host and compares them, as "
            "`traceinspect analyze` does for a run directory."
        )
    analysis_kwargs: dict[str, Any] = {
        "path": str(trace.path),
        "backend": activity.backend.kind,
        "devices": tuple(activity.busy),
        "steps": step_summary,
        "busy_fraction": (total_wall - idle_total) / total_wall if total_wall else 0.0,
        "idle_fraction": idle_total / total_wall if total_wall else 0.0,
        "idle_by_cause_ms": {c: round(by_cause[c] / 1e6, 4) for c in CAUSES},
        "cause_fractions": {c: round(fractions[c], 4) for c in CAUSES},
        "verdict": verdict,
        "input_ms_per_step": round(input_per_step / 1e6, 4),
        "device_busy_ms_per_step": round(busy_per_step / 1e6, 4),
        "collective_ms_per_step": round(_median(per_step[S.COLLECTIVE_NS].to_numpy()) / 1e6, 4),
        "sync_sites": sync_sites,
        "per_step": per_step,
        "gaps": gaps,
        "notes": tuple(notes),
        "window": window_info,
    }
    summary = _summary(verdict, top, fractions, input_per_step, busy_per_step)
    recommendations = _recommendations(
        verdict, fractions, sync_sites, input_per_step, busy_per_step, occasional_sync
    )
    uses_grain = bool((trace.capture or {}).get("grain")) or input_per_step > 0
    if uses_grain:
        workers = recommend_workers(
            worker_inputs(
                verdict,
                step_ms=step_summary.typical_ms,
                device_busy_ms=busy_per_step / 1e6,
                input_wait_ms=input_per_step / 1e6,
                capture=trace.capture,
            )
        )
        workers["message"] = _workers_message(workers)
        # First when input is the problem; after "remove the sync" otherwise.
        first = verdict == "input-bound"
        recommendations = (workers, *recommendations) if first else (*recommendations, workers)
    return Analysis(summary=summary, recommendations=recommendations, **analysis_kwargs)


def _sync_sites(host: HostActivity, gaps: pd.DataFrame) -> tuple[str, ...]:
    """Where the syncs that opened gaps happen: source lines when the Python tracer was on,
    else the names of the blocking events."""
    sites: dict[str, int] = {}
    periods = gaps.loc[gaps[S.AFTER_SYNC], S.PERIOD_START_NS].unique() if len(gaps) else []
    for p0 in periods:
        read = host.read_ending_at(int(p0))
        if read is not None:
            key = read[3] or read[0]
            sites[key] = sites.get(key, 0) + 1
    return tuple(sorted(sites, key=lambda k: -sites[k]))


def _workers_message(rec: dict[str, Any]) -> str:
    current = "unknown" if rec["current"] is None else rec["current"]
    if rec["value"] == (rec["current"] or 0):
        head = f"Keep grain_worker_count at {rec['value']}"
    else:
        head = f"Set grain_worker_count to {rec['value']} (now {current})"
    return f"{head}: {rec['reason']}; expected step time {rec['expected_step_ms']:.2f} ms."


def _summary(
    verdict: str, top: str, fractions: dict[str, float], input_ns: float, busy_ns: float
) -> str:
    if verdict == "device-bound":
        idle = sum(fractions.values())
        return (
            f"The device is busy {1 - idle:.0%} of each step; no cause of idle time reaches "
            f"{MATTERS:.0%} of step time."
        )
    share = fractions[top]
    if top == "sync":
        return (
            f"The device sits idle {share:.0%} of step time because the training loop reads a "
            "device value every step, so the next step is only prepared after the current one "
            f"ends; input work ({input_ns / 1e6:.2f} ms/step) is shorter than the device's "
            f"work ({busy_ns / 1e6:.2f} ms/step), so removing the sync closes the gap."
        )
    if top == "input":
        return (
            f"The device waits for input {share:.0%} of step time: the training thread "
            f"waits {input_ns / 1e6:.2f} ms/step for its next batch against "
            f"{busy_ns / 1e6:.2f} ms/step of device work."
        )
    if top == "compile":
        return f"The device waits for XLA compilation {share:.0%} of step time (recompiling)."
    if top == "unknown":
        return (
            f"The device is idle {share:.0%} of step time with nothing traced on the training "
            "thread to explain it."
        )
    return f"The device waits for other host work {share:.0%} of step time ({band(share)})."


def _recommendations(
    verdict: str,
    fractions: dict[str, float],
    sync_sites: tuple[str, ...],
    input_ns: float,
    busy_ns: float,
    occasional_sync: bool = False,
) -> tuple[dict[str, Any], ...]:
    recs: list[dict[str, Any]] = []
    if fractions["sync"] >= MATTERS:
        where = f" ({sync_sites[0]})" if sync_sites else ""
        message = (
            f"Stop reading a device value every step{where}: log the previous step's "
            "metrics instead (keep last step's loss and print it after dispatching the "
            "next step), or log every N steps, so the host can run ahead."
        )
        if occasional_sync:
            message = (
                f"The occasional read of a device value{where} idles the device "
                f"{fractions['sync']:.1%} of step time: read the previous step's value when "
                "you log (keep it, print it after dispatching the next step) to hide it too."
            )
        recs.append({"kind": "remove_sync", "where": list(sync_sites), "message": message})
    if fractions["input"] >= MATTERS:
        recs.append(
            {
                "kind": "input_pipeline",
                "input_ms_per_step": round(input_ns / 1e6, 4),
                "device_busy_ms_per_step": round(busy_ns / 1e6, 4),
                "message": (
                    "Make batches faster than the step: prefetch in the background (Grain "
                    "mp_prefetch / more grain_worker_count, more read threads), or make "
                    "preprocessing cheaper."
                ),
            }
        )
    if fractions["compile"] >= MATTERS:
        recs.append(
            {
                "kind": "avoid_recompilation",
                "message": (
                    "jit recompiles during training: keep input shapes and static arguments "
                    "fixed (pad to a few bucket sizes), and check jax.config "
                    "jax_log_compiles to see what changes."
                ),
            }
        )
    if fractions["host"] >= MATTERS:
        recs.append(
            {
                "kind": "reduce_host_overhead",
                "message": (
                    "The host's own work between steps leaves the device idle: fuse small "
                    "jitted calls into one step function and move logging or checkpointing "
                    "off the training thread."
                ),
            }
        )
    if verdict == "device-bound":
        recs.append(
            {
                "kind": "device_bound",
                "message": "The input pipeline and host keep up; speed up the model itself.",
            }
        )
    return tuple(recs)
