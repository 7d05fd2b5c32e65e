"""Each idle instant of the device, given to one cause: the attribution rule.

The idle gaps of the device (the union of all devices' busy intervals) inside the analysed
steps are split by what the training thread was doing during them, each instant counted
once, in the precedence of :data:`traceinspect.vocabulary.PRECEDENCE`: compile > sync >
input > host, and the rest unknown.

An idle instant while a program the host had already dispatched waited to run is the
runtime's (``runtime``: launch and scheduling latency), whatever the host did meanwhile.

Then the sync rule: a gap that opens when a blocking read of a device value ends
(``float(loss)``: the host waited for the device to finish, so it could not prepare the
next step in advance) is *caused by the sync*, even though the host spends it fetching the
next batch or dispatching. Removing the sync would let that work overlap the device's work,
as long as the input work per step is shorter than the device's work per step; when it is
longer the run is input-bound whatever the sync does, and that time stays ``input``.
"""

from __future__ import annotations

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.arrays import longest_first
from traceinspect.analysis.cause_reasons import Attribution, cause_reasons, largest_cause
from traceinspect.analysis.result import Table
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.training_thread import HostActivity, read_site_label
from traceinspect.intervals import Intervals
from traceinspect.thresholds import GAP_LINE_FIRST, GAP_LINE_SHARE
from traceinspect.vocabulary import CAUSES, CLAIM_ORDER, KNEE_TOLERANCE, SYNC_RULE_TAKES

# How long after the device went idle a blocking read may end and still be the reason:
# the host wakes up shortly after the device finishes the value it waits for.
SYNC_WAKE_TOLERANCE_NS = 2_000_000
# Gaps between device operations shorter than this are launch latency on the device side,
# not something the host caused: they count as busy.
MIN_GAP_NS = 10_000
# Gaps whose evidence is gathered (the longest; `gaps` rows beyond have none).
EVIDENCE_GAPS = 200


