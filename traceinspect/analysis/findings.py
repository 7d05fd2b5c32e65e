"""What is set up wrong: checks of the pipeline as the script built it, each with the numbers
behind it and the fix (``analyze --json`` ``findings``).

The checks read what ``traceinspect capture`` recorded (Grain's settings, bytes per batch,
the workers' measured CPU and memory, the cores and memory the process may use) and what
the analysis measured (the verdict, the worker-count recommendation, dispatches per step):

- ``sync_in_loop``: a device value read in the loop (the analysis' own finding, repeated
  here so that ``findings`` is the one list of what to fix);
- ``no_read_ahead``: an input-bound run whose pipeline cannot read ahead (no worker
  processes and no read threads, or a read-ahead buffer of 0);
- ``buffer_memory``: worker buffers (workers x per_worker_buffer_size x bytes per batch,
  plus each worker's measured memory) above half of the memory available at capture;
- ``workers_vs_cores``: more CPU-bound workers than the usable cores hold (the worker-count
  rule's core limit), or a host whose measured CPU per step already fills its cores, or
  fewer workers than the worker-count recommendation asks for;
- ``op_by_op``: the host's own work idles the device and the step is made of many jitted
  calls (or each "step" is one small jitted call), each shorter on the device than on the
  host: the device waits for dispatches;
- ``batch_vs_devices``: the host's batch does not divide over its local devices;
- ``batch_vs_global``: the host's batch has more rows than the global array built from it
  keeps on the host's devices (see :func:`_batch_vs_global` for what is observed);
- ``workers_vs_files``: more ``mp_prefetch`` workers than files per host under an
  ``InterleaveIterDataset`` (MaxText's rule; see :func:`_workers_vs_files`).

Across the hosts of a pod, ``analysis/pod_advice.py`` adds ``same_data_on_hosts``, and for a
host whose trace could not be analysed, the checks of its sidecar alone
(:func:`sidecar_findings`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from traceinspect import names as N
from traceinspect.analysis import workers_inputs as WI
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Finding, Recommendation, Severity
from traceinspect.analysis.steps import Steps, nested_spans
from traceinspect.analysis.training_thread import ThreadEvents
from traceinspect.analysis.workers_inputs import IDLE_WORKERS, WorkerMeasurement, computes
from traceinspect.sidecar import HostFacts, Sidecar
from traceinspect.thresholds import CORE_WAIT_NOTE, KNEE_TOLERANCE, MATTERS

#: Worker buffers above this share of the memory available at capture are a finding.
BUFFER_MEMORY_SHARE = 0.5
#: Batches each worker should hold: two steps' worth keeps the device fed through a slow batch.
BUFFER_STEPS = 2
_KIB, _MIB = 1024, 1 << 20  # bytes per KiB, per MiB


@dataclass(frozen=True)
class Dispatches:
    """Jitted calls on the training thread inside the analysed steps."""

    calls: int
    steps: int
    wall_ns: int  # the steps' wall time
    device_ns: int  # the steps' device work

    @property
    def per_step(self) -> float:
        return self.calls / self.steps if self.steps else 0.0


def count_dispatches(events: ThreadEvents | None, steps: Steps, device_ns: int) -> Dispatches:
    """``PjitFunction`` calls of the training thread (``events``) starting inside the steps."""
    if len(steps) == 0 or events is None or len(events) == 0:
        return Dispatches(0, len(steps), 0, device_ns)
    calls = events.named(N.PJIT)
    starts, ends = events.starts[calls], events.line.end_at(calls)
    # A jitted function called from inside another counts once: the host dispatches once.
    starts = starts[~nested_spans(starts, ends)]
    lo, hi = int(steps.starts[0]), int(steps.ends[-1])
    n = int(np.count_nonzero((starts >= lo) & (starts < hi)))
    wall = int((steps.ends - steps.starts).sum())
    return Dispatches(n, len(steps), wall, device_ns)


def findings(
    *,
    verdict: str,
    fractions: dict[str, float],
    recommendations: tuple[Recommendation, ...],
    sidecar: Sidecar | None,
    measured: WorkerMeasurement | None,
    step_ms: float,
    dispatches: Dispatches,
    steps_one_call_each: bool,
) -> tuple[Finding, ...]:
    """Every check that fires, most important first."""
    out: list[Finding] = []
    out += _sync_in_loop(verdict, recommendations)
    out += _no_read_ahead(verdict, sidecar)
    out += _buffer_memory(sidecar, step_ms)
    out += _workers_vs_cores(verdict, sidecar, measured, recommendations, step_ms)
    out += _op_by_op(fractions, dispatches, steps_one_call_each)
    out += sidecar_findings(sidecar)
    return tuple(sorted(out, key=lambda f: f.severity != "warning"))


def sidecar_findings(sidecar: Sidecar | None) -> tuple[Finding, ...]:
    """The checks that need only what capture recorded of the pipeline as the script built
    it (no trace): a pod reports them for a host whose trace could not be analysed."""
    return tuple(
        _batch_vs_devices(sidecar) + _batch_vs_global(sidecar) + _workers_vs_files(sidecar)
    )


def _sync_in_loop(verdict: str, recs: tuple[Recommendation, ...]) -> list[Finding]:
    rec = next((r for r in recs if r.kind == "remove_sync"), None)
    if rec is None:
        return []
    where = f" at {rec.where[0]}" if rec.where else ""
    severity: Severity = "warning" if verdict == "sync-bound" else "info"
    return [
        Finding(
            "sync_in_loop",
            severity,
            f"The training loop reads a device value{where}, so the host waits for the device "
            "and prepares the next step only after it.",
            rec.message,
        )
    ]


def _no_read_ahead(verdict: str, sidecar: Sidecar | None) -> list[Finding]:
    grain = sidecar.grain if sidecar is not None else None
    if verdict != "input-bound" or grain is None:
        return []
    problems = []
    if not grain.worker_count and not grain.read_threads:
        problems.append("no mp_prefetch worker processes and no read threads (num_threads=0)")
    if grain.read_prefetch_buffer_size == 0:
        problems.append("ReadOptions(prefetch_buffer_size=0)")
    if not problems:
        return []
    return [
        Finding(
            "no_read_ahead",
            "warning",
            f"The run is input-bound and its pipeline cannot read ahead: {'; '.join(problems)}. "
            "Every batch is made while the training loop waits for it.",
            "Make batches in the background: .mp_prefetch(grain.MultiprocessingOptions("
            "num_workers=N)) on the IterDataset (see the worker count), and read with "
            "grain.ReadOptions(num_threads=16, prefetch_buffer_size=500).",
        )
    ]


def _buffer_memory(sidecar: Sidecar | None, step_ms: float) -> list[Finding]:
    grain = sidecar.grain if sidecar is not None else None
    host = sidecar.host if sidecar is not None else None
    if grain is None or host is None or not host.memory_available_bytes:
        return []
    workers, size, batch = grain.worker_count, grain.per_worker_buffer_size, grain.bytes_per_batch
    if not workers or not size or not batch:
        return []
    rss = WI.largest_worker_rss(grain.measured) or 0
    buffered = workers * size * batch
    total = buffered + workers * rss
    available = host.memory_available_bytes
    if total <= BUFFER_MEMORY_SHARE * available:
        return []
    # Each worker's batch is taken every `workers` steps: BUFFER_STEPS steps of batches per
    # worker is ceil(BUFFER_STEPS / workers), at least one.
    keep = max(1, math.ceil(BUFFER_STEPS / workers))
    rss_text = f" + {workers} x {_mib(rss)} worker memory" if rss else ""
    limit = host.memory_limit_bytes
    # A cgroup's limit (a container's) is enforced: past it the kernel kills a process.
    where = (
        f" (of the {limit / (1 << 30):.1f} GiB your container may use): past its limit the "
        "kernel kills a process of the container (out of memory)."
        if limit
        else ": the host may swap or kill the workers."
    )
    return [
        Finding(
            "buffer_memory",
            "warning",
            f"Worker buffers hold {workers} workers x {size} batches x {_mib(batch)} = "
            f"{_mib(buffered)}{rss_text}, {total / available:.0%} of the {_mib(available)} "
            f"of memory available at capture{where}",
            f"Set MultiprocessingOptions(per_worker_buffer_size={keep}): {BUFFER_STEPS} steps "
            f"of batches across the workers ({_mib(workers * keep * batch)} buffered) keep the "
            f"device fed at {step_ms:.1f} ms per step.",
        )
    ]


def _workers_vs_cores(
    verdict: str,
    sidecar: Sidecar | None,
    measured: WorkerMeasurement | None,
    recs: tuple[Recommendation, ...],
    step_ms: float,
) -> list[Finding]:
    out: list[Finding] = []
    grain = sidecar.grain if sidecar is not None else None
    host = sidecar.host if sidecar is not None else None
    workers = grain.worker_count if grain is not None else None
    cores = host.cores if host is not None else None
    if workers and cores and measured is not None and host is not None:
        # The worker-count rule's own core limit: workers that wait on reads leave their
        # core free, CPU-bound ones do not (on a core or waiting for one).
        share = measured.core_share
        fit = max(1, math.floor(cores / max(share, 1 / 64)))
        floor_ms = (measured.host_cpu_ms_per_step or 0.0) / cores
        # The CPU share says how CPU-bound producing is only while the workers mostly
        # produce: mostly blocked on full buffers, their other CPU (the probe, the queue)
        # outweighs it.
        saturated = measured.busy_share >= IDLE_WORKERS
        if saturated and computes(share) and workers > fit:
            out.append(
                Finding(
                    "workers_vs_cores",
                    "warning",
                    f"{workers} CPU-bound workers on {_count(cores, 'usable core')}"
                    f"{_affinity_note(host)}: {_core_share_text(measured)}, so they queue "
                    "for one another and slow the training process.",
                    f"Use at most {_count(fit, 'worker')}: more only queue for the same "
                    f"{'core' if cores == 1 else 'cores'}. To make batches faster, make each "
                    "one cheaper to produce (lighter or offline preprocessing), or give the "
                    "job more cores.",
                )
            )
        elif verdict == "input-bound" and floor_ms * KNEE_TOLERANCE >= step_ms > 0:
            # Input-bound, and the measured CPU per step already fills the cores (within the
            # knee's 10%): the workers compete for CPU (their measured share is diluted by
            # the wait). On XLA's CPU backend the device's own work counts too.
            full = (
                "The one core the process may use is full"
                if cores == 1
                else f"The {cores} cores the process may use are full"
            ) + _affinity_note(host)
            out.append(
                Finding(
                    "workers_vs_cores",
                    "warning",
                    f"{full}: the training process and {_count(workers, 'worker')} use "
                    f"{measured.host_cpu_ms_per_step:.1f} ms of CPU per step, so a step takes "
                    f"at least {floor_ms:.1f} ms; steps took {step_ms:.1f} ms.",
                    "More workers cannot help: make batches cheaper (lighter or offline "
                    "preprocessing, cheaper decoding), or give the job more cores.",
                )
            )
    rec = next((r for r in recs if r.kind == GRAIN_WORKER_COUNT), None)
    if (
        rec is not None
        and rec.value is not None
        and rec.current is not None
        and rec.value > rec.current
        and verdict != "sync-bound"  # there the batches wait for the read, not the workers
        and not out
    ):
        out.append(
            Finding(
                "workers_vs_cores",
                "info",
                f"{rec.current} worker(s) make batches slower than the device uses them; "
                f"the measurement asks for {rec.value}.",
                rec.message,
            )
        )
    return out


def _op_by_op(fractions: dict[str, float], d: Dispatches, one_call_each: bool) -> list[Finding]:
    if fractions.get("host", 0.0) < MATTERS or d.calls == 0:
        return []
    per_call_device_ms = d.device_ns / d.calls / 1e6
    per_call_wall_ms = d.wall_ns / d.calls / 1e6
    # The device waits for dispatches when a call's device work is shorter than the host's
    # time per call: the host, not the device, sets the pace.
    if per_call_device_ms >= per_call_wall_ms - per_call_device_ms:
        return []
    if d.per_step < 2 and not one_call_each:
        return []
    shape = (
        "each step found is one call of a small jitted function"
        if one_call_each and d.per_step < 2
        else f"each step is {d.per_step:.0f} separate jitted calls"
    )
    return [
        Finding(
            "op_by_op",
            "warning",
            f"The device waits for dispatches: {shape}, each with {per_call_device_ms:.3f} ms "
            f"of device work against {per_call_wall_ms:.3f} ms of host time per call.",
            "Jit the whole step function (forward, backward and update in one jax.jit), so "
            "the host dispatches once per step.",
        )
    ]


def _batch_vs_devices(sidecar: Sidecar | None) -> list[Finding]:
    grain = sidecar.grain if sidecar is not None else None
    devices = sidecar.local_devices if sidecar is not None else None
    batch = grain.batch_size if grain is not None else None
    if not batch or not devices or devices < 2 or batch % devices == 0:
        return []
    return [
        Finding(
            "batch_vs_devices",
            "warning",
            f"This host's batch of {batch} does not divide over its {devices} devices: the "
            "batch cannot be split evenly across them (jax refuses to shard it, or pads).",
            f"Use a per-host batch that is a multiple of {devices} (global batch = per-host "
            "batch x process count).",
        )
    ]


def _batch_vs_global(sidecar: Sidecar | None) -> list[Finding]:
    """A host that loads more rows per step than it trains on.

    What capture observes: the arrays of each batch the loop draws, and the first few arrays
    spanning several processes that the script builds from one of them, by identity (the
    batch's NumPy array itself or a view of it) through ``jax.device_put``,
    ``jax.make_array_from_process_local_data`` or
    ``multihost_utils.host_local_array_to_global_array``: the batch array's rows, the
    global array's rows, and the rows of the global array on this host's devices (its
    sharding's addressable indices). A host needs exactly those rows; with the batch axis
    split over every process that is global batch / process count. It fires when the host's
    batch has more rows than that: each host's pipeline makes the whole global batch (or a
    multiple of its share) and jax keeps only this host's slice of it.

    Limits: a batch turned into new arrays before jax sees them (a copy, a dtype change,
    ``np.stack``) is not matched and not checked. The other way round is invisible here: a
    host that hands its whole global batch to ``make_array_from_process_local_data`` without
    ``global_shape`` (or to ``host_local_array_to_global_array``) makes a global batch
    process-count times larger, and every host's rows are still its own share; the sizes
    alone cannot tell that from a larger global batch on purpose. A batch replicated over
    processes on purpose (model parallelism across hosts) keeps every row on every host and
    correctly does not fire.
    """
    arrays = sidecar.global_arrays if sidecar is not None else ()
    a = next((a for a in arrays if a.local_rows > a.host_rows), None)
    if a is None:
        return []
    ratio = a.local_rows / a.host_rows if a.host_rows else math.inf
    what = (
        "Each host's pipeline makes the whole global batch: "
        if a.local_rows == a.global_rows
        else ""
    )
    return [
        Finding(
            "batch_vs_global",
            "warning",
            f"{what}this host's batch has {a.local_rows} rows, but of the global array of "
            f"{a.global_rows} rows built from it ({a.api}, over {a.processes} processes) "
            f"only {a.host_rows} are on this host's devices. The host loads {ratio:.3g}x "
            "the rows it trains on; jax drops the rest.",
            f"Batch {a.host_rows} rows per host (global batch // jax.process_count() when "
            "the batch is split over every process), read only this host's slice "
            "(grain.sharding.ShardOptions(shard_index=jax.process_index(), shard_count="
            "jax.process_count()), or ds[jax.process_index()::jax.process_count()]), and "
            "build the global array with jax.make_array_from_process_local_data(sharding, "
            "local_batch).",
        )
    ]


def _workers_vs_files(sidecar: Sidecar | None) -> list[Finding]:
    """More ``mp_prefetch`` workers than files per host, for pipelines that read files one
    after another (Parquet, TFRecord) through an ``InterleaveIterDataset``.

    MaxText's rule (``get_datasets`` in its ``grain_data_processing.py``, Parquet and
    TFRecord): files per host = files // host count, at least 1 (fewer files than hosts:
    hosts share a file and split its rows), and it refuses ``grain_worker_count`` above
    that. The reason is Grain's: ``mp_prefetch`` gives worker ``i`` the interleave's datasets
    ``[i::workers]``, one per file, so surplus workers get no file; measured with Grain
    0.2.18, such a worker ends the pipeline with ``IndexError: list index out of range``
    after the first batch or two (capture then says why: ``workers_vs_files_hint`` in the
    capture child). So this finding shows on a trace only when the script got that far:
    a list repeated under the interleave (every worker then gets files, read by several
    workers at once) or a Grain that tolerates an idle worker.

    What capture observes: the length of the list the last ``InterleaveIterDataset`` was
    built from (walked down through the ``MapDataset``\\ s on it to its source: the files
    listed) and the product of the steps of the slices applied to it on the way (the host
    count, for MaxText's ``[host_index::host_count]``); a list the script sliced per host
    itself is this host's files already. Workers: the last ``mp_prefetch`` seen.

    Limits: sources read by record (``ArrayRecordDataSource``, any ``MapDataset`` source)
    are not checked: ``mp_prefetch`` slices their records, so every worker reads from every
    file (MaxText does not check them either). A list repeated before the workers' slice
    (``.repeat()`` under the interleave) gives every worker files again; MaxText counts the
    files without the repeats, and so does this rule. A host that shards rows after the
    interleave reads every file, and its files per host are all of them.
    """
    grain = sidecar.grain if sidecar is not None else None
    if grain is None or not grain.worker_count or not grain.files:
        return []
    workers, files, shards = grain.worker_count, grain.files, max(1, grain.file_shards or 1)
    per_host = max(files // shards, 1)
    if workers <= per_host:
        return []
    share = (
        f"{files} files listed, {files} // {shards} = {per_host} per host"
        if shards > 1
        else f"{files} file(s) listed"
    )
    return [
        Finding(
            "workers_vs_files",
            "warning",
            f"{workers} mp_prefetch workers share {per_host} file(s) on this host ({share}). "
            "mp_prefetch gives worker i the interleaved files [i::workers]: "
            f"{workers - per_host} worker(s) get no file, or (from a repeated list) only "
            "files other workers read too. A worker given no file ends the pipeline with "
            "IndexError: list index out of range (Grain 0.2.18); MaxText refuses this "
            "configuration.",
            f"Use at most {per_host} worker(s) (grain.MultiprocessingOptions(num_workers="
            f"{per_host})), or split the data into at least {workers * shards} files "
            f"({workers} per host).",
        )
    ]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _affinity_note(host: HostFacts) -> str:
    """Why the process may use fewer cores than the machine has, when it may."""
    if host.cpu_count and host.cpus_available and host.cpus_available < host.cpu_count:
        return (
            f" (its CPU affinity allows {host.cpus_available} of this machine's "
            f"{host.cpu_count}: taskset, or a container's cpuset)"
        )
    return ""


def _core_share_text(m: WorkerMeasurement) -> str:
    if m.cpu_wait_share < CORE_WAIT_NOTE:
        return f"each is on a core {m.core_share:.0%} of the time it makes batches"
    return (
        f"making batches, each was on a core {m.cpu_share:.0%} of the time and waited for "
        f"one {m.cpu_wait_share:.0%}: it computes {m.core_share:.0%} of the time it does not "
        "wait for a core"
    )


def _mib(n: int | float) -> str:
    return f"{n / _MIB:,.0f} MiB" if n >= _MIB else f"{n / _KIB:,.0f} KiB"
