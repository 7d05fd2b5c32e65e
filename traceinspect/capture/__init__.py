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
(``_child.STEADY_*``: block means of the host step times agree), or after ``max_wait_s``.

Trace annotations added inside the window (host plane, main thread):

``traceinspect/step``
    spans one step (stats ``step_index``, and ``step_num`` when the script gave one).
``traceinspect/next_batch``
    spans one outermost Grain ``__next__`` (the time the training loop waited for a batch).
``traceinspect/host_read``
    spans a host read of a device value (stat ``kind``: ``__float__``, ``__int__``,
    ``__bool__``, ``__index__``, ``item``, ``tolist``, ``__array__``, ``block_until_ready``,
    ``device_get``).

Sidecar fields (``traceinspect.capture.json`` or ``<host>.traceinspect.capture.json``,
``schema_version`` 1; times in Unix ns):

- ``schema_version``, ``tool`` (``name``, ``version``)
- ``command`` (as given), ``python`` (interpreter), ``cwd``, ``run_name``, ``run_dir``,
  ``host_name`` (the host part of the file names), ``shared_run`` (``run_name`` was given)
- ``process_index``, ``process_count``: from jax when the script called
  ``jax.distributed.initialize`` (read when the window closed), else null
- ``trace_files``: the ``.xplane.pb`` names in the run directory
- ``started_unix_ns``, ``ended_unix_ns``, ``script_start_unix_ns``
- ``exit_code`` (the script's; 128 + N when killed by signal N), ``exit_signal`` (name or null)
- ``partial`` (bool) and ``partial_reasons`` (sentences); ``ended`` (how the script ended);
  ``stopped_by_traceinspect`` (``--stop-after`` ended the run)
- ``step_source`` (``annotation`` | ``grain`` | ``jit`` | ``time`` | null) and
  ``step_source_detail`` (e.g. ``StepTraceAnnotation 'train'``)
- ``window``: ``skip_steps`` (null: the steady-state rule), ``rule`` (``steady`` |
  ``time_bound`` | ``skip`` | null), ``reason`` (a sentence: why it opened there),
  ``requested_steps``, ``first_step``, ``last_step`` (0-based step indices of the source),
  ``complete``, ``trace_start_unix_ns``, ``trace_stop_unix_ns``
- ``steps``: one entry per step of the whole run (at most 10,000): ``index``, ``step_num``
  (the script's, or null), ``start_unix_ns``, ``wall_ms`` (host time to the next step's
  start, null for the last), ``traced``; ``steps_seen``: all steps of that source counted
- ``profiler``: ``host_tracer_level``, ``python_tracer_level``, ``device_tracer_level``,
  ``device_tracer_level_applied`` (false when this jaxlib has no such option),
  ``grain_worker_profiling`` (whether Grain's worker profiling flag was turned on)
- ``host``: ``hostname``, ``cpu_count``, ``cpu_affinity``, ``cpus_available``,
  ``memory_total_bytes``, ``memory_available_bytes``, ``platform``, ``python``
- ``versions``: ``jax``, ``jaxlib``, ``grain`` (null when not installed)
- ``backend`` (null when the script never imported jax): ``platform``, ``device_count``,
  ``process_count``, ``devices`` (``id``, ``platform``, ``kind``, ``process_index``)
- ``grain`` (null when the script never imported grain): ``workers_override``,
  ``worker_count``, ``per_worker_buffer_size``, ``read_threads``,
  ``read_prefetch_buffer_size``, ``batch_size``, ``bytes_per_batch`` (the last setting of each
  seen before the window opened), ``workers_measured`` (null without ``mp_prefetch`` workers:
  ``window_s``, ``batches`` drawn by the loop in the window, ``elements`` the workers made,
  ``main_process_cpu_s``, and per worker ``index``, ``pid``, ``wall_s``, ``elements``,
  ``produce_s``, ``blocked_s`` (on a full buffer), ``cpu_s``, ``rss_bytes``,
  ``timed_elements``), and ``observed``: every Grain construction seen, in order
- ``options``: the capture options used; ``notes``: anything else worth knowing

This package imports only the standard library; jax and grain are used in the child process.
"""

from __future__ import annotations

from traceinspect.capture._child import (
    ANN_HOST_READ,
    ANN_NEXT_BATCH,
    ANN_STEP,
    ANNOTATIONS,
    SIDECAR_NAME,
    sidecar_name,
)
from traceinspect.capture._command import ScriptCommand, parse_command
from traceinspect.capture._runner import STEP_SOURCES, CaptureOptions, CaptureResult, run_capture

__all__ = [
    "ANNOTATIONS",
    "ANN_HOST_READ",
    "ANN_NEXT_BATCH",
    "ANN_STEP",
    "SIDECAR_NAME",
    "STEP_SOURCES",
    "CaptureOptions",
    "CaptureResult",
    "ScriptCommand",
    "parse_command",
    "run_capture",
    "sidecar_name",
]