def gap_table(
    steps: Steps,
    busy: Intervals,
    host: HostActivity,
    input_bound: bool,
    busy_per_step: float,
    waiting: Intervals | None = None,
) -> Table:
    """Per gap piece: idle time split by cause, with the sync rule applied, its cause (the
    one with the most of it) and, where the evidence points elsewhere, why
    (:mod:`~traceinspect.analysis.cause_reasons`).

    Idle periods are found over the whole analysed window first, so that one period that
    runs across a step boundary (the end of a step and the start of the next) is judged
    as one, then cut at step boundaries so each piece belongs to one step. Vectorised:
    a GPU trace has as many gaps as kernels. ``waiting``: when a program the host had
    already dispatched waited to run (``runtime`` time, claimed before the host's causes).
    The columns of :attr:`~traceinspect.analysis.result.Analysis.gaps`, one array each.
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
    # Each instant goes to one cause, in CLAIM_ORDER: runtime > compile > sync > input > host.
    spans = {"runtime": waiting if waiting is not None else Intervals.empty()}
    owned: dict[str, Intervals] = Intervals.claim_in_order(
        [(c, spans[c] if c in spans else getattr(host, c)) for c in CLAIM_ORDER]
    )
    parts: dict[str, np.ndarray] = {c: iv.overlap_with(starts, ends) for c, iv in owned.items()}
    duration = ends - starts
    parts["unknown"] = duration - sum(parts.values())
    claimed = {c: v.copy() for c, v in parts.items()}
    synced = after_sync[period] if len(period) else np.zeros(0, dtype=bool)
    # What the host did after each read, per idle period: if that alone takes longer than
    # the device's step, the host could not run ahead even without the read, so the time
    # is not the sync's (the loop is input- or host-bound whatever it reads).
    late = parts["input"] + parts["host"] + parts["unknown"]
    per_period = np.bincount(period[synced], weights=late[synced], minlength=len(periods))
    after_read = per_period[after_sync]
    # Within the knee's tolerance of the device's step, that work would not hold the device
    # back without the read (a loop without it would run within 10% of the device's step):
    # the idle time is the read's. Without the tolerance, the verdict of a loop whose own
    # batch (made on the main thread) is about as long as the device's step flipped between
    # sync- and input-bound from capture to capture (6.6 against 6.5 ms: input-bound).
    cap = busy_per_step * KNEE_TOLERANCE
    sync_hides = len(after_read) == 0 or float(np.median(after_read)) <= cap
    if not input_bound and sync_hides:
        # The host was held by the read until the device finished: what it did next
        # (fetch, dispatch, or untraced Python) is late because of the sync, up to the
        # device's step: without the read, the host could have done that much while the
        # device ran the step before. What it did beyond that (a checkpoint's file write
        # after reading the parameters: hundreds of ms) would idle the device anyway, and
        # keeps its own cause.
        of_period = per_period[period] if len(period) else np.zeros(0)
        kept = np.where(of_period > cap, 1.0 - cap / np.maximum(of_period, 1.0), 0.0)
        kept = np.where(synced, kept, 1.0)
        moved = np.zeros(len(starts))
        for cause in SYNC_RULE_TAKES:
            stays = np.round(parts[cause] * kept).astype(np.int64)
            moved += parts[cause] - stays
            parts[cause] = stays
        parts["sync"] = parts["sync"] + moved.astype(np.int64)
    final = {str(c): parts[c].astype(np.int64) for c in CAUSES}
    winner = largest_cause(final, len(starts))
    at = Attribution(starts, ends, periods.starts[period], claimed, final, owned, cap)
    return {
        S.STEP: steps.numbers[step_index],
        S.STEP_INDEX: step_index,
        S.START_NS: starts,
        S.END_NS: ends,
        S.PERIOD_START_NS: periods.starts[period],
        S.AFTER_SYNC: synced,
        **final,
        S.DURATION_NS: duration,
        S.CAUSE: winner,
        S.CAUSE_REASON: cause_reasons(at, winner, host),
    }


def close_short_gaps(busy: Intervals, min_gap_ns: int) -> Intervals:
    if len(busy) < 2:
        return busy
    short = (busy.starts[1:] - busy.ends[:-1]) < min_gap_ns
    return Intervals.union_of(
        np.concatenate((busy.starts, busy.ends[:-1][short])),
        np.concatenate((busy.ends, busy.starts[1:][short])),
    )


def _after_sync(periods: Intervals, host: HostActivity) -> np.ndarray:
    """Idle periods that open when a blocking read ends: a wait that began while the
    device was still busy and ended at (or shortly after) the moment it went idle, so the
    host was held until the device finished.
    """
    waits = host.sync_events
    out = np.zeros(len(periods), dtype=bool)
    if len(waits) == 0 or len(periods) == 0:
        return out
    w_start, w_end = waits.starts, waits.ends
    for k, p0 in enumerate(periods.starts.tolist()):
        hit = (w_start < p0) & (w_end >= p0) & (w_end <= p0 + SYNC_WAKE_TOLERANCE_NS)
        out[k] = bool(hit.any())
    return out


def evidence(
    gap: dict[str, int],
    host: HostActivity,
    after_sync: bool,
    input_bound: bool,
    gil_held: bool = False,
) -> list[str]:
    """Sentences on what the host did during one gap piece (``gap``: its row of the gap
    table, as numbers); ``gil_held``: the pipeline's read threads in the training process
    held the GIL (InputStages.threads_hold_gil), so the loop's untraced time is a wait."""
    out: list[str] = []
    g0, g1 = gap[S.START_NS], gap[S.END_NS]
    # The idle period this piece belongs to opened when a read returned.
    read = host.read_ending_at(gap[S.PERIOD_START_NS]) if after_sync else None
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
    loop = host.loop_code.described(g0, g1) if host.loop_code is not None else None
    if loop is not None and loop[0] >= int((g1 - g0) * GAP_LINE_SHARE):
        out.append(loop_code_sentence(*loop, of="of the gap", gil_held=gil_held))
    if gap["compile"] > 0:
        out.append(f"XLA compilation during {gap['compile'] / 1e6:.2f} ms of the gap")
    if gap["runtime"] >= (g1 - g0) * GAP_LINE_SHARE:
        # (A launch latency of a few us in a gap of ms is not worth a line.)
        said = (
            f"the device's next program was already dispatched for {gap['runtime'] / 1e6:.2f} "
            "ms of the gap: the runtime's latency, not the host's"
        )
        # First when it is most of the gap: the host's events then are beside the point.
        out.insert(0 if gap["runtime"] >= (g1 - g0) * GAP_LINE_FIRST else len(out), said)
    if gap["unknown"] > 0 and not out:
        out.append(
            "no traced activity on the training thread (Python code is invisible with the "
            "Python tracer off: capture with --python-tracer to see it)"
        )
    return out


