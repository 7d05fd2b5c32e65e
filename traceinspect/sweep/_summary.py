"""The sweep's result (SweepResult: every run and the count it recommends, its tables and
JSON) from given numbers: pure. The runs are ``_runs.py``; the choice of a count
``_choice.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traceinspect.errors import UsageError
from traceinspect.sweep._choice import (
    AGREES_ABOVE_KNEE,
    TOLERANCE,
    choose,
    counts_in_words,
    prediction_vs_measured,
    resolve_metric,
)
from traceinspect.sweep._runs import (
    CHOSEN,
    CRASHED,
    ELAPSED_S,
    ERROR,
    EXIT_CODE,
    FIRST_UNTRACED_MS,
    INPUT_WAIT_MS,
    MEAN_MS,
    MEDIAN_MS,
    MESSAGE,
    METRICS,
    NO_TRACE,
    OBSERVED_WORKERS,
    OK,
    P10_MS,
    P90_MS,
    RUN_DIR,
    SPREAD,
    STATUS,
    STATUSES,
    STEPS,
    TIMEOUT,
    TYPICAL,
    UNANALYSABLE,
    UNTRACED,
    UNTRACED_MS,
    VERDICT,
    VS_BEST,
    WORKERS,
    SweepRun,
    _int,
    idle_column,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "AGREES_ABOVE_KNEE",
    "CRASHED",
    "ERROR",
    "METRICS",
    "NO_TRACE",
    "OK",
    "RUN_DIR",
    "STATUSES",
    "TIMEOUT",
    "TOLERANCE",
    "TYPICAL",
    "UNANALYSABLE",
    "UNTRACED",
    "SweepRun",
    "choose",
    "counts_in_words",
    "idle_column",
    "prediction_vs_measured",
    "resolve_metric",
]


@dataclass(frozen=True)
class Scatter:
    """How far apart the two runs of a count the sweep timed again read, where that is more
    than the tolerance that decides: the counts whose figures lie within it of the best are
    then in an order one run each does not settle.

    On this project's 2-core machine one plain run of a family loop at 4 workers read 9.5 to
    14.6 ms over five rounds, and counts 3 to 6 had medians 10.7-12.0 ms in no stable order
    (``sample_traces/scenarios/family/MEASUREMENTS.md``): a sweep there chose 3 twice and 4
    once."""

    #: The count whose two runs differed most, and its first and second figures (ms).
    workers: int
    first_ms: float
    second_ms: float
    #: ``|second - first| / min(first, second)``.
    fraction: float
    #: The counts (ascending) whose figure is within ``fraction`` of the best one.
    within: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "first_step_ms": self.first_ms,
            "second_step_ms": self.second_ms,
            "fraction": round(self.fraction, 4),
            "within": list(self.within),
        }


def scatter_of(result: SweepResult) -> Scatter | None:
    """:class:`Scatter` of a sweep compared by its untraced figures: the widest pair of runs
    of one count, when it is wider than ``result.tolerance`` and more than one count lies
    within it of the best figure. None otherwise (no count timed twice, or a scatter that
    leaves the choice standing)."""
    best = result.best_step_ms
    if result.metric != UNTRACED or best is None or best <= 0:
        return None
    pairs = [
        (r.workers, r.first_untraced_ms, r.untraced_ms)
        for r in result.runs
        if r.ok and r.first_untraced_ms and r.untraced_ms
    ]
    if not pairs:
        return None

    def apart(pair: tuple[int, float, float]) -> float:
        return abs(pair[2] - pair[1]) / min(pair[1], pair[2])

    widest = max(pairs, key=lambda pair: (apart(pair), -pair[0]))
    fraction = apart(widest)
    limit = best * (1 + fraction) * (1 + 1e-12)
    within = tuple(
        r.workers
        for r in result.runs
        if r.ok and (t := r.untraced_ms) is not None and 0 < t <= limit
    )
    if fraction <= result.tolerance or len(within) < 2:
        return None
    return Scatter(widest[0], widest[1], widest[2], fraction, within)


@dataclass(frozen=True)
class SweepResult:
    """Every run of a sweep, sorted by worker count, and the count it recommends.

    ``chosen`` is the smallest worker count whose step time (``metric``: median or mean) is
    within ``tolerance`` of the best one; ``best`` is the count with the lowest step time
    (the smallest count on a tie). Both are None when no run could be analysed.
    """

    runs: tuple[SweepRun, ...]
    chosen: int | None
    best: int | None
    tolerance: float = TOLERANCE
    metric: str = TYPICAL
    command: tuple[str, ...] = ()
    logdir: str = ""
    #: Why the runs were compared by another step time than the one asked for (None: not).
    metric_note: str | None = None

    def run(self, workers: int) -> SweepRun:
        for r in self.runs:
            if r.workers == workers:
                return r
        raise KeyError(workers)

    @property
    def best_step_ms(self) -> float | None:
        return None if self.best is None else self.run(self.best).step_ms(self.metric)

    @property
    def scatter(self) -> Scatter | None:
        """:func:`scatter_of` this result."""
        return scatter_of(self)

    def vs_best(self, run: SweepRun) -> float | None:
        """The run's step time over the best one (by ``metric``)."""
        best = self.best_step_ms
        value = run.step_ms(self.metric)
        if not run.ok or not best or value is None:
            return None
        return value / best

    def rows(self) -> pd.DataFrame:
        """One row per worker count (the table and ``sweep.csv``); missing numbers are NaN."""
        import pandas as pd

        from traceinspect.vocabulary import CAUSES

        records = []
        for r in self.runs:
            vs = self.vs_best(r)
            records.append(
                {
                    WORKERS: r.workers,
                    STATUS: r.status,
                    UNTRACED_MS: r.untraced_ms,
                    FIRST_UNTRACED_MS: r.first_untraced_ms,
                    MEDIAN_MS: r.median_ms,
                    P90_MS: r.p90_ms,
                    P10_MS: r.p10_ms,
                    MEAN_MS: r.mean_ms,
                    SPREAD: r.spread,
                    VS_BEST: vs,
                    INPUT_WAIT_MS: r.input_wait_ms,
                    **{idle_column(c): r.idle_fractions.get(c) for c in CAUSES},
                    VERDICT: r.verdict,
                    CHOSEN: r.workers == self.chosen,
                    STEPS: r.steps,
                    EXIT_CODE: r.exit_code,
                    OBSERVED_WORKERS: r.observed_workers,
                    ELAPSED_S: r.elapsed_s,
                    RUN_DIR: r.run_dir,
                    MESSAGE: r.message,
                }
            )
        columns = [
            WORKERS,
            STATUS,
            UNTRACED_MS,
            FIRST_UNTRACED_MS,
            MEDIAN_MS,
            P90_MS,
            P10_MS,
            MEAN_MS,
            SPREAD,
            VS_BEST,
            INPUT_WAIT_MS,
            *(idle_column(c) for c in CAUSES),
            VERDICT,
            CHOSEN,
            STEPS,
            EXIT_CODE,
            OBSERVED_WORKERS,
            ELAPSED_S,
            RUN_DIR,
            MESSAGE,
        ]
        frame = pd.DataFrame(records, columns=columns)
        numeric = [UNTRACED_MS, FIRST_UNTRACED_MS, MEDIAN_MS, P90_MS, P10_MS, MEAN_MS]
        numeric += [SPREAD, VS_BEST]
        numeric += [INPUT_WAIT_MS, ELAPSED_S]
        numeric += [idle_column(c) for c in CAUSES]
        frame[numeric] = frame[numeric].astype("float64")
        frame[[EXIT_CODE, OBSERVED_WORKERS]] = frame[[EXIT_CODE, OBSERVED_WORKERS]].astype("Int64")
        return frame

    def to_dict(self) -> dict[str, Any]:
        """What ``sweep.json`` and ``sweep --json`` hold."""
        runs = []
        for r in self.runs:
            vs = self.vs_best(r)
            runs.append(
                {
                    **r.to_dict(),
                    VS_BEST: None if vs is None else round(vs, 4),
                    CHOSEN: r.workers == self.chosen,
                }
            )
        return {
            "command": list(self.command),
            "logdir": self.logdir,
            "tolerance": self.tolerance,
            "metric": self.metric,
            "metric_note": self.metric_note,
            "chosen": self.chosen,
            "best": self.best,
            "best_step_ms": self.best_step_ms,
            "scatter": None if (scatter := self.scatter) is None else scatter.to_dict(),
            "runs": runs,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        """The result :meth:`to_dict` (``sweep.json``) describes, with the choice it recorded.

        Raises KeyError or ValueError on a mapping that is not one; :func:`load_sweep` turns
        those into a :class:`~traceinspect.errors.UsageError` naming the file.
        """
        runs = tuple(sorted((SweepRun.from_dict(r) for r in data["runs"]), key=lambda r: r.workers))
        counts = {r.workers for r in runs}
        if len(counts) != len(runs):
            raise ValueError(f"one run per worker count expected, got {[r.workers for r in runs]}")
        for key in ("chosen", "best"):
            if data.get(key) is not None and int(data[key]) not in counts:
                raise ValueError(f"{key} = {data[key]} workers, but no run has that count")
        metric = str(data.get("metric", "median"))
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}: expected one of {', '.join(METRICS)}")
        return cls(
            runs=runs,
            chosen=_int(data.get("chosen")),
            best=_int(data.get("best")),
            tolerance=float(data.get("tolerance", TOLERANCE)),
            metric=metric,
            command=tuple(str(a) for a in data.get("command", ())),
            logdir=str(data.get("logdir", "")),
            metric_note=data.get("metric_note") or None,
        )


def summarize_sweep(
    runs: Sequence[SweepRun],
    *,
    tolerance: float = TOLERANCE,
    metric: str = TYPICAL,
    command: Sequence[str] = (),
    logdir: str = "",
) -> SweepResult:
    """The sweep's result from its runs (in any order): sorted, with the count to use."""
    if metric not in METRICS:
        raise UsageError(f"unknown step time {metric!r}: use one of {', '.join(METRICS)}")
    if tolerance < 0:
        raise UsageError(f"the tolerance must be 0 or more, got {tolerance}")
    ordered = tuple(sorted(runs, key=lambda r: r.workers))
    counts = [r.workers for r in ordered]
    if len(set(counts)) != len(counts):
        raise UsageError(f"one run per worker count expected, got counts {counts}")
    metric, note = resolve_metric(ordered, metric)
    chosen, best = choose(ordered, tolerance, metric)
    return SweepResult(
        runs=ordered,
        chosen=chosen,
        best=best,
        tolerance=tolerance,
        metric=metric,
        command=tuple(command),
        logdir=logdir,
        metric_note=note,
    )
