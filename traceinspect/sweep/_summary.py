"""The sweep's results and the choice of a worker count: pure, from given numbers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from traceinspect import schema as S
from traceinspect.analysis.input_stages import InputStages
from traceinspect.analysis.window import is_bursty
from traceinspect.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

# Within 5% of the best median step time counts as "as fast": step times of repeated runs
# vary by a few percent on a shared host, and fewer workers save CPU and RAM.
TOLERANCE = 0.05

# Run states. Only "ok" runs have step times; the others say why not.
OK = "ok"
CRASHED = "crashed"  # non-zero exit and no trace
NO_TRACE = "no-trace"  # exit 0 but the script ended before the window
TIMEOUT = "timeout"  # still running after the per-run timeout: killed
UNANALYSABLE = "unanalysable"  # a trace, but analyze raised (too few steps, no device work)
ERROR = "error"  # capture could not run the script at all
STATUSES = (OK, CRASHED, NO_TRACE, TIMEOUT, UNANALYSABLE, ERROR)

# Which step time decides: the median resists outliers (a checkpoint, a GC pause); the mean
# is the throughput, and the right one when steps come in bursts (a batch-level prefetch
# that hands out several batches at once, then stalls). "typical" (the default) is the one
# analyze uses for each run: its mean where its steps come in bursts, else its median (a
# family pipeline's bursty runs at 2 and 3 workers had medians of 5.7 and 0.3 ms against
# means of 21.3 and 23.6: by the median, 3 workers "won").
TYPICAL = "typical"
# "untraced" (the default): the time per step of the steps each run went on with after its
# trace, without the profiler (capture's ``time_after``). The profiler slows the step, and
# not by the same amount at each count: on XLA's CPU backend, a loop that reads its loss
# every step ran 13.4-13.7 ms at 3-6 workers under it against 10.1-10.6 without, a flatter
# curve that put the traced choice one count below the knee of the timed sweep. Where a run
# has no such steps (the script ended first, a sweep.json of an older version), every run
# is compared by the typical step instead, and the result says so.
UNTRACED = "untraced"
METRICS = (UNTRACED, TYPICAL, "median", "mean")

# Column names of SweepResult.rows() and sweep.csv; times carry their unit.
WORKERS = "workers"
STATUS = "status"
MEDIAN_MS = S.MEDIAN_STEP_MS
MEAN_MS = "mean_step_ms"
P90_MS = S.P90_STEP_MS
P10_MS = "p10_step_ms"
UNTRACED_MS = "untraced_step_ms"  # time per step after the trace, without the profiler
# Where the count was timed again: its first run's untraced figure (UNTRACED_MS is then the
# second run's).
FIRST_UNTRACED_MS = "first_untraced_step_ms"
UNTRACED_STEPS = "untraced_steps"
SPREAD = "spread"  # (p90 - p10) / median of the step times: lower is steadier
VS_BEST = "vs_best"  # median / best median
INPUT_WAIT_MS = "input_wait_ms"  # training loop waiting for a batch, per step (median)
VERDICT = "verdict"
CHOSEN = "chosen"
STEPS = "steps"
EXIT_CODE = "exit_code"
OBSERVED_WORKERS = "observed_workers"
ELAPSED_S = "elapsed_s"
RUN_DIR = "run_dir"
MESSAGE = "message"
INPUT_STAGES = "input_stages"
PREDICTED_WORKERS = "predicted_workers"  # analyze's worker count from this run alone
PREDICTED_STEP_MS = "predicted_step_ms"  # the step analyze expects with it
#: A prediction agrees with the measured knee when it lies in [knee, knee + this].
AGREES_ABOVE_KNEE = 2


def idle_column(cause: str) -> str:
    """The column holding the fraction of step time the device was idle for ``cause``."""
    return f"idle_{cause}_fraction"


@dataclass(frozen=True)
class SweepRun:
    """One worker count's capture and analysis, or why there is none."""

    workers: int
    status: str
    median_ms: float | None = None
    p90_ms: float | None = None
    p10_ms: float | None = None
    mean_ms: float | None = None
    input_wait_ms: float | None = None
    idle_fractions: dict[str, float] = field(default_factory=dict)
    verdict: str | None = None
    steps: int = 0
    exit_code: int | None = None
    observed_workers: int | None = None
    elapsed_s: float | None = None
    run_dir: str | None = None
    message: str = ""
    #: The input pipeline's stages in this run (None without capture's measurement).
    input_stages: InputStages | None = None
    #: What ``analyze`` of this run alone recommends: the worker count (None: no count, or
    #: no advice about workers) and the step it expects with it.
    predicted_workers: int | None = None
    predicted_step_ms: float | None = None
    #: The time per step of the steps timed after the trace without the profiler (the
    #: slower of their host steps and their completions), and how many there were.
    untraced_ms: float | None = None
    untraced_steps: int = 0
    #: Where the sweep timed this count again (it had the best or the chosen figure): the
    #: first run's untraced figure; ``untraced_ms`` is then the second run's.
    first_untraced_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK and self.median_ms is not None and self.median_ms > 0

    @property
    def bursty(self) -> bool:
        """Whether this run's steps came in bursts, by analyze's rule."""
        figures = (self.p10_ms, self.p90_ms, self.mean_ms)
        if not self.ok or any(v is None for v in figures):
            return False
        p10, p90, mean = cast("tuple[float, float, float]", figures)
        return is_bursty(p10, p90, mean, self.steps)

    def step_ms(self, metric: str = TYPICAL) -> float | None:
        """The step time that ``metric`` names: ``untraced`` (after the trace, without the
        profiler), ``median``, ``mean``, or ``typical`` (the traced steps' mean where they
        came in bursts, else their median, as analyze gives it)."""
        if metric == UNTRACED:
            return self.untraced_ms
        if metric == "mean" or (metric == TYPICAL and self.bursty):
            return self.mean_ms
        return self.median_ms

    @property
    def spread(self) -> float | None:
        """(p90 - p10) / median: how much step times vary, relative to the median."""
        if not self.ok or self.p90_ms is None or self.p10_ms is None:
            return None
        assert self.median_ms is not None
        return (self.p90_ms - self.p10_ms) / self.median_ms

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRun:
        """The run :meth:`to_dict` (or a ``runs`` entry of ``sweep.json``) describes; derived
        fields (``spread``, ``vs_best``, ``chosen``) are recomputed, not read."""
        idle = data.get("idle_fractions") or {}
        return cls(
            workers=int(data[WORKERS]),
            status=str(data[STATUS]),
            median_ms=_float(data.get(MEDIAN_MS)),
            p90_ms=_float(data.get(P90_MS)),
            p10_ms=_float(data.get(P10_MS)),
            mean_ms=_float(data.get(MEAN_MS)),
            input_wait_ms=_float(data.get(INPUT_WAIT_MS)),
            idle_fractions={str(cause): float(v) for cause, v in idle.items()},
            verdict=data.get(VERDICT),
            steps=int(data.get(STEPS) or 0),
            exit_code=_int(data.get(EXIT_CODE)),
            observed_workers=_int(data.get(OBSERVED_WORKERS)),
            elapsed_s=_float(data.get(ELAPSED_S)),
            run_dir=data.get(RUN_DIR),
            message=str(data.get(MESSAGE) or ""),
            input_stages=(
                InputStages.from_record(data[INPUT_STAGES]) if data.get(INPUT_STAGES) else None
            ),
            predicted_workers=_int(data.get(PREDICTED_WORKERS)),
            predicted_step_ms=_float(data.get(PREDICTED_STEP_MS)),
            untraced_ms=_float(data.get(UNTRACED_MS)),
            untraced_steps=int(data.get(UNTRACED_STEPS) or 0),
            first_untraced_ms=_float(data.get(FIRST_UNTRACED_MS)),
        )

    def to_dict(self) -> dict[str, Any]:
        spread = self.spread
        return {
            WORKERS: self.workers,
            STATUS: self.status,
            MEDIAN_MS: self.median_ms,
            P90_MS: self.p90_ms,
            P10_MS: self.p10_ms,
            MEAN_MS: self.mean_ms,
            SPREAD: None if spread is None else round(spread, 4),
            INPUT_WAIT_MS: self.input_wait_ms,
            "idle_fractions": dict(self.idle_fractions),
            VERDICT: self.verdict,
            STEPS: self.steps,
            EXIT_CODE: self.exit_code,
            OBSERVED_WORKERS: self.observed_workers,
            ELAPSED_S: self.elapsed_s,
            RUN_DIR: self.run_dir,
            MESSAGE: self.message,
            INPUT_STAGES: self.input_stages.to_record() if self.input_stages else None,
            PREDICTED_WORKERS: self.predicted_workers,
            PREDICTED_STEP_MS: self.predicted_step_ms,
            UNTRACED_MS: self.untraced_ms,
            UNTRACED_STEPS: self.untraced_steps,
            FIRST_UNTRACED_MS: self.first_untraced_ms,
        }


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


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def choose(
    runs: Iterable[SweepRun], tolerance: float = TOLERANCE, metric: str = TYPICAL
) -> tuple[int | None, int | None]:
    """(chosen, best): the smallest count within ``tolerance`` of the best step time, and
    the count with the best step time (the smaller one on a tie). Failed runs never count."""
    timed = sorted(
        ((r.workers, t) for r in runs if r.ok and (t := r.step_ms(metric)) is not None and t > 0),
    )
    if not timed:
        return None, None
    best_workers, best_ms = min(timed, key=lambda wt: (wt[1], wt[0]))
    # A hair of slack so that "exactly 5% slower" survives float rounding.
    limit = best_ms * (1 + tolerance) * (1 + 1e-12)
    chosen = next(workers for workers, t in timed if t <= limit)
    return chosen, best_workers


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


