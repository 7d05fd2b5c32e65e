"""The judgement of a run from its three figures: :func:`claims` of the figures and the
evidence, the row of isolate's table (``analysis/rules.py``'s ``ISOLATE_RULES``) that fires,
and the words for that row (:func:`judge`).

With ``T`` target, ``L`` loader and ``R`` real, and the tolerance ``TOLERANCE`` (20%,
``thresholds.ISOLATE_TOLERANCE``, where it was measured):

- ``L > T x 1.20``: **input-bound**. The pipeline alone cannot keep up with the step.
- else ``R > T x 1.20``: **sync-bound**. The pipeline keeps up and yet the real step is
  slower than the step with free input: input and the step do not overlap, which is what a
  host-device sync each step does. The real phase times the loop's host reads of device
  values (``float(x)``, ``print(x)``, ``.block_until_ready()``, ``jax.device_get``, ...):
  when they wait less than 20% of ``T`` per step, nothing waits on the device and the
  verdict is **host-bound** instead (the training thread's own work, or the pipeline's
  competition for the cores, sets the pace). On XLA's CPU backend, where the loop waits
  neither there nor in ``next()`` and worker processes make its batches, their CPU per
  batch ``W`` runs on the cores the step computes on: the real step is held to ``T + W /
  cores`` (the cores other processes leave it), and within 20% of that it is
  **device-bound** (nothing waits; the cores are this backend's device), beyond it
  host-bound.
- else **device-bound**: the script runs at the pace of the step with free input.

That order is written once, as the rows of ``ISOLATE_RULES``; this module builds the claims
the rows test and says what the row that fired means.

Why the workers' share of the cores counts: the family's two light workers (``--record
light --workers 2``, device-bound by its plain runs on earlier days and on an H200, where it
ran at 8.86 ms, the step with free input) read 1.19-1.36x the target under isolate while
another process held one of the 2 cores, host-bound in 8 of 9 runs over three sets, and
1.24-1.28x on the quiet machine: the workers' 2.1-3.1 ms of CPU a batch on 1 free core (1.9
quiet) put ``T + W / cores`` at 15.9-17.2 ms against real steps of 16.8-18.3 (8.8 against
9.6-9.9 quiet), 1.05-1.12x (``sample_traces/scenarios/family/isolate_light-4.json``). With the
rule, that loop and the same workers on records from memory read device-bound in 18 of 18
runs on both stacks, loaded and quiet (``isolate_loaded-4.json``,
``isolate_loaded-4-3.12.json``: ``R / T`` up to 1.30, 6 of them above 1.20), and under the
load five loops held their verdict 3 of 3 each (``isolate_loaded-5.json``). A loop that
waits on its own thread (a sleep, a read, the pipeline in next()) is not credited: its loss
is not on the workers' cores.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from traceinspect.analysis.result import Recommendation
from traceinspect.analysis.rules import Claim, Decision, decide_measured, isolate_rules
from traceinspect.errors import UsageError
from traceinspect.isolate.advice import _input_advice, _worker_advice
from traceinspect.isolate.evidence import Evidence
from traceinspect.thresholds import ISOLATE_NEXT_SHARE, ISOLATE_TOLERANCE
from traceinspect.vocabulary import Verdict

#: Slower than the target by more than this factor counts (``thresholds.ISOLATE_TOLERANCE``).
TOLERANCE = ISOLATE_TOLERANCE


@dataclasses.dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str
    rule: str
    suggested_workers: int | None
    workers: Recommendation | None = None
    #: What the real step was held to beyond the target step (ms): the workers' CPU on the
    #: cores, where the rule counted it (:attr:`Evidence.workers_on_cores_ms`), else 0.
    cores_share_ms: float = 0.0
    #: The row of isolate's table that fired, as ``analyze`` records its own
    #: (``decided_by``): its id, the cause, and that cause's share of the real step (the
    #: device's: the share the step with free input explains), measured by the three timings.
    decision: Decision | None = None


def claims(
    target_ms: float, loader_ms: float, real_ms: float, evidence: Evidence | None = None
) -> list[Claim]:
    """What isolate's table tests (``analysis/rules.py``, where each is described): the three
    figures as ratios, the loop's waits in the real phase, the workers' share of the cores,
    and the real step's loss; a figure not measured is left out."""
    t, lo, r = target_ms, loader_ms, real_ms
    evidence = evidence or _NO_EVIDENCE

    def claim(name: str, share: float) -> Claim:
        return Claim(name, share, "measured")

    out = [claim("loader", lo / t), claim("real", r / t), claim("loss", max(0.0, r - t) / r)]
    if evidence.host_read_ms is not None:
        out.append(claim("reads", evidence.host_read_ms / t))
    if evidence.input_wait_ms is not None and r > t:
        out.append(claim("next", evidence.input_wait_ms / (r - t)))
    share = evidence.workers_on_cores_ms
    if share is not None:
        beyond = max(0.0, r - t - share) / r
        out += [claim("cores", r / (t + share)), claim("loss_on_cores", beyond)]
    return out


