"""The results of a multi-host analysis: each host's (HostResult), the straggler's
(Straggler) and the pod's (PodAnalysis, with its ``analyze --json`` form)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis, Finding, Recommendation


@dataclass(frozen=True, eq=False)
class HostResult:
    """One host's part of a multi-host analysis: its analysis, or why there is none."""

    host: str
    location: str
    file_bytes: int
    analysis: Analysis | None
    error: str | None = None
    seconds: float = 0.0  # reading and analysing this host's file
    #: Digests of the first batches this host's loop drew, from its capture sidecar: read
    #: even when the trace could not be analysed (a window the analysis refused, a trace
    #: without events), so the cross-host data check still sees every host.
    first_batches: tuple[str, ...] = ()
    #: For a host that could not be analysed: the checks of its capture sidecar alone
    #: (``findings.sidecar_findings``); an analysed host's are in its analysis.
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return self.analysis is not None

    @property
    def batch_digests(self) -> tuple[str, ...]:
        """The host's batch digests: its analysis's, else those read from its sidecar."""
        if self.analysis is not None and self.analysis.first_batches:
            return self.analysis.first_batches
        return self.first_batches


@dataclass(frozen=True)
class Straggler:
    """The host that starves the pod, and how sure the evidence makes us.

    ``input_wait_ms_per_step`` and ``others_input_wait_ms_per_step`` are input *idle* times
    (the device idle for input, the pod tables' ``input_idle_ms_per_step``); the fields keep
    their historical names because ``to_dict()`` gives them as ``analyze --json`` keys.
    """

    host: str
    starved_steps: int  # aligned steps in which this host's input idle time was the longest
    aligned_steps: int
    input_wait_ms_per_step: float  # input idle time, median, this host
    others_input_wait_ms_per_step: float  # the largest input idle median among the others
    collective_ms_per_step: float  # median, this host
    others_collective_ms_per_step: float  # median over the other hosts
    explained_fraction: float | None  # others' extra collective time / its input idle time
    confirmed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True, eq=False)
class PodAnalysis:
    """The result of :func:`~traceinspect.analysis.straggler.analyze_pod`; ``to_dict()`` is
    what ``analyze --json`` prints for a run with several hosts."""

    path: str
    run: str
    results: tuple[HostResult, ...]
    #: One row per host (index ``host``): verdict, step times, input idle, collective time.
    hosts: pd.DataFrame = field(repr=False)
    #: One row per (step, host) for the steps all analysed hosts traced (ns columns).
    steps: pd.DataFrame = field(repr=False)
    #: One row per aligned step: slowest host, starved host, spread of step times.
    per_step: pd.DataFrame = field(repr=False)
    straggler: Straggler | None
    verdict: str
    summary: str
    recommendations: tuple[Recommendation, ...]
    notes: tuple[str, ...] = ()
    #: What is set up wrong across hosts (each host's own findings are in its analysis).
    findings: tuple[Finding, ...] = ()
    #: What decided the pod's verdict: its rule, the host it follows, that host's own
    #: ``decided_by`` (``analysis/pod_advice.py``'s ``pod_verdict``).
    decided_by: dict[str, Any] | None = None

    @property
    def analyses(self) -> dict[str, Analysis]:
        """The per-host analyses that succeeded, by host name."""
        return {r.host: r.analysis for r in self.results if r.analysis is not None}

    def to_dict(self, max_gaps: int = 10) -> dict[str, Any]:
        def keyed(row: pd.Series | dict[Any, Any]) -> dict[str, Any]:
            return {_JSON_KEY.get(str(k), str(k)): _jsonable(v) for k, v in row.items()}

        hosts = []
        for r in self.results:
            entry: dict[str, Any] = {S.HOST: r.host, "location": r.location}
            entry["file_bytes"] = r.file_bytes
            entry["seconds"] = round(r.seconds, 3)
            if r.analysis is None:
                entry[S.ERROR] = r.error
            else:
                row = self.hosts.loc[r.host]
                entry[S.ROLE] = str(row[S.ROLE])
                entry["analysis"] = r.analysis.to_dict(max_gaps=max_gaps)
            hosts.append(entry)
        return {
            "path": self.path,
            "run": self.run,
            "host_count": len(self.results),
            "analysed_hosts": len(self.analyses),
            "verdict": self.verdict,
            "decided_by": self.decided_by,
            "summary": self.summary,
            "straggler": None if self.straggler is None else self.straggler.to_dict(),
            "recommendations": [r.to_dict() for r in self.recommendations],
            "hosts_table": [{S.HOST: str(h), **keyed(row)} for h, row in self.hosts.iterrows()],
            "steps": [keyed(r) for r in self.per_step.to_dict(orient="records")],
            "hosts": hosts,
            "notes": list(self.notes),
            "findings": [f.to_dict() for f in self.findings],
        }


# Pod table columns whose analyze --json key keeps its historical spelling: "input wait"
# there is the device's input idle time (the column's name), not the training thread's
# wait for a batch (the sweep's input_wait_ms). Readers of the JSON rely on these keys.
_JSON_KEY = {
    S.INPUT_IDLE_MS_PER_STEP: "input_wait_ms_per_step",
    S.STARVED_INPUT_IDLE_MS: "starved_input_wait_ms",
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if np.isnan(value) else round(float(value), 4)
    if value is pd.NA or value is None:
        return None
    return value if isinstance(value, (int, str, bool)) else str(value)
