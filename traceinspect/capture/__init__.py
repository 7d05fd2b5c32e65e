"""Running a user's training script under the profiler: ``traceinspect capture``.

:func:`run_capture` runs ``python train.py ARGS`` (or ``python -m pkg.mod ARGS``, or a bare
``train.py``) in a child process exactly as Python would (same argv, ``__main__``, stdio,
working directory and environment), traces a window of training steps, and writes a
TensorBoard/XProf log directory::

    <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb
    <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/traceinspect.capture.json   (the sidecar)

On a pod every host runs its own capture into one run directory named by ``run_name``
(``--run-name``), each under its own ``host_name`` (``--host-name``, default the machine's
hostname; processes on one machine need distinct ones). The sidecar is then per host
(:func:`sidecar_name`)::

    <logdir>/plugins/profile/<run_name>/<host>.xplane.pb
    <logdir>/plugins/profile/<run_name>/<host>.traceinspect.capture.json

A capture refuses to start if its host already has a file in that run directory.

Steps are found, best first, from the script's ``jax.profiler.StepTraceAnnotation``; else from
batches drawn from a Grain iterator on the main thread (the outermost ``__next__`` only); else
from calls of the jitted function that first reaches the first traced step (the most
dispatched one); else a time window (``delay_s`` after start, ``duration_s`` long). A step
runs from its start to the start of the next one, so the window ``[first, first + steps)``
closes when step ``first + steps`` starts (or ``window_max_s`` after it opened, once it holds
5 steps). It opens after ``skip_steps`` steps when that is given, else once the run is steady
(``_child.steady.STEADY_*``: block means of the host step times agree), or after ``max_wait_s``.

Trace annotations added inside the window (host plane, main thread):

``traceinspect/step``
    spans one step (stats ``step_index``, and ``step_num`` when the script gave one).
``traceinspect/next_batch``
    spans one outermost Grain ``__next__`` (the time the training loop waited for a batch).
``traceinspect/host_read``
    spans a host read of a device value (stat ``kind``: ``__float__``, ``__int__``,
    ``__bool__``, ``__index__``, ``item``, ``tolist``, ``__array__``, ``block_until_ready``,
    ``device_get``).

The sidecar's fields and their reader are in :mod:`traceinspect.sidecar`.

One SIGINT ends the script, whether a terminal sent it to the whole process group or
someone to the capture process alone (the script gets it once); one still running
:data:`INTERRUPT_GRACE_S` later gets SIGTERM, and after as long again has its trace saved and
is killed, with the processes it started. SIGTERM and SIGHUP sent to the capture process are
passed on to the script, which is ended so ``kill_grace_s`` later (:data:`TERMINATE_GRACE_S`).
If the capture process dies (SIGKILL), the script gets SIGTERM from the kernel and is ended
the same way (Linux). A script whose worker process died with an error while no step came
for long (``_watchdog.STALL_MIN_S``, ``TRACEINSPECT_STALL_S``) is named and stopped: its
stderr passes through the capture process, which reads the worker's traceback there.

:func:`run_phase` runs the script once as a phase of ``traceinspect isolate`` instead: the
same child with host timing only, no profiler (:mod:`traceinspect.capture._phase`).

This package imports only the standard library; jax and grain are used in the child process.
"""

from __future__ import annotations

from traceinspect.capture._child._base import (
    ANN_HOST_READ,
    ANN_NEXT_BATCH,
    ANN_STEP,
    ANNOTATIONS,
)
from traceinspect.capture._command import ScriptCommand, parse_command
from traceinspect.capture._phase import (
    PhaseRun,
    log_tail,
    run_phase,
    start_in_own_session,
    stop_session,
    wait_for_quiet,
)
from traceinspect.capture._runner import (
    INTERRUPT_GRACE_S,
    STEP_SOURCES,
    TERMINATE_GRACE_S,
    CaptureOptions,
    CaptureProgress,
    CaptureResult,
    ProgressCallback,
    run_capture,
)
from traceinspect.sidecar import FILE_NAME as SIDECAR_NAME
from traceinspect.sidecar import file_name as sidecar_name

__all__ = [
    "ANNOTATIONS",
    "ANN_HOST_READ",
    "ANN_NEXT_BATCH",
    "ANN_STEP",
    "INTERRUPT_GRACE_S",
    "SIDECAR_NAME",
    "STEP_SOURCES",
    "TERMINATE_GRACE_S",
    "CaptureOptions",
    "CaptureProgress",
    "CaptureResult",
    "PhaseRun",
    "ProgressCallback",
    "ScriptCommand",
    "log_tail",
    "parse_command",
    "run_capture",
    "run_phase",
    "sidecar_name",
    "start_in_own_session",
    "stop_session",
    "wait_for_quiet",
]