def judge(
    target_ms: float,
    loader_ms: float,
    real_ms: float,
    *,
    tolerance: float = TOLERANCE,
    evidence: Evidence | None = None,
) -> Judgement:
    """The verdict from the three figures: the row of isolate's table that fires on their
    :func:`claims`, in words."""
    if min(target_ms, loader_ms, real_ms) <= 0:
        raise UsageError("the three step times must be positive")
    evidence = evidence or _NO_EVIDENCE
    decision = decide_measured(claims(target_ms, loader_ms, real_ms, evidence), _table(tolerance))
    figures = _Figures(target_ms, loader_ms, real_ms, tolerance, evidence)
    return _SAY[decision.rule](figures, decision)


_NO_EVIDENCE = Evidence(None, None, None, None, None, None)
_table = functools.cache(isolate_rules)


@dataclasses.dataclass(frozen=True)
class _Figures:
    """What the words of a judgement quote."""

    t: float
    lo: float
    r: float
    tolerance: float
    evidence: Evidence

    @property
    def within(self) -> str:
        return f"{self.tolerance - 1:.0%}"

    @property
    def limit(self) -> float:
        return self.t * self.tolerance

    def loader_keeps_up(self) -> str:
        return f"loader <= target x {self.tolerance:.2f} ({self.lo:.2f} <= {self.limit:.2f} ms)"

    def real_slower(self) -> str:
        return (
            f"{self.loader_keeps_up()} and real > target x {self.tolerance:.2f} "
            f"({self.r:.2f} > {self.limit:.2f} ms)"
        )

    def no_sync(self) -> str:
        """The rule's words where the loop waited too little in reads (the row tested it)."""
        return (
            f"{self.real_slower()}, but the loop waited {self.evidence.host_read_ms or 0.0:.2f} "
            "ms per step in host reads of device values, less than "
            f"{self.within} of the target step"
        )

    def slower(self) -> str:
        t, lo, r = self.t, self.lo, self.r
        return (
            f"The input pipeline alone keeps up ({lo:.2f} ms per batch against a {t:.2f} ms "
            f"step with free input), yet the real step takes {r:.2f} ms, {r / t - 1:.0%} more"
        )


def _loader_slower(f: _Figures, decision: Decision) -> Judgement:
    t, lo, r = f.t, f.lo, f.r
    reason = (
        f"The input pipeline alone delivers a batch every {lo:.2f} ms, more than {f.within} "
        f"slower than the {t:.2f} ms step the script takes when input costs nothing: the "
        f"loop waits for input (real step {r:.2f} ms)."
    )
    advice = _worker_advice(t, lo, f.evidence)
    return Judgement(
        "input-bound",
        reason + _input_advice(advice, f.evidence),
        f"loader > target x {f.tolerance:.2f}: {lo:.2f} > {f.limit:.2f} ms",
        None if advice is None else advice.value,
        advice,
        decision=decision,
    )


def _real_slower_no_overlap(f: _Figures, decision: Decision) -> Judgement:
    reason = (
        f"{f.slower()}: input and the step do not overlap, as when the loop forces a "
        "host-device sync every step (print(loss), float(x), .block_until_ready()). Read "
        "values a step late or every N steps."
    )
    if f.lo > f.t:
        reason += (
            f" The pipeline has little headroom (within {f.within} of the step), so part "
            "of the gap may be input."
        )
    reason += _sync_evidence(f.evidence)
    return Judgement("sync-bound", reason, f.real_slower(), None, decision=decision)


def _training_thread_work(f: _Figures, decision: Decision) -> Judgement:
    spent = f.evidence.input_wait_ms
    in_next = f" ({spent:.2f} ms per step in Grain next())" if spent is not None else ""
    reason = (
        f"{f.slower()}, and the loop hardly waits on the device: no sync. The training "
        f"thread's own work sets the pace: the pipeline's work on it{in_next}, Python "
        "and dispatch, or the pipeline's competition for the host's cores. Move input "
        "work off the training thread (mp_prefetch workers, read threads)."
    )
    return Judgement("host-bound", reason, f.no_sync(), None, decision=decision)


def _no_wait_beside_the_step(f: _Figures, decision: Decision) -> Judgement:
    # Nor in next(): the pipeline's work runs beside the step, not on its thread (the
    # family's 16 read threads: 0.1 ms a step in next(), the real step 1.19-1.26x the
    # target; moved into 1-6 workers it ran 9.8-12.2 ms against 8.8 in the process).
    reason = (
        f"{f.slower()}, and the loop hardly waits on the device (no sync) nor in "
        f"Grain next() ({f.evidence.input_wait_ms or 0.0:.2f} ms per step): the pipeline's "
        "work beside the step (its read threads or workers) competes with it for the host's "
        "cores (on XLA's CPU backend the step computes on them), or the loop's own work "
        "between steps costs it. Worker processes would not help: they run the "
        "same work on the same cores; make the pipeline's work cheaper (on an "
        "accelerator host it competes only with the host's own work)."
    )
    return Judgement("host-bound", reason, f.no_sync(), None, decision=decision)