def loop_code_sentence(
    ns: int, where: str, sites: list[tuple[str, int]], of: str, gil_held: bool = False
) -> str:
    """``the loop's own code (untraced) 250.10 ms of the gap, after the dispatch: sampled at
    train.py:231 save (in npyio save) 48 of 50 looks``; where the pipeline's read threads
    hold the GIL, the training thread's wait for it (input's time, not the loop's code)."""
    what = (
        "the training thread waiting for the GIL or a core, held by the input pipeline's "
        "read threads (untraced; the input's time)"
        if gil_held
        else "the loop's own code (untraced)"
    )
    text = f"{what} {ns / 1e6:.2f} ms {of}, {where}"
    if sites:
        looks = sum(n for _, n in sites)
        named = ", ".join(f"{site} {n} of {looks} looks" for site, n in sites[:2])
        text += f": sampled at {named}"
    return text


def attach_evidence(
    gaps: Table, host: HostActivity, input_bound: bool, origin_ns: int, gil_held: bool = False
) -> None:
    """Add each gap's evidence (for the EVIDENCE_GAPS longest: a GPU trace can hold
    as many gaps as kernels) and its start in ms from ``origin_ns``, in place."""
    n = len(gaps[S.START_NS])
    found = np.empty(n, dtype=object)
    for row in range(n):
        found[row] = []
    columns = (S.START_NS, S.END_NS, S.PERIOD_START_NS, "compile", "runtime", "unknown")
    after_sync = gaps[S.AFTER_SYNC]
    for row in longest_first(gaps[S.DURATION_NS])[:EVIDENCE_GAPS].tolist():
        g = {c: int(gaps[c][row]) for c in columns}
        found[row] = evidence(g, host, bool(after_sync[row]), input_bound, gil_held)
    gaps[S.EVIDENCE] = found
    gaps[S.START_MS] = (gaps[S.START_NS] - origin_ns) / 1e6


def attach_sync_sites(gaps: Table, host: HostActivity) -> None:
    """Add each gap's sync site, in place: where the blocking read that opened its idle
    period was made (the user's source line when the Python tracer was on, else the
    blocking event's name); None for a gap whose period no read opened."""
    found: dict[int, str] = {}
    periods = gaps[S.PERIOD_START_NS]
    for p0 in set(periods[gaps[S.AFTER_SYNC]].tolist()):
        read = host.read_ending_at(int(p0))
        if read is not None:
            found[int(p0)] = read_site_label(read[0], read[3])
    sites = np.empty(len(periods), dtype=object)
    sites[:] = [found.get(p0) for p0 in periods.tolist()]
    gaps[S.SYNC_SITE] = sites


def sync_sites(gaps: Table) -> tuple[str, ...]:
    """Where the syncs that opened gaps happen, the most frequent first (counted once per
    idle period, not per piece of it)."""
    sites: dict[str, int] = {}
    _, first = np.unique(gaps[S.PERIOD_START_NS], return_index=True)
    for site in gaps[S.SYNC_SITE][np.sort(first)].tolist():
        if site is not None:
            sites[site] = sites.get(site, 0) + 1
    return tuple(sorted(sites, key=lambda k: -sites[k]))
