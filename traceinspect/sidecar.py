"""The capture sidecar, ``traceinspect.capture.json``: its format, its one reader.

``traceinspect capture`` writes one per run directory (``<host>.traceinspect.capture.json``
per host in a run shared by several, ``--run-name``). It holds what the trace cannot: the
command and how it ended, the step source and the traced window, every step's host time,
the profiler settings, the host's cores and memory, the library versions, and the Grain
settings and worker measurements seen at run time.

The format is declared once, here, as ``TypedDict``\\ s: the writer (``capture/_runner.py``,
from the report of ``capture/_child/window.py``) builds those types, and :func:`parse` reads them
into the frozen records the analysis uses (:class:`Sidecar`, :class:`Window`,
:class:`HostStep`, :class:`GrainSettings`, :class:`WorkersMeasured`, :class:`HostFacts`,
:class:`MachineLoad`, :class:`GlobalArray`), so mypy checks every key on both sides.
Standard library only: the capture child (which runs without the package on its path) may
load it by path.

Versioning: ``schema_version`` counts changes of meaning. Fields are only ever added within a
version, so a reader takes what it knows and ignores the rest; a sidecar of a newer version
than :data:`SCHEMA_VERSION` is not read (:func:`parse` returns None), and one without
``schema_version`` (written before it existed) reads as version 1. A field of the wrong type
reads as absent: the sidecar only adds facts, and a damaged one must not stop an analysis.

Fields (times in Unix ns):

- ``schema_version``, ``tool`` (``name``, ``version``)
- ``command`` (as given), ``python`` (interpreter), ``cwd``, ``run_name``, ``run_dir``,
  ``host_name`` (the host part of the file names), ``shared_run`` (``run_name`` was given)
- ``process_index``, ``process_count``: from jax when the script called
  ``jax.distributed.initialize`` (read when the window closed), else null
- ``global_arrays``: the first few arrays spanning several processes that the script built
  from an array of the batch its loop had just drawn (``jax.device_put``,
  ``jax.make_array_from_process_local_data``,
  ``multihost_utils.host_local_array_to_global_array``): ``api``, ``local_rows`` (the
  batch array's leading size), ``global_rows`` (the global array's), ``host_rows`` (the
  global array's rows on this host's devices), ``processes`` (that the array spans)
- ``trace_files``: the ``.xplane.pb`` names in the run directory
- ``started_unix_ns``, ``ended_unix_ns``, ``script_start_unix_ns``
- ``exit_code`` (the script's; 128 + N when killed by signal N), ``exit_signal`` (name or null)
- ``partial`` (bool) and ``partial_reasons`` (sentences); ``ended`` (how the script ended);
  ``stopped_by_traceinspect`` (``--stop-after`` ended the run)
- ``step_source`` (``annotation`` | ``grain`` | ``jit`` | ``time`` | null) and
  ``step_source_detail`` (e.g. ``StepTraceAnnotation 'train'``)
- ``window``: ``skip_steps`` (null: the steady-state rule), ``rule`` (``steady`` |
  ``time_bound`` | ``skip`` | ``early`` | null), ``reason`` (a sentence: why it opened there),
  ``requested_steps``, ``first_step``, ``last_step`` (0-based step indices of the source),
  ``complete``, ``trace_start_unix_ns``, ``trace_stop_unix_ns``, ``untraced_after``
  (the steps capture timed after the window without the profiler, once the run settled
  after the trace's write: ``first_step``, ``last_step``, ``complete``; null where it timed
  none: ``--stop-after``, a script that ended first, a sidecar before 2026-11-30)
- ``steps``: one entry per step of the whole run, in order, up to step 9,999, then the
  window's steps when it opened later (up to 100,000 more; ``index`` says which step an
  entry is): ``index``, ``step_num`` (the script's, or null), ``start_unix_ns``,
  ``wall_ms`` (host time to the next step's start, null when that step is not listed),
  ``traced``, ``done_unix_ns`` (when the step's device work
  finished: its last jitted call's output became ready; null when unknown; absent in
  older sidecars), and in a phase of ``isolate`` only ``cpu_ms`` (the process's CPU time
  to the next step's start, its threads together); ``steps_seen``: all steps of that source counted
- ``early_trace``: the trace taken from step 2 until the run was first steady (kept as the
  run's trace only when the script ended before the window opened; the window's rule is then
  ``early``): ``state``, ``first_step``, ``last_step``, ``costs_ms`` (``start``, ``stop``)
- ``profiler``: ``host_tracer_level``, ``python_tracer_level``, ``device_tracer_level``,
  ``device_tracer_level_applied`` (false when this jaxlib has no such option),
  ``grain_worker_profiling`` (whether Grain's worker profiling flag was turned on)
- ``host``: ``hostname``, ``cpu_count``, ``cpu_affinity``, ``cpus_available``,
  ``memory_total_bytes``, ``memory_available_bytes`` (when the script started: the smaller of
  MemAvailable and what is left under the cgroup's memory limit), ``memory_limit_bytes`` and
  ``memory_limit_source`` (that limit and the file it came from, e.g. ``cgroup v2
  /sys/fs/cgroup/.../memory.max``; null without one below the host's memory), ``platform``,
  ``python``
- ``machine_load`` (null when /proc could not be read or no window was traced; absent in
  older sidecars): how busy the machine was from the window's opening to its close:
  ``window_s``, ``cpu_count`` (the machine's, as ``/proc/stat`` counts them),
  ``others_cpu_cores`` (the cores other processes kept busy on average: the machine's busy
  CPU time in ``/proc/stat`` less the script's process and its descendants', Grain's
  workers included, from ``/proc/<pid>/stat``), ``script_cpu_cores`` (that tree's own)
- ``run_events`` (absent in older sidecars and in isolate's phases): over the whole run,
  Python's garbage collections of at least ``gc_min_ms`` (``gc_start_unix_ns``, ``gc_ms``,
  ``gc_generation``, one entry each) and when the loop drew its first batch from each new
  Grain iterator (``iterator_start_unix_ns``): what names a recurring stall
- ``versions``: ``jax``, ``jaxlib``, ``grain`` (null when not installed)
- ``maxtext``: whether the script imported MaxText (absent in older sidecars:
  :attr:`Sidecar.ran_maxtext` then reads the command)
- ``backend`` (null when the script never imported jax): ``platform``, ``device_count``,
  ``process_count``, ``devices`` (``id``, ``platform``, ``kind``, ``process_index``)
- ``grain`` (null when the script never imported grain): ``workers_override``,
  ``worker_count``, ``per_worker_buffer_size``, ``read_threads``,
  ``read_prefetch_buffer_size``, ``batch_size``, ``bytes_per_batch`` (the last setting of each
  seen before the window opened), ``batch_rows`` (the leading size of the first batch the loop
  drew), ``files`` and ``file_shards`` (of the last ``InterleaveIterDataset``: the length of the
  list it was built from, walked down to its source, and the product of the slice steps on
  the way), ``first_batches``, ``workers_measured`` (null without ``mp_prefetch`` workers:
  ``window_s``, ``batches`` drawn by the loop in the window, ``elements`` the workers made,
  ``main_process_cpu_s``, and per worker ``index``, ``pid``, ``wall_s``, ``elements``,
  ``produce_s``, ``blocked_s`` (on a full buffer), ``cpu_s``, ``cpu_wait_s`` (its threads
  ready to run but waiting for a core, from ``/proc/self/task/*/schedstat``; null where
  absent), ``rss_bytes``, ``timed_elements``), and ``observed``: every Grain construction
  seen, in order
- ``options``: the capture options used; ``notes``: anything else worth knowing
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypedDict, cast, get_args

SCHEMA_VERSION = 1
FILE_NAME = "traceinspect.capture.json"

StepSource = Literal["annotation", "grain", "jit", "time"]
WindowRule = Literal["steady", "time_bound", "skip", "early"]
STEP_SOURCES: tuple[StepSource, ...] = get_args(StepSource)
WINDOW_RULES: tuple[WindowRule, ...] = get_args(WindowRule)


def file_name(host: str | None = None) -> str:
    """The sidecar's file name: ``<host>.traceinspect.capture.json`` in a run directory
    shared by several hosts (``--run-name``), else ``traceinspect.capture.json``."""
    return f"{host}.{FILE_NAME}" if host else FILE_NAME


# --- the format: what the writer builds ---------------------------------------------------


class ToolJSON(TypedDict):
    name: str
    version: str


class UntracedJSON(TypedDict):
    """Steps timed without the profiler after the window (capture's ``time_after``)."""

    first_step: int
    last_step: int
    #: False when the script ended before the block was as long as the window.
    complete: bool


class _WindowUntracedJSON(TypedDict, total=False):
    untraced_after: UntracedJSON | None


class WindowJSON(_WindowUntracedJSON):
    skip_steps: int | None
    rule: str | None  # a WindowRule
    reason: str | None
    requested_steps: int | None
    first_step: int | None
    last_step: int | None
    complete: bool
    trace_start_unix_ns: int | None
    trace_stop_unix_ns: int | None


class _StepCpuJSON(TypedDict, total=False):
    #: In a phase of isolate: the process's CPU time to the next step's start (ms).
    cpu_ms: float | None


class StepJSON(_StepCpuJSON):
    index: int
    step_num: int | None
    start_unix_ns: int
    wall_ms: float | None
    traced: bool
    #: When the step's device work finished (its last jitted call's output ready; null when
    #: no output could be waited on). Differences of these are the device's throughput.
    done_unix_ns: int | None


class _StackCpuJSON(TypedDict, total=False):
    cpu_ns: list[int]


class StackSamplesJSON(_StackCpuJSON):
    """The training thread's Python stack, looked at every ``interval_ms`` while the trace
    was on (``capture/_child/sampler.py``): when (``t_unix_ns``), and where (``site``: an
    index into ``sites``, each ``file.py:line function``, with ``(in module function)`` when
    the thread was inside a library's function; ``""`` when no frame was the user's), and
    the thread's CPU clock at each look (``cpu_ns``; absent where the platform has none)."""

    interval_ms: float
    t_unix_ns: list[int]
    site: list[int]
    sites: list[str]


class EarlyTraceJSON(TypedDict):
    #: None (never started), ``tracing``, ``stopped``, ``kept`` (the run's trace: it ended
    #: before the window opened), ``dropped`` (the window was captured) or ``off``.
    state: str | None
    first_step: int | None
    last_step: int | None
    #: What starting (``start``) and stopping (``stop``) it cost the main thread.
    costs_ms: dict[str, float]


class ProfilerJSON(TypedDict):
    host_tracer_level: int
    python_tracer_level: int
    device_tracer_level: int | None
    device_tracer_level_applied: bool | None
    grain_worker_profiling: bool | None


class HostJSON(TypedDict):
    hostname: str
    cpu_count: int | None
    cpu_affinity: list[int] | None
    cpus_available: int | None
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    memory_limit_bytes: int | None
    memory_limit_source: str | None
    platform: str
    python: str


class MachineLoadJSON(TypedDict):
    """How busy the machine was over the traced window, on average (cores)."""

    window_s: float
    #: The machine's cores (``os.cpu_count()``: all of them, whatever the affinity).
    cpu_count: int | None
    #: The machine's busy CPU time (``/proc/stat``) less the script's tree's, per second.
    others_cpu_cores: float
    #: The script's process and its live descendants (Grain's workers), per second.
    script_cpu_cores: float


class RunEventsJSON(TypedDict):
    """Long garbage collections and new iterators over the whole run (Unix clock)."""

    gc_min_ms: float
    gc_start_unix_ns: list[int]
    gc_ms: list[float]
    gc_generation: list[int]
    iterator_start_unix_ns: list[int]


class WorkerJSON(TypedDict):
    index: int | None
    pid: int | None
    wall_s: float
    elements: int
    produce_s: float
    blocked_s: float
    cpu_s: float
    cpu_wait_s: float | None
    rss_bytes: int | None
    timed_elements: bool


class WorkersMeasuredJSON(TypedDict):
    window_s: float
    batches: int
    elements: int
    main_process_cpu_s: float
    workers: list[WorkerJSON]


class _StageThreadsJSON(TypedDict, total=False):
    #: The training process's read threads that ran stages: their CPU time and their time
    #: waiting for a core (the kernel's schedstat), summed over the window (place ->
    #: seconds; ``threads`` only; absent without schedstat, or where a thread ended).
    thread_cpu_s: dict[str, float]
    thread_run_delay_s: dict[str, float]
    #: The training process's CPU time over the window (all its threads; on XLA's CPU
    #: backend the device's work too; its Grain workers' not included).
    process_cpu_s: float


class StagesJSON(_StageThreadsJSON):
    """Time spent in each stage of the input pipeline over the window, by where it ran
    (``workers``, ``threads``, ``main``; see :data:`traceinspect.vocabulary.PLACES`): the
    self time of Grain's dataset ``__getitem__`` and iterator ``__next__`` calls, by
    class (sources: ``read``; batching: ``batch``; every other transformation:
    ``preprocessing``)."""

    window_s: float
    batches: int
    #: Elements the workers put in their buffers over the window (each worker's own clock):
    #: what their stage times were spent on. None without worker processes.
    worker_elements: int | None
    seconds: dict[str, dict[str, float]]  # place -> stage -> seconds
    calls: dict[str, dict[str, int]]  # place -> stage -> calls timed


class GlobalArrayJSON(TypedDict):
    """An array spanning several processes that the script built from an array of the batch
    its loop had just drawn."""

    api: str
    local_rows: int
    global_rows: int
    host_rows: int
    processes: int


class GrainJSON(TypedDict):
    workers_override: int | None
    worker_count: int | None
    per_worker_buffer_size: int | None
    read_threads: int | None
    read_prefetch_buffer_size: int | None
    batch_size: int | None
    batch_rows: int | None
    bytes_per_batch: int | None
    #: Of the last InterleaveIterDataset: the files listed, and the product of the slice
    #: steps applied to that list before the interleave (the share of one host).
    files: int | None
    file_shards: int | None
    #: Digests of the first batches the loop drew: equal on two hosts, same data.
    first_batches: list[str]
    workers_measured: WorkersMeasuredJSON | None
    stages: StagesJSON | None
    observed: list[dict[str, Any]]


class ChildReportJSON(TypedDict, total=False):
    """What the capture child reports about the run (all of it, or only ``host`` and
    ``versions`` when the script ended before the child could write): the runner adds it to
    :class:`SidecarJSON`."""

    step_source: str | None  # a StepSource
    step_source_detail: str | None
    window: WindowJSON
    steps: list[StepJSON]
    steps_seen: int
    early_trace: EarlyTraceJSON
    trace_files: list[str]
    partial_reasons: list[str]
    notes: list[str]
    stopped_by_traceinspect: bool
    ended: str | None
    script_start_unix_ns: int | None
    profiler: ProfilerJSON
    host: HostJSON
    machine_load: MachineLoadJSON | None
    run_events: RunEventsJSON
    versions: dict[str, str | None]
    maxtext: bool
    backend: dict[str, Any] | None
    grain: GrainJSON | None
    process_index: int | None
    process_count: int | None
    global_arrays: list[GlobalArrayJSON]
    stack_samples: StackSamplesJSON | None


class _PhaseCpuJSON(TypedDict, total=False):
    #: The script's process's CPU time over the timed window (its Grain workers' not
    #: included): in the loader phase, what the pipeline's read threads and the drain cost.
    process_cpu_s: float


class PhaseJSON(_PhaseCpuJSON):
    """A phase of ``traceinspect isolate`` as the child ran it (never in a sidecar)."""

    timing: str  # target | loader | real
    deadline_s: float | None
    #: Outermost Grain next() calls on the main thread.
    batches_drawn: int
    #: Why the phase ended before its window was timed (its time limit, the iterator ran
    #: out, no Grain batch), else null.
    ended_early: str | None
    #: The steady-state rule's blocks: [first step, last step, mean step ms].
    blocks: list[list[float]]
    #: Over the timed window, on the main thread: time in the outermost Grain next(), time
    #: in host reads of device values (float(x), .block_until_ready(), ...), and the reads.
    input_wait_s: float
    host_read_s: float
    host_reads: int
    #: Cores other processes of the machine kept busy, on average, over the window (its
    #: busy CPU time in /proc/stat less the script's and its Grain workers'); null unknown.
    others_cpu_cores: float | None
    cpu_count: int | None


class PhaseReportJSON(ChildReportJSON, total=False):
    """The child's report in a phase of ``traceinspect isolate``: what the runner times."""

    phase: PhaseJSON


class SidecarJSON(ChildReportJSON, total=False):
    """The whole file. A host's placeholder in a shared run (written when its capture
    starts, replaced when it ends) holds only some of these."""

    schema_version: int
    tool: ToolJSON
    command: list[str]
    python: str
    cwd: str
    run_name: str | None
    run_dir: str
    host_name: str
    shared_run: bool
    started_unix_ns: int
    ended_unix_ns: int
    exit_code: int
    exit_signal: str | None
    partial: bool
    options: dict[str, Any]


# --- the reader: typed records -------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The traced window: where capture opened it and why (step indices of the source)."""

    rule: WindowRule | None
    reason: str | None
    first_step: int | None
    last_step: int | None
    complete: bool
    requested_steps: int | None = None
    skip_steps: int | None = None
    trace_start_unix_ns: int | None = None
    trace_stop_unix_ns: int | None = None
    #: Steps timed without the profiler after the window (first, last; capture's
    #: ``time_after``, on by default), and whether that block ran its full length.
    untraced_after: tuple[int, int] | None = None
    untraced_complete: bool = False
    #: Capture stopped the script once the window was written (``--stop-after``), timing no
    #: step after it on purpose.
    stopped_after: bool = False


@dataclass(frozen=True)
class HostStep:
    """One step of the run as the host saw it: its start and its time to the next step."""

    index: int
    step_num: int | None
    start_unix_ns: int | None
    wall_ms: float | None
    traced: bool
    #: When its device work finished (Unix ns), None when unknown.
    done_unix_ns: int | None = None
    #: The process's CPU time to the next step's start (ms; a phase of isolate), or None.
    cpu_ms: float | None = None


@dataclass(frozen=True)
class WorkerCounters:
    """One Grain worker process over the window (capture's probe, the worker's own clock)."""

    index: int | None
    pid: int | None
    wall_s: float
    elements: int
    produce_s: float
    blocked_s: float
    cpu_s: float
    rss_bytes: int | None
    timed_elements: bool
    #: Time its threads were ready to run but waited for a core (None: not recorded).
    cpu_wait_s: float | None = None


@dataclass(frozen=True)
class WorkersMeasured:
    """The worker probes' counters over the traced window."""

    window_s: float | None
    batches: int
    elements: int
    main_process_cpu_s: float | None
    workers: tuple[WorkerCounters, ...]


@dataclass(frozen=True)
class StagesMeasured:
    """Self time per input-pipeline stage over the window, by where it ran (seconds)."""

    window_s: float | None
    batches: int
    worker_elements: int | None
    seconds: dict[str, dict[str, float]]  # place -> stage -> seconds
    calls: dict[str, dict[str, int]]  # place -> stage -> calls timed
    #: CPU time and run delay of the read threads that ran stages (place -> seconds).
    thread_cpu_s: dict[str, float] = field(default_factory=dict)
    thread_run_delay_s: dict[str, float] = field(default_factory=dict)
    #: The training process's CPU time over the window (seconds).
    process_cpu_s: float | None = None


@dataclass(frozen=True)
class GrainSettings:
    """Grain's settings as the script made them (the last of each before the window)."""

    worker_count: int | None
    per_worker_buffer_size: int | None = None
    read_threads: int | None = None
    read_prefetch_buffer_size: int | None = None
    batch_size: int | None = None
    bytes_per_batch: int | None = None
    workers_override: int | None = None
    measured: WorkersMeasured | None = None
    stages: StagesMeasured | None = None
    first_batches: tuple[str, ...] = ()
    #: The leading size of the first batch the loop drew.
    batch_rows: int | None = None
    #: Files listed under the last InterleaveIterDataset, and the slices' shard count.
    files: int | None = None
    file_shards: int | None = None


@dataclass(frozen=True)
class GlobalArray:
    """A global array (spanning ``processes`` processes) built from this host's batch: the
    batch array's rows, the global array's, and those of them on this host's devices."""

    api: str
    local_rows: int
    global_rows: int
    host_rows: int
    processes: int


@dataclass(frozen=True)
class HostFacts:
    """The machine the script ran on."""

    hostname: str | None
    cpu_count: int | None
    cpus_available: int | None
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    #: The cgroup (container) memory limit, when one below the host's memory is set.
    memory_limit_bytes: int | None = None
    memory_limit_source: str | None = None

    @property
    def cores(self) -> int | None:
        """The cores the process may use (its affinity), else the machine's."""
        return self.cpus_available or self.cpu_count


@dataclass(frozen=True)
class MachineLoad:
    """How busy the machine was over the traced window (:class:`MachineLoadJSON`), read."""

    window_s: float
    cpu_count: int | None
    #: The cores other processes kept busy, on average.
    others_cpu_cores: float
    #: The cores the script's process and its descendants kept busy, on average.
    script_cpu_cores: float | None = None

    def cores_left(self, cores: int | None) -> int | None:
        """Of ``cores`` the script may use (its affinity), those other processes left it:
        the machine's cores less theirs, to the nearest whole core, at least 1 and at most
        ``cores``. Others' load is the machine's: with an affinity of a few of its cores,
        it is taken to fall on the others first. None without ``cores``."""
        if not cores:
            return None
        machine = self.cpu_count or cores
        return max(1, min(cores, math.floor(machine - self.others_cpu_cores + 0.5)))


@dataclass(frozen=True)
class RunEvents:
    """Long garbage collections and new iterators over the whole run
    (:class:`RunEventsJSON`), read: collections as (start, duration) on the Unix clock (ns)."""

    gc_start_unix_ns: tuple[int, ...] = ()
    gc_ns: tuple[int, ...] = ()
    iterator_start_unix_ns: tuple[int, ...] = ()


@dataclass(frozen=True)
class StackSamples:
    """The training thread's sampled stack (:class:`StackSamplesJSON`), read."""

    interval_ms: float
    t_unix_ns: tuple[int, ...]
    site: tuple[int, ...]  # index into sites, one per sample
    sites: tuple[str, ...]
    #: The thread's CPU clock at each look (ns), or None where it was not read.
    cpu_ns: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Sidecar:
    """A capture sidecar, read. ``data`` is the file as written, for fields no analysis
    reads (the command, versions, options, ...)."""

    schema_version: int
    step_source: StepSource | None
    step_source_detail: str | None
    window: Window | None
    steps: tuple[HostStep, ...]
    grain: GrainSettings | None
    host: HostFacts | None
    shared_run: bool
    partial: bool
    partial_reasons: tuple[str, ...]
    device_tracer_level_applied: bool | None
    data: SidecarJSON = field(repr=False, compare=False)
    #: From jax.distributed (None when the script did not initialise it).
    process_index: int | None = None
    process_count: int | None = None
    #: Devices this process drives (None when the script never imported jax).
    local_devices: int | None = None
    #: jax's default backend the script ran on (``cpu``, ``gpu``, ``tpu``; None when it
    #: never imported jax).
    platform: str | None = None
    #: Global arrays the script built from its loop's batches (the first few).
    global_arrays: tuple[GlobalArray, ...] = ()
    #: The training thread's sampled Python stack while tracing (None: not sampled).
    stack_samples: StackSamples | None = None
    #: How busy the machine was over the traced window (None: not recorded).
    machine_load: MachineLoad | None = None
    #: Long garbage collections and new iterators over the run (None: not recorded).
    run_events: RunEvents | None = None
    #: Fields left out because their value was unusable (NaN, Infinity, negative, wrong type).
    ignored: tuple[str, ...] = ()

    @property
    def ignored_note(self) -> str | None:
        """One line naming the fields left out, for the analysis's notes."""
        if not self.ignored:
            return None
        return (
            f"the capture sidecar ({file_name()}) has fields whose value is not a finite "
            f"number >= 0 or is of another type, left out: {', '.join(self.ignored[:8])}"
            f"{' ...' if len(self.ignored) > 8 else ''}. Capture again for them."
        )

    def traced_step_walls_ms(self) -> list[float]:
        """Host wall times of the traced steps (those with a next step), in order."""
        return [s.wall_ms for s in self.steps if s.traced and s.wall_ms is not None]

    def traced_throughput_ms(self) -> tuple[float, int] | None:
        """Time per completed step over the traced steps (the device's throughput: from
        the completion of the step before the first traced one, or of the first, to that of
        the last), and the steps it spans; None without two completion stamps."""
        return completed_step_ms(self.steps, lambda s: s.traced)

    @property
    def ran_maxtext(self) -> bool:
        """Whether the captured script ran MaxText: as the child recorded it, or, in an older
        sidecar, whether the command names it (``python -m maxtext.train``,
        ``MaxText/train.py``)."""
        recorded = self.data.get("maxtext")
        if isinstance(recorded, bool):
            return recorded
        command = self.data.get("command")
        words = command if isinstance(command, list) else []
        return any(_MAXTEXT.search(str(word)) for word in words[:3])

    @property
    def untested_note(self) -> str | None:
        """:func:`untested_note` of the versions the capture recorded."""
        versions = self.data.get("versions")
        return untested_note(versions) if isinstance(versions, Mapping) else None

    def untraced_pace(self) -> StepPace | None:
        """The pace of the steps timed without the profiler after the window
        (:attr:`Window.untraced_after`): :func:`step_pace` over them; None when the capture
        timed none, the script ended before the block was complete (its last steps then
        hold the end of its data), or fewer than ``UNTRACED_MIN_STEPS`` have a wall time."""
        window = self.window
        if window is None or window.untraced_after is None or not window.untraced_complete:
            return None
        first, last = window.untraced_after

        def inside(s: HostStep) -> bool:
            return first <= s.index <= last

        pace = step_pace(self.steps, inside)
        return pace if pace is not None and pace.count >= UNTRACED_MIN_STEPS else None

    def step_time_ms(self) -> tuple[float, int, str] | None:
        """The traced window's mean step, ``(ms, steps, how)``: :func:`step_pace` over the
        traced steps."""
        pace = step_pace(self.steps, lambda s: s.traced)
        return None if pace is None else (pace.mean_ms, pace.count, pace.how)


#: Fewer untraced steps after the window than this give no pace (capture's block holds at
#: least 5, as a window does).
UNTRACED_MIN_STEPS = 5


# The oldest jax and Grain that capture is tested with (noxfile.py's matrix; pyproject.toml's
# ``capture`` extra). Older ones run, but on jax 0.6.1 with Grain 0.2.12 (Python 3.10's
# newest) the tests found the worker probe silent (no time per batch, so no worker findings),
# Grain's worker errors reaching the script in another form, and short windows whose device
# work ran after them: what rests on those is missing or wrong there.
CAPTURE_TESTED_FROM: dict[str, tuple[int, ...]] = {"jax": (0, 10, 2), "grain": (0, 2, 18)}


# MaxText run by module (maxtext.train, MaxText.train) or by path (.../MaxText/train.py).
_MAXTEXT = re.compile(r"(^|[/\\.])maxtext([/\\.]|$)", re.IGNORECASE)


def _release(version: str) -> tuple[int, ...]:
    """``"0.12.0.1"`` -> ``(0, 12, 0, 1)``; the leading numbers only (``"0.2.18rc1"`` ->
    ``(0, 2, 18)``)."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in found.group().split(".")) if found else ()


def untested_versions(versions: Mapping[str, object]) -> list[str]:
    """``"jax 0.6.1"`` for each library in ``versions`` older than capture is tested with."""
    old = []
    for name, floor in CAPTURE_TESTED_FROM.items():
        found = versions.get(name)
        if isinstance(found, str) and _release(found) < floor:
            old.append(f"{name} {found}")
    return old


def untested_note(versions: Mapping[str, object]) -> str | None:
    """A sentence for a capture made with libraries older than capture is tested with."""
    old = untested_versions(versions)
    if not old:
        return None
    floors = ", ".join(
        f"{name} >= {'.'.join(map(str, v))}" for name, v in CAPTURE_TESTED_FROM.items()
    )
    return (
        f"Captured with {' and '.join(old)}, older than capture is tested with ({floors}): "
        "findings that rest on the Grain worker probe or on the window's device work may be "
        "missing or wrong. Upgrade (pip install -U jax jaxlib grain) and capture again."
    )


def parse(data: Mapping[str, Any]) -> Sidecar | None:
    """Read a sidecar's JSON object; None when it is of a newer schema than this reader.
    A number that is NaN, infinite, negative or of another type is left out (the analysis
    goes on without it) and its field named in :attr:`Sidecar.ignored`."""
    token = _IGNORED.set([])
    try:
        sidecar = _parse(data)
        ignored = tuple(_IGNORED.get() or ())
    finally:
        _IGNORED.reset(token)
    return replace(sidecar, ignored=ignored) if sidecar is not None and ignored else sidecar


def _parse(data: Mapping[str, Any]) -> Sidecar | None:
    raw = cast(SidecarJSON, data)
    version = _get_int(raw, "schema_version")
    if version is None:
        version = 1
    if version > SCHEMA_VERSION:
        return None
    profiler = _read_mapping(raw.get("profiler"))
    source = raw.get("step_source")
    return Sidecar(
        schema_version=version,
        step_source=source if source in STEP_SOURCES else None,
        step_source_detail=_read_str(raw.get("step_source_detail")),
        window=_read_window(raw.get("window"), raw.get("options")),
        steps=tuple(s for s in map(_read_step, _read_list(raw.get("steps"))) if s is not None),
        grain=_read_grain(raw.get("grain")),
        host=_read_host(raw.get("host")),
        shared_run=raw.get("shared_run") is True,
        partial=raw.get("partial") is True,
        partial_reasons=tuple(
            r for r in _read_list(raw.get("partial_reasons")) if isinstance(r, str)
        ),
        device_tracer_level_applied=_read_bool(profiler.get("device_tracer_level_applied")),
        data=raw,
        process_index=_get_int(raw, "process_index"),
        process_count=_get_int(raw, "process_count"),
        local_devices=_local_devices(raw.get("backend"), _get_int(raw, "process_index")),
        platform=_read_str(_read_mapping(raw.get("backend")).get("platform")),
        global_arrays=tuple(
            a for a in map(_read_global_array, _read_list(raw.get("global_arrays"))) if a
        ),
        stack_samples=_read_stack_samples(raw.get("stack_samples")),
        machine_load=_read_machine_load(raw.get("machine_load")),
        run_events=_read_run_events(raw.get("run_events")),
    )


def _read_stack_samples(value: object) -> StackSamples | None:
    """The samples, or None when absent or damaged (lists of unequal length, an index out
    of the table, a time or index that is not an integer)."""
    if not isinstance(value, Mapping):
        return None
    v = cast(StackSamplesJSON, value)
    interval = _read_float(v.get("interval_ms"))
    times, where, sites = (_read_list(v.get(k)) for k in ("t_unix_ns", "site", "sites"))
    if (
        interval is None
        or not math.isfinite(interval)
        or len(times) != len(where)
        or not all(isinstance(t, int) and not isinstance(t, bool) for t in times)
        or not all(isinstance(i, int) and 0 <= i < len(sites) for i in where)
        or not all(isinstance(site, str) for site in sites)
    ):
        return None
    cpu = _read_list(v.get("cpu_ns"))
    cpu_ok = len(cpu) == len(times) and all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpu
    )
    return StackSamples(
        interval,
        tuple(cast(list[int], times)),
        tuple(cast(list[int], where)),
        tuple(cast(list[str], sites)),
        tuple(cast(list[int], cpu)) if cpu and cpu_ok else None,
    )


def _read_global_array(value: object) -> GlobalArray | None:
    if not isinstance(value, Mapping):
        return None
    a = cast(GlobalArrayJSON, value)
    api = _read_str(a.get("api"))
    numbers = [
        _read_int(a.get(k), k) for k in ("local_rows", "global_rows", "host_rows", "processes")
    ]
    local, rows, host, processes = numbers
    if api is None or local is None or rows is None or host is None or processes is None:
        return None
    return GlobalArray(api, local, rows, host, processes)


def _local_devices(backend: object, process_index: int | None) -> int | None:
    devices = [
        d for d in _read_list(_read_mapping(backend).get("devices")) if isinstance(d, Mapping)
    ]
    if not devices:
        return None
    mine = process_index or 0
    return sum(1 for d in devices if (_get_int(d, "process_index") or 0) == mine)


def _read_window(value: object, options: object = None) -> Window | None:
    if not isinstance(value, Mapping) or not value:
        return None
    w = cast(WindowJSON, value)
    rule = w.get("rule")
    return Window(
        rule=rule if rule in WINDOW_RULES else None,
        reason=_read_str(w.get("reason")),
        first_step=_get_int(w, "first_step"),
        last_step=_get_int(w, "last_step"),
        complete=w.get("complete") is True,
        requested_steps=_get_int(w, "requested_steps"),
        skip_steps=_get_int(w, "skip_steps"),
        trace_start_unix_ns=_get_int(w, "trace_start_unix_ns"),
        trace_stop_unix_ns=_get_int(w, "trace_stop_unix_ns"),
        **_read_untraced(w.get("untraced_after")),
        stopped_after=_stopped_after(options),
    )


def _stopped_after(options: object) -> bool:
    """Whether capture stopped the script once the window was written, timing no step after
    it (``--stop-after`` without ``time_after``)."""
    if not isinstance(options, Mapping):
        return False
    return options.get("stop_after") is True and options.get("time_after") is not True


def _read_untraced(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {}
    u = cast(UntracedJSON, value)
    first, last = _get_int(u, "first_step"), _get_int(u, "last_step")
    if first is None or last is None or last < first:
        return {}
    return {"untraced_after": (first, last), "untraced_complete": u.get("complete") is True}


def _read_step(value: object) -> HostStep | None:
    if not isinstance(value, Mapping):
        return None
    s = cast(StepJSON, value)
    index = _get_int(s, "index")
    if index is None:
        return None
    return HostStep(
        index=index,
        step_num=_get_int(s, "step_num", signed=True),
        start_unix_ns=_get_int(s, "start_unix_ns"),
        wall_ms=_get_float(s, "wall_ms"),
        traced=s.get("traced") is True,
        done_unix_ns=_get_int(s, "done_unix_ns"),
        cpu_ms=_get_float(s, "cpu_ms"),
    )


def completed_step_ms(
    steps: Sequence[HostStep], chosen: Callable[[HostStep], bool]
) -> tuple[float, int] | None:
    """Mean time per completed step over the ``chosen`` steps: between the completion
    stamps of the step before the first chosen one (else the first) and of the last chosen
    one stamped, divided by the steps between them; with that count. None below two stamps."""
    picked = [s.index for s in steps if chosen(s)]
    if not picked:
        return None
    first, last = min(picked), max(picked)
    done = {
        s.index: s.done_unix_ns
        for s in steps
        if s.done_unix_ns is not None and first - 1 <= s.index <= last
    }
    if len(done) < 2:
        return None
    a, b = min(done), max(done)
    return (done[b] - done[a]) / 1e6 / (b - a), b - a


def completed_gaps_ms(steps: Sequence[HostStep]) -> dict[int, float]:
    """Step index -> the time (ms) from the previous step's completion stamp to its own, for
    the steps stamped whose previous step is stamped too."""
    done = {s.index: s.done_unix_ns for s in steps if s.done_unix_ns is not None}
    return {i: (t - done[i - 1]) / 1e6 for i, t in sorted(done.items()) if i - 1 in done}


@dataclass(frozen=True)
class StepPace:
    """The pace a run kept over some steps: see :func:`step_pace`."""

    mean_ms: float
    median_ms: float
    count: int
    how: str  # "completed", "host" or "host only"


def step_pace(
    steps: Sequence[HostStep], chosen: Callable[[HostStep], bool], *, min_completed: int = 1
) -> StepPace | None:
    """The ``chosen`` steps' pace: the slower of the host's step starts and the device's
    completions, the pace the run can keep. ``how`` is ``"completed"`` when the completions
    are slower (the host ran ahead while the device's queue filled: its step starts read as
    little as half the step), ``"host"`` when the step starts are (the device ran down steps
    queued before the window, faster than the loop fed it), ``"host only"`` without
    completion stamps over at least ``min_completed`` steps. The median is of the gaps
    between consecutive completions, or of the host walls. None without either."""
    walls = [s.wall_ms for s in steps if chosen(s) and s.wall_ms is not None]
    host = statistics.fmean(walls) if walls else None
    done = completed_step_ms(steps, chosen)
    if done is not None and done[1] < min_completed:
        done = None
    if done is not None and (host is None or done[0] >= host):
        gaps = completed_gaps_ms(steps)
        picked = [gaps[s.index] for s in steps if chosen(s) and s.index in gaps]
        median = statistics.median(picked) if picked else done[0]
        return StepPace(done[0], median, done[1], "completed")
    if host is None:
        return None
    how = "host" if done is not None else "host only"
    return StepPace(host, statistics.median(walls), len(walls), how)


def _read_grain(value: object) -> GrainSettings | None:
    if not isinstance(value, Mapping) or not value:
        return None
    g = cast(GrainJSON, value)
    return GrainSettings(
        worker_count=_get_int(g, "worker_count"),
        per_worker_buffer_size=_get_int(g, "per_worker_buffer_size"),
        read_threads=_get_int(g, "read_threads"),
        read_prefetch_buffer_size=_get_int(g, "read_prefetch_buffer_size"),
        batch_size=_get_int(g, "batch_size"),
        bytes_per_batch=_get_int(g, "bytes_per_batch"),
        workers_override=_get_int(g, "workers_override"),
        measured=_read_measured(g.get("workers_measured")),
        stages=_read_stages(g.get("stages")),
        first_batches=tuple(b for b in _read_list(g.get("first_batches")) if isinstance(b, str)),
        batch_rows=_get_int(g, "batch_rows"),
        files=_get_int(g, "files"),
        file_shards=_get_int(g, "file_shards"),
    )


def _read_stages(value: object) -> StagesMeasured | None:
    if not isinstance(value, Mapping) or not value:
        return None
    s = cast(StagesJSON, value)

    def table(raw: object, number: type[float] | type[int]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for place, row in _read_mapping(raw).items():
            values = {
                str(stage): number(n)
                for stage, v in _read_mapping(row).items()
                if (n := _number(v, f"{place}.{stage}", signed=False)) is not None
            }
            if isinstance(place, str) and values:
                out[place] = values
        return out

    return StagesMeasured(
        window_s=_get_float(s, "window_s"),
        batches=_get_int(s, "batches") or 0,
        worker_elements=_get_int(s, "worker_elements"),
        seconds=table(s.get("seconds"), float),
        calls=table(s.get("calls"), int),
        thread_cpu_s=_seconds_by_place(s.get("thread_cpu_s")),
        thread_run_delay_s=_seconds_by_place(s.get("thread_run_delay_s")),
        process_cpu_s=_get_float(s, "process_cpu_s"),
    )


def _seconds_by_place(raw: object) -> dict[str, float]:
    return {
        str(place): float(n)
        for place, v in _read_mapping(raw).items()
        if (n := _number(v, str(place), signed=False)) is not None
    }


def _read_measured(value: object) -> WorkersMeasured | None:
    if not isinstance(value, Mapping) or not value:
        return None
    m = cast(WorkersMeasuredJSON, value)
    workers = tuple(w for w in map(_read_worker, _read_list(m.get("workers"))) if w is not None)
    return WorkersMeasured(
        window_s=_get_float(m, "window_s"),
        batches=_get_int(m, "batches") or 0,
        elements=_get_int(m, "elements") or 0,
        main_process_cpu_s=_get_float(m, "main_process_cpu_s"),
        workers=workers,
    )


def _read_worker(value: object) -> WorkerCounters | None:
    if not isinstance(value, Mapping):
        return None
    w = cast(WorkerJSON, value)
    numbers = (
        _get_float(w, "wall_s"),
        _get_int(w, "elements"),
        _get_float(w, "produce_s"),
        _get_float(w, "blocked_s"),
        _get_float(w, "cpu_s"),
    )
    wall_s, elements, produce_s, blocked_s, cpu_s = numbers
    if wall_s is None or elements is None or produce_s is None or cpu_s is None:
        return None
    return WorkerCounters(
        index=_get_int(w, "index"),
        pid=_get_int(w, "pid"),
        wall_s=wall_s,
        elements=elements,
        produce_s=produce_s,
        blocked_s=blocked_s or 0.0,
        cpu_s=cpu_s,
        rss_bytes=_get_int(w, "rss_bytes"),
        timed_elements=w.get("timed_elements") is True,
        cpu_wait_s=_get_float(w, "cpu_wait_s"),
    )


def _read_machine_load(value: object) -> MachineLoad | None:
    if not isinstance(value, Mapping) or not value:
        return None
    m = cast(MachineLoadJSON, value)
    window_s, others = _get_float(m, "window_s"), _get_float(m, "others_cpu_cores")
    if window_s is None or others is None:
        return None
    return MachineLoad(
        window_s=window_s,
        cpu_count=_get_int(m, "cpu_count"),
        others_cpu_cores=others,
        script_cpu_cores=_get_float(m, "script_cpu_cores"),
    )


def _read_run_events(value: object) -> RunEvents | None:
    """The events, or None when absent; entries that are not numbers (or collections whose
    lists differ in length) are left out."""
    if not isinstance(value, Mapping):
        return None
    starts, took = _read_list(value.get("gc_start_unix_ns")), _read_list(value.get("gc_ms"))
    gc: list[tuple[int, int]] = []
    if len(starts) == len(took):
        for a, b in zip(starts, took, strict=True):
            start, ms = _read_int(a), _read_float(b)
            if start is not None and ms is not None:
                gc.append((start, round(ms * 1e6)))
    iterators = [t for t in map(_read_int, _read_list(value.get("iterator_start_unix_ns"))) if t]
    return RunEvents(
        gc_start_unix_ns=tuple(a for a, _ in gc),
        gc_ns=tuple(b for _, b in gc),
        iterator_start_unix_ns=tuple(iterators),
    )


def _read_host(value: object) -> HostFacts | None:
    if not isinstance(value, Mapping) or not value:
        return None
    h = cast(HostJSON, value)
    return HostFacts(
        hostname=_read_str(h.get("hostname")),
        cpu_count=_get_int(h, "cpu_count"),
        cpus_available=_get_int(h, "cpus_available"),
        memory_total_bytes=_get_int(h, "memory_total_bytes"),
        memory_available_bytes=_get_int(h, "memory_available_bytes"),
        memory_limit_bytes=_get_int(h, "memory_limit_bytes"),
        memory_limit_source=_read_str(h.get("memory_limit_source")),
    )


#: The fields parse() ignored (NaN, Infinity, negative, another type), by name, while it
#: runs (a context variable: a trace may be read on another thread).
_IGNORED: ContextVar[list[str] | None] = ContextVar("_IGNORED", default=None)


def _number(value: object, key: str, signed: bool) -> float | None:
    """``value`` when it is a finite number (>= 0 unless ``signed``), else None, and an
    absent value aside, ``key`` noted as ignored. Every number the sidecar holds is a count,
    a size, an index or a time: JSON's NaN and Infinity (which Python writes and reads) or
    a negative one would only end in a ValueError later, or a wrong figure."""
    if value is None:
        return None
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (signed or value >= 0)
    ):
        return value
    ignored = _IGNORED.get()
    if ignored is not None and key not in ignored:
        ignored.append(key)
    return None


def _read_int(value: object, key: str = "", *, signed: bool = False) -> int | None:
    number = _number(value, key, signed)
    return None if number is None else int(number)


def _read_float(value: object, key: str = "", *, signed: bool = False) -> float | None:
    number = _number(value, key, signed)
    return None if number is None else float(number)


def _get_int(mapping: Mapping[str, Any], key: str, *, signed: bool = False) -> int | None:
    return _read_int(mapping.get(key), key, signed=signed)


def _get_float(mapping: Mapping[str, Any], key: str) -> float | None:
    return _read_float(mapping.get(key), key)


def _read_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _read_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _read_list(value: object) -> Sequence[object]:
    return value if isinstance(value, list) else ()


def _read_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