def _workers_on_the_cores(f: _Figures, decision: Decision) -> Judgement:
    """A real step that waits nowhere (no sync, hardly in ``next()``) on XLA's CPU backend
    with worker processes whose CPU is known: held to the target step plus the workers' CPU
    per batch over the cores the script had (``T + W / cores``), device-bound within the
    tolerance of that, else host-bound (the module's docstring says why)."""
    t, r, ev = f.t, f.r, f.evidence
    share, batch, free = ev.workers_on_cores_ms, ev.workers_cpu_ms_per_batch, ev.free_cores
    # The row tested the workers' share of the cores: all three are known.
    assert share is not None and batch is not None and free is not None
    held = t + share
    fits = decision.verdict == "device-bound"
    sign = "<=" if fits else ">"
    rule = (
        f"{f.no_sync()}; on XLA's CPU backend the workers' {batch:.2f} ms of CPU per batch on "
        f"{free:.1f} free core(s): real {sign} (target + {share:.2f} ms) x "
        f"{f.tolerance:.2f} ({r:.2f} {sign} {held * f.tolerance:.2f} ms)"
    )
    spent = ev.input_wait_ms or 0.0
    if fits:
        reason = (
            f"The real step ({r:.2f} ms) is {r / t - 1:.0%} above the step with free input "
            f"({t:.2f} ms), and the loop hardly waits on the device (no sync) or in Grain "
            f"next() ({spent:.2f} ms per step): the difference is the workers' "
            f"{batch:.2f} ms of CPU per batch on the {free:.1f} core(s) the script had, the "
            f"cores XLA's CPU backend computes the step on (the step with free input plus "
            f"that share: {held:.2f} ms, the real step within {f.within} of it). Nothing waits: "
            "the cores, this backend's device, set the pace. On an accelerator the workers' "
            "work runs beside the device's; here only cheaper preprocessing wins the rest."
        )
        return Judgement(
            "device-bound", reason, rule, None, cores_share_ms=share, decision=decision
        )
    reason = (
        f"The real step ({r:.2f} ms) is {r / t - 1:.0%} above the step with free input "
        f"({t:.2f} ms), more than the workers' {batch:.2f} ms of CPU per batch on the "
        f"{free:.1f} core(s) the script had explains ({held:.2f} ms), and the loop hardly "
        f"waits on the device (no sync) or in Grain next() ({spent:.2f} ms per step): the "
        "training process's own work beside the step (taking batches from the workers, "
        "other threads) or between steps (Python, dispatch) costs it. Worker processes "
        "would not help; make that work cheaper (analyze on a capture shows the training "
        "thread's time between steps)."
    )
    return Judgement("host-bound", reason, rule, None, cores_share_ms=share, decision=decision)


def _within_tolerance(f: _Figures, decision: Decision) -> Judgement:
    t, lo, r = f.t, f.lo, f.r
    reason = (
        f"The real step ({r:.2f} ms) is within {f.within} of the step with free input "
        f"({t:.2f} ms), and the pipeline alone keeps up ({lo:.2f} ms per batch): input costs "
        "the step nothing; the device's work (or the host's dispatch of it) sets the pace."
    )
    return Judgement(
        "device-bound",
        reason,
        f"{f.loader_keeps_up()} and real <= target x {f.tolerance:.2f} "
        f"({r:.2f} <= {f.limit:.2f} ms)",
        None,
        cores_share_ms=_share_if_slower(t, f.tolerance, f.evidence),
        decision=decision,
    )


#: The words for each row of isolate's table that :func:`judge` can fire (``runs_disagree``
#: is settle's: it compares two judgements).
_SAY: dict[str, Callable[[_Figures, Decision], Judgement]] = {
    "loader_slower": _loader_slower,
    "workers_on_the_cores": _workers_on_the_cores,
    "no_wait_beside_the_step": _no_wait_beside_the_step,
    "training_thread_work": _training_thread_work,
    "real_slower_no_overlap": _real_slower_no_overlap,
    "within_tolerance": _within_tolerance,
}


def _share_if_slower(t: float, tolerance: float, evidence: Evidence) -> float:
    """The workers' share of the cores (ms) a real step more than the tolerance slower than
    ``t`` would be held to beyond it (the ``workers_on_the_cores`` rows), for a loop that
    waits neither in reads nor in next() (below ``ISOLATE_NEXT_SHARE`` of the least loss
    those rows see); 0 where it would not count. What :func:`near_margin` measures a
    device-bound run's margin against."""
    share = evidence.workers_on_cores_ms
    waited, spent = evidence.host_read_ms, evidence.input_wait_ms
    if share is None or waited is None or spent is None:
        return 0.0
    least = t * (tolerance - 1)
    return share if waited < least and spent < least * ISOLATE_NEXT_SHARE else 0.0


def _sync_evidence(evidence: Evidence) -> str:
    reads, read_ms = evidence.host_reads_per_step, evidence.host_read_ms
    if reads is None or read_ms is None:
        return ""
    return (
        f" The loop read device values {reads:.2g} time(s) per step and waited "
        f"{read_ms:.2f} ms per step in those reads."
    )
