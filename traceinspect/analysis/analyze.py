"""Why was the device idle? The analysis of one host's trace, step by step.

:func:`analyze` runs one pipeline, each stage in a module of its own:

1. **measure** (``measure``): the device's busy time, the steps, the training thread, and the
   per-step ledger whose parts (busy, idle by cause) sum to each step's wall time;
2. **detect** (``detectors``): the run-level causes that show as something else in the idle
   time (a recurring stall, a host callback, the loop's CPU, a pipeline on the training
   process's threads), each a claim, never a verdict;
3. **decide** (``rules``): one ordered table over the idle claims and the detectors' claims
   names the verdict and records the rule that fired (``decided_by``);
4. **advise** and **explain** (``advice``, ``explain``): the words, rendered last from the
   decision, each expected step from the one counterfactual (``counterfactual``).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis import invariants
from traceinspect.analysis.advice import advise
from traceinspect.analysis.advice_causes import pace_note, read_gains_nothing
from traceinspect.analysis.detectors import Stall, detect, run_part
from traceinspect.analysis.explain import notes, summary
from traceinspect.analysis.findings import count_dispatches, findings
from traceinspect.analysis.measure import Measured, measure
from traceinspect.analysis.result import Analysis, StepSummary, Timeline, reasoning
from traceinspect.analysis.rules import Decision, decide, idle_claims
from traceinspect.analysis.window import median
from traceinspect.analysis.workers import WorkerMeasurement
from traceinspect.analysis.workers_inputs import machine_load_record
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace
from traceinspect.vocabulary import CAUSES, PRECEDENCE

log = logging.getLogger(__name__)

__all__ = ["Analysis", "StepSummary", "analyze"]


def analyze(trace: Trace) -> Analysis:
    """Find every idle gap of the device within complete steps and name its cause.

    Raises :class:`~traceinspect.errors.AnalysisError` when the trace shows no device
    activity or no steps, or when its steps have no device work of their own, saying what
    was found and what to capture instead.
    """
    m = measure(trace)
    found = detect(m)
    free_read = read_gains_nothing(m, found)
    idle = [
        replace(c, share=0.0) if free_read and c.cause == "sync" else c
        for c in idle_claims(m.fractions)
    ]
    decision = decide([*idle, *(f.claim for f in found.values())], m.sync_steps)
    _log(m, decision)
    advice = advise(m, found, decision)
    if free_read:
        advice = tuple(r for r in advice if r.kind != "remove_sync")
    grain = trace.sidecar.grain if trace.sidecar is not None else None
    host_events, per_step = m.host.events, m.per_step
    checks = findings(
        verdict=decision.verdict,
        fractions=m.fractions,
        recommendations=advice,
        sidecar=trace.sidecar,
        measured=WorkerMeasurement.from_sidecar(grain.measured if grain else None),
        step_ms=m.summary.typical_ms,
        dispatches=count_dispatches(
            host_events, m.steps, int(np.nansum(per_step[S.DEVICE_WORK_NS]))
        ),
        steps_one_call_each=m.steps.one_call_each,
    )
    stall = found.get("stall")
    analysis = Analysis(
        path=str(trace.path),
        backend=m.activity.backend.kind,
        devices=tuple(m.activity.busy),
        steps=m.summary,
        busy_fraction=(m.total_wall_ns - m.idle_ns) / m.total_wall_ns if m.total_wall_ns else 0.0,
        idle_fraction=m.idle_ns / m.total_wall_ns if m.total_wall_ns else 0.0,
        idle_by_cause_ms={c: round(m.by_cause_ns[c] / 1e6, 4) for c in CAUSES},
        cause_fractions={c: round(m.fractions[c], 4) for c in CAUSES},
        verdict=decision.verdict,
        summary=summary(m, found, decision),
        input_ms_per_step=round(m.input_ns / 1e6, 4),
        device_busy_ms_per_step=round(m.device_ns / 1e6, 4),
        sync_sites=m.sync_sites,
        recommendations=advice,
        per_step_columns=per_step,
        gap_columns=m.gaps,
        notes=(
            *notes(m, found, decision),
            *([free_read] if free_read else []),
            *filter(None, [pace_note(m, stall.detail if stall else None, advice)]),
        ),
        collective_ms_per_step=round(median(per_step[S.COLLECTIVE_NS]) / 1e6, 4),
        window=m.window,
        input_stages=m.stages,
        findings=checks,
        first_batches=grain.first_batches if grain is not None else (),
        recurring_stall=None if stall is None else _stall_record(stall.detail),
        timeline=_timeline(m),
        decision=decision,
        machine_load=machine_load_record(trace.sidecar),
        run_parts={c: run_part(m, f) for c, f in found.items()},
    )
    if invariants.enabled():
        invariants.check_invariants(analysis)
    return analysis


def _stall_record(found: Stall) -> dict[str, object]:
    nature = found.nature
    return {**found.stall.to_dict(), "what": nature.kind, "in_window": nature.in_window}


def _timeline(m: Measured) -> Timeline:
    """What a timeline draws, computed once here (plots never analyse again)."""
    return Timeline(
        busy=m.activity.busy,
        thread=Intervals.claim_in_order([(c, getattr(m.host, c)) for c in PRECEDENCE]),
        training_line_row=m.host.main_line_row,
        device_lines=m.activity.work_line_rows,
        origin_ns=m.trace.start_ns,
    )


def _log(m: Measured, decision: Decision) -> None:
    """The decision, for ``-v``: the shares, the rule that fired and the runner-up."""
    log.info("%s", reasoning(decision, m.fractions))
