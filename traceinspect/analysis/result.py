"""The result of an analysis: :class:`Analysis` (what ``analyze --json`` prints) and its parts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.arrays import longest_first
from traceinspect.analysis.input_stages import InputStages
from traceinspect.analysis.rules import Decision
from traceinspect.intervals import Intervals
from traceinspect.vocabulary import CAUSES

if TYPE_CHECKING:
    import pandas as pd

#: Equally long columns by name: what the analysis computes its tables as (no pandas), and
#: what :attr:`Analysis.per_step` and :attr:`Analysis.gaps` are built from.
Table = dict[str, np.ndarray]
GRAIN_WORKER_COUNT = "grain_worker_count"
INPUT_STAGE = "input_stage"


@dataclass(frozen=True, eq=False)
class Timeline:
    """What a timeline draws, computed once by the analysis (plots never analyse again):
    each device's busy spans, and the training thread's spans by category with each instant
    given to one category in :data:`~traceinspect.vocabulary.PRECEDENCE`, as idle time is
    given to one cause. Step bounds and idle spans by cause are ``per_step`` and ``gaps``.
    ``training_line_row`` and ``device_lines`` say which lines (``Trace.lines`` rows) those
    are: the training thread (None when none was found) and the lines whose events are the
    devices' work. ``origin_ns``: the trace's first event, where times are counted from (as
    ``start_ms``), so a timeline can be drawn from the analysis alone."""

    busy: dict[str, Intervals]
    thread: dict[str, Intervals]
    training_line_row: int | None
    device_lines: tuple[int, ...] = ()
    origin_ns: int = 0

    @property
    def training_thread_found(self) -> bool:
        return self.training_line_row is not None


@dataclass(frozen=True)
class Recommendation:
    """One thing to do. ``to_dict()`` is the object ``analyze --json`` prints under
    ``recommendations``: ``kind``, the fields of that kind, then ``message``; a pod adds the
    host(s) it applies to after the message (``on_host``, ``on_hosts``)."""

    kind: str
    message: str
    #: remove_sync: where the reads are (source lines, or the blocking events' names).
    where: tuple[str, ...] | None = None
    #: input_pipeline: the training thread's input time and the device's work, per step.
    input_ms_per_step: float | None = None
    device_busy_ms_per_step: float | None = None
    #: grain_worker_count: the count to use, the count in use (None: unknown), why, the
    #: step time expected with it, the limit that bound it, and what the probe measured.
    value: int | None = None
    current: int | None = None
    reason: str | None = None
    expected_step_ms: float | None = None
    bounded_by: str | None = None
    measured: dict[str, Any] | None = None
    #: input_stage: the stage of the input pipeline to fix first.
    stage: str | None = None
    #: Pod-wide kinds: the host it is about; grain_worker_count: each host's own count.
    host: str | None = None
    per_host: dict[str, int] | None = None
    #: Added by a pod to a host's own recommendation: the host, or hosts, it applies to.
    on_host: str | None = None
    on_hosts: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        # Only the fields this kind sets: most are None for any one kind.
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) is not None
        )
        return f"Recommendation({shown})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.where is not None:
            out["where"] = list(self.where)
        if self.input_ms_per_step is not None:
            out["input_ms_per_step"] = self.input_ms_per_step
            out["device_busy_ms_per_step"] = self.device_busy_ms_per_step
        if self.kind == GRAIN_WORKER_COUNT:
            out["value"] = self.value
            out["current"] = self.current
        if self.reason is not None:
            out["reason"] = self.reason
            out["expected_step_ms"] = self.expected_step_ms
            out["bounded_by"] = self.bounded_by
        elif self.expected_step_ms is not None:
            # remove_sync, recurring_stall, host_callback, the loop's own code: the step
            # expected once the advice is followed.
            out["expected_step_ms"] = self.expected_step_ms
        if self.measured is not None:
            out["measured"] = self.measured
        if self.stage is not None:
            out["stage"] = self.stage
        if self.host is not None:
            out["host"] = self.host
        if self.per_host is not None:
            out["per_host"] = self.per_host
        out["message"] = self.message
        if self.on_host is not None:
            out["host"] = self.on_host
        if self.on_hosts is not None:
            out["hosts"] = list(self.on_hosts)
        return out


Severity = Literal["warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One thing set up wrong: the rule, how much it matters, what was seen, what to do."""

    rule: str
    severity: Severity
    message: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
        }


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
    """The result of :func:`analyze`; ``to_dict()`` is what ``analyze --json`` prints.

    ``per_step`` (one row per step) and ``gaps`` (one row per idle gap piece) are pandas
    frames built when first asked for from ``per_step_columns`` and ``gap_columns``, so
    that printing an analysis never imports pandas.
    """

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
    recommendations: tuple[Recommendation, ...]
    per_step_columns: Table = field(repr=False)
    gap_columns: Table = field(repr=False)
    notes: tuple[str, ...] = ()
    #: Median device time per step inside collectives (all-reduce, all-gather, ...): part
    #: of the busy time, and in a multi-host run the time spent waiting for other hosts.
    collective_ms_per_step: float = 0.0
    #: How the capture chose the window and whether it is representative of the run (from
    #: the capture sidecar; None without one).
    window: dict[str, Any] | None = None
    #: What the timeline plot draws (None in the compact per-host results of a pod).
    timeline: Timeline | None = field(default=None, repr=False)
    #: Milliseconds per batch by input-pipeline stage (None without capture's measurement).
    input_stages: InputStages | None = None
    #: What is set up wrong (analysis/findings.py), most important first.
    findings: tuple[Finding, ...] = ()
    #: Digests of the first batches the loop drew (from capture): a pod compares its hosts'.
    first_batches: tuple[str, ...] = field(default=(), repr=False)
    #: A stall that recurs every N steps over the whole run (a synchronous checkpoint,
    #: evaluation): ``analysis/stalls.py``'s figures and what it is; None without one.
    recurring_stall: dict[str, Any] | None = None
    #: What named the verdict: the row of the rules table that fired, its cause, that
    #: cause's share and basis, and the runner-up (``analysis/rules.py``).
    decision: Decision | None = None
    #: How busy the machine was while traced, and the cores that left the script
    #: (``analysis/workers_inputs.py``'s ``machine_load_record``); None where the capture
    #: recorded none (then absent from ``to_dict()``).
    machine_load: dict[str, Any] | None = None
    #: What the run's detectors found beside the idle time, by cause (``stall``,
    #: ``callback``, ``loop_cpu``, ``pipeline_cpu``): its time per step (a stall's spread
    #: over the run's steps), its share of step time and its basis (observed, inferred,
    #: measured). The parts of a step that no window row holds, for ``compare``.
    run_parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @cached_property
    def per_step(self) -> pd.DataFrame:
        """One row per step: its number, start, wall, busy, collective, input and device
        work time, and idle time by cause (ns)."""
        return table_frame(self.per_step_columns)

    @cached_property
    def gaps(self) -> pd.DataFrame:
        """One row per idle gap piece (a gap cut at step boundaries): its step, times, time
        by cause, cause (and why, where the evidence points elsewhere), evidence and sync
        site."""
        return table_frame(self.gap_columns)

    def longest_gaps(self, count: int | None = None) -> list[int]:
        """Rows of ``gaps``, longest first (of equals, the earlier first)."""
        order = longest_first(self.gap_columns[S.DURATION_NS])
        return (order if count is None else order[:count]).tolist()

    def to_dict(self, max_gaps: int | None = None) -> dict[str, Any]:
        ps, g = self.per_step_columns, self.gap_columns
        return {
            "path": self.path,
            "backend": self.backend,
            "devices": list(self.devices),
            **({} if self.machine_load is None else {"machine_load": self.machine_load}),
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
            "decided_by": self.decision.to_dict() if self.decision else None,
            "summary": self.summary,
            "input_ms_per_step": self.input_ms_per_step,
            "device_busy_ms_per_step": self.device_busy_ms_per_step,
            S.COLLECTIVE_MS_PER_STEP: self.collective_ms_per_step,
            "sync_sites": list(self.sync_sites),
            "recommendations": [r.to_dict() for r in self.recommendations],
            "per_step": [
                {
                    "step": int(ps[S.STEP][i]),
                    "wall_ms": _ms(ps[S.WALL_NS][i]),
                    "busy_ms": _ms(ps[S.BUSY_NS][i]),
                    "idle_ms": _ms(ps[S.IDLE_NS][i]),
                    "collective_ms": _ms(ps[S.COLLECTIVE_NS][i]),
                    "idle_by_cause_ms": {c: _ms(ps[S.idle_cause_ns(c)][i]) for c in CAUSES},
                }
                for i in range(len(ps[S.STEP]))
            ],
            "gaps": [
                {
                    "step": int(g[S.STEP][i]),
                    S.START_MS: round(float(g[S.START_MS][i]), 4),
                    "duration_ms": round(int(g[S.DURATION_NS][i]) / 1e6, 4),
                    "cause": str(g[S.CAUSE][i]),
                    S.CAUSE_REASON: g[S.CAUSE_REASON][i],
                    "evidence": list(g[S.EVIDENCE][i]),
                }
                for i in self.longest_gaps(max_gaps)
            ],
            "notes": list(self.notes),
            "window": self.window,
            "input_stages": self.input_stages.to_dict() if self.input_stages else None,
            "findings": [f.to_dict() for f in self.findings],
            "recurring_stall": self.recurring_stall,
            "run_parts": self.run_parts,
        }


