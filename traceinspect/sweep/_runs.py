"""One worker count's run of a sweep (SweepRun): its statuses, the step times it can be
compared by, and the sweep's column names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from traceinspect import schema as S
from traceinspect.analysis.input_stages import InputStages
from traceinspect.analysis.steps import step_spread, step_time_ms
from traceinspect.analysis.window import is_bursty

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
SPREAD = "spread"  # (p90 - p10) / mean of the step times (steps.step_spread): lower is steadier
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
        if metric == "mean":
            return self.mean_ms
        if metric == TYPICAL and self.mean_ms is not None and self.median_ms is not None:
            return step_time_ms(self.median_ms, self.mean_ms, self.bursty)
        return self.median_ms

    @property
    def spread(self) -> float | None:
        """How much step times vary, as analyze says it (``steps.step_spread``: (p90 - p10)
        / mean); None without the figures."""
        if not self.ok or self.p90_ms is None or self.p10_ms is None or not self.mean_ms:
            return None
        return step_spread(self.p10_ms, self.p90_ms, self.mean_ms)

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


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
