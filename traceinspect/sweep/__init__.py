"""Measuring Grain's worker count: ``traceinspect sweep``.

:func:`run_sweep` captures a short window of a training script once per worker count
(through :func:`traceinspect.capture.run_capture`, each run in ``LOGDIR/workers_N/``),
analyses each trace, and returns a :class:`SweepResult`: one :class:`SweepRun` per count
(median, p10 and p90 step time, the device's idle time by cause, the verdict, or why the
run failed: crashed, no trace, timed out, unanalysable) and ``chosen``, the smallest count
whose step time is within 5% of the best: by default that of the steps each run goes on
with after its window, timed without the profiler (``untraced``), else the traced median or
mean. :func:`summarize_sweep` makes that choice from given runs and runs nothing;
:func:`load_sweep` reads a saved ``sweep.json`` back.
Rendering and the plot are in :mod:`traceinspect.report.sweep`.

>>> from traceinspect.capture import CaptureOptions
>>> from traceinspect.sweep import run_sweep
>>> result = run_sweep(["python", "train.py", "--workers", "{workers}"], [1, 2, 4],
...                    CaptureOptions(logdir="sweep", stop_after=True), timeout_s=600)
>>> result.chosen, result.rows()
"""

from __future__ import annotations

from traceinspect.sweep._load import load_sweep
from traceinspect.sweep._runner import (
    DEFAULT_LOGDIR,
    PLACEHOLDER,
    TIMEOUT_GRACE_S,
    ProgressCallback,
    SweepProgress,
    check_worker_counts,
    command_for,
    run_dir_for,
    run_sweep,
)
from traceinspect.sweep._summary import (
    CRASHED,
    ERROR,
    METRICS,
    NO_TRACE,
    OK,
    STATUSES,
    TIMEOUT,
    TOLERANCE,
    TYPICAL,
    UNANALYSABLE,
    UNTRACED,
    Scatter,
    SweepResult,
    SweepRun,
    choose,
    counts_in_words,
    idle_column,
    prediction_vs_measured,
    scatter_of,
    summarize_sweep,
)

__all__ = [
    "CRASHED",
    "DEFAULT_LOGDIR",
    "ERROR",
    "METRICS",
    "NO_TRACE",
    "OK",
    "PLACEHOLDER",
    "STATUSES",
    "TIMEOUT",
    "TIMEOUT_GRACE_S",
    "TOLERANCE",
    "TYPICAL",
    "UNANALYSABLE",
    "UNTRACED",
    "ProgressCallback",
    "Scatter",
    "SweepProgress",
    "SweepResult",
    "SweepRun",
    "check_worker_counts",
    "choose",
    "command_for",
    "counts_in_words",
    "idle_column",
    "load_sweep",
    "prediction_vs_measured",
    "run_dir_for",
    "run_sweep",
    "scatter_of",
    "summarize_sweep",
]