def _ms(ns: Any) -> float:
    """Nanoseconds as milliseconds to 4 places, with numpy's rounding (per-step figures
    have always been printed so; a gap's duration with Python's)."""
    return float(round(np.float64(ns) / 1e6, 4))


def table_frame(table: Table) -> pd.DataFrame:
    """A table as a pandas frame (columns of Python objects stay ``object``)."""
    import pandas as pd

    return pd.DataFrame(
        {
            name: pd.Series(values, dtype=object) if values.dtype == object else values
            for name, values in table.items()
        }
    )


def reasoning(decision: Decision, fractions: dict[str, float]) -> str:
    """The decision in one line, for ``-v``: the rule that fired, the deciding cause's share
    and basis, the runner-up, and the idle time by cause it read. Logged by the analysis when
    it decides and by the CLI for an answer kept in the cache."""
    occasional = " (too few to name the verdict: an occasional read)"
    return (
        f"verdict {decision.verdict} by rule {decision.rule} ({decision.cause} "
        f"{decision.share * 100:.1f}%, {decision.basis}; runner-up {decision.runner_up} "
        f"{decision.runner_up_share * 100:.1f}%): idle time as a share of step time: "
        + ", ".join(f"{c} {v:.1%}" for c, v in fractions.items())
        + f"; sync idle time recurs in {decision.sync_steps * 100:.0f}% of the steps"
        + (occasional if decision.occasional_sync else "")
    )