def resolve_metric(runs: Sequence[SweepRun], metric: str) -> tuple[str, str | None]:
    """The step time to compare by: ``metric``, unless it is ``untraced`` and a measured run
    has no untraced steps (every run is then compared by the typical traced step, one
    quantity for all), with the sentence that says so."""
    if metric != UNTRACED:
        return metric, None
    missing = [r.workers for r in runs if r.ok and r.untraced_ms is None]
    if not missing:
        return metric, None
    counts = ", ".join(map(str, missing))
    return TYPICAL, (
        f"the run(s) at {counts} worker(s) timed no steps after the trace (the script ended "
        "before it was steady again and had run as many steps as the trace held, or the "
        "sweep was made by an older version), so every count is compared by its traced step "
        "time, which the profiler slows; give the script more steps to compare counts "
        "without it"
    )


def prediction_vs_measured(result: SweepResult) -> str | None:
    """A line on ``analyze``'s prediction from each run against the count the sweep
    measured, and why they differ where they do (None when no run predicted a count)."""
    predicted = [
        (r.workers, r.predicted_workers, r.predicted_step_ms)
        for r in result.runs
        if r.ok and r.predicted_workers is not None
    ]
    if result.chosen is None or not predicted:
        return None
    knee = result.chosen
    each = ", ".join(
        f"{w} -> {p}" + (f" ({ms:.2f} ms)" if ms is not None else "") for w, p, ms in predicted
    )
    off = [(w, p) for w, p, _ in predicted if not knee <= p <= knee + AGREES_ABOVE_KNEE]
    head = f"analyze, from each run alone (workers -> count, expected step): {each}"
    if not off:
        return f"{head}; within [{knee}, {knee + AGREES_ABOVE_KNEE}] of the measured {knee}."
    why = (
        "the sweep measured each count's step; analyze predicts from one run (a batch's cost "
        "to a worker against the device's work, with 25% headroom, within the cores), which "
        "does not see the workers' competition for the cores with the step and with each "
        "other: the measured count wins"
    )
    runs = ", ".join(f"{w}" for w, _ in off)
    scatter = result.scatter
    if scatter is not None and all(p in scatter.within for _, p in off):
        return (
            f"{head}; from the run(s) at {runs} it differs from the measured {knee}, within "
            f"the runs' own scatter: the sweep does not settle the order of "
            f"{counts_in_words(scatter.within)} workers either."
        )
    return f"{head}; from the run(s) at {runs} it differs from the measured {knee}: {why}."


def counts_in_words(counts: Sequence[int]) -> str:
    """``3, 4 and 6``."""
    words = [str(c) for c in counts]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
