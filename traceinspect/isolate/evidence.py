"""What the loop did in the real phase and what the pipeline's workers cost
(:class:`Evidence`), built from the phases' runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from traceinspect import sidecar as SC
from traceinspect.analysis.workers import WorkerMeasurement
from traceinspect.capture import PhaseRun
from traceinspect.isolate.text import LOADER, PHASES, REAL, TARGET
from traceinspect.isolate.timing import PhaseTiming, _phase


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the loop did in the real phase's window, per step, and the pipeline's workers."""

    #: The training thread's time in Grain next() per step (waiting for input).
    input_wait_ms: float | None
    #: Its time in host reads of device values per step (float(x), .block_until_ready(), ...).
    host_read_ms: float | None
    host_reads_per_step: float | None
    #: Grain mp_prefetch workers in use (None: not seen).
    workers: int | None
    #: The workers' CPU time over their producing time in the loader phase (None: no workers
    #: measured).
    workers_cpu_share: float | None
    #: The cores the script's process may use.
    cores: int | None
    #: The loader phase's record (its workers' measurement, the host's cores and memory,
    #: Grain's settings): what the worker count is sized from, as ``analyze`` sizes it.
    loader: SC.Sidecar | None = None
    #: Without workers: the share of the loader phase's read-thread time spent on a CPU
    #: (the process's CPU time per batch over the read threads' time per batch), as
    #: ``analyze`` measures it from a capture's read threads (None: not measured).
    threads_cpu_share: float | None = None
    #: The real phase's process CPU time per step (ms; without workers, the pipeline's
    #: included): over the cores, the fastest step the host's CPU allows.
    host_cpu_ms_per_step: float | None = None
    #: The workers' CPU time per batch (ms), in the real phase where it measured them, else
    #: in the loader's (None: no workers measured).
    workers_cpu_ms_per_batch: float | None = None
    #: The target phase's process CPU time per step (ms): the step's own host work, on
    #: XLA's CPU backend the device's work too (stands in for the real phase's when that
    #: is not known).
    target_cpu_ms_per_step: float | None = None
    #: Whether the script ran on XLA's CPU backend (its device's work is the host's CPU
    #: work), from any phase's record; None when no phase recorded its backend.
    cpu_backend: bool | None = None
    #: The cores other processes of the machine kept busy over the real phase's window, on
    #: average (None: not measured).
    others_cpu_cores: float | None = None

    @property
    def free_cores(self) -> float | None:
        """The cores the script had to itself in the real phase: its cores less what other
        processes kept busy, at least one; None without the cores."""
        if not self.cores:
            return None
        return min(float(self.cores), max(1.0, self.cores - (self.others_cpu_cores or 0.0)))

    @property
    def workers_on_cores_ms(self) -> float | None:
        """On XLA's CPU backend, with worker processes: the workers' CPU per batch over the
        cores the script had (ms), the time their work takes from a step computed on the same
        cores when nothing is left idle. None elsewhere (on an accelerator the device's work
        does not run on the host's cores), or without the figures."""
        batch, free = self.workers_cpu_ms_per_batch, self.free_cores
        if not self.cpu_backend or not self.workers or batch is None or free is None:
            return None
        return batch / free

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "loader":
                continue
            v = getattr(self, f.name)
            out[f.name] = round(v, 3) if isinstance(v, float) else v
        return out


def _evidence(
    runs: Mapping[str, PhaseRun],
    real: PhaseTiming,
    loader_timing: PhaseTiming | None = None,
    target_timing: PhaseTiming | None = None,
) -> Evidence:
    real_phase = _phase(runs[REAL])
    steps = real.count
    input_s, read_s = real_phase.get("input_wait_s"), real_phase.get("host_read_s")
    reads = real_phase.get("host_reads")
    if real.how == "partial":
        # Counted over a window that is not the steps timed.
        input_s = read_s = reads = None
    records = {p: runs[p].record for p in PHASES}
    grain = next((r.grain for r in (records[REAL], records[LOADER]) if r and r.grain), None)
    host = next((r.host for r in records.values() if r and r.host), None)
    loader = records[LOADER]
    measured = loader.grain.measured if loader and loader.grain else None
    # Each phase's workers as analyze reads them (the workers that set the pace).
    real_workers, loader_workers = (
        WorkerMeasurement.from_sidecar(r.grain.measured) if r and r.grain else None
        for r in (records[REAL], loader)
    )
    share = None
    if loader_workers is not None:
        share = loader_workers.cpu_share
    elif measured is not None:
        # No timed worker: over every worker.
        produce = sum(w.produce_s for w in measured.workers)
        if produce > 0:
            share = min(1.0, sum(w.cpu_s for w in measured.workers) / produce)
    # A capture that saw Grain but no mp_prefetch: the pipeline runs in the process.
    workers = None if grain is None else grain.worker_count or 0
    return Evidence(
        input_wait_ms=input_s * 1e3 / steps if input_s is not None else None,
        host_read_ms=read_s * 1e3 / steps if read_s is not None else None,
        host_reads_per_step=reads / steps if reads is not None else None,
        workers=workers,
        workers_cpu_share=share,
        cores=host.cores if host is not None else None,
        loader=loader,
        threads_cpu_share=(
            _threads_cpu_share(runs[LOADER], loader_timing) if workers == 0 else None
        ),
        host_cpu_ms_per_step=_cpu_ms_per_step(runs[REAL], real),
        workers_cpu_ms_per_batch=next(
            (m.cpu_ms_per_batch for m in (real_workers, loader_workers) if m is not None),
            None,
        ),
        target_cpu_ms_per_step=(
            _cpu_ms_per_step(runs[TARGET], target_timing) if target_timing is not None else None
        ),
        cpu_backend=next(
            (r.platform == "cpu" for r in records.values() if r is not None and r.platform),
            None,
        ),
        others_cpu_cores=real.others_cpu_cores,
    )


def _cpu_ms_per_step(run: PhaseRun, timing: PhaseTiming) -> float | None:
    """The phase's process CPU time per step timed (ms), or None."""
    if timing.cpu_ms is not None:
        return timing.cpu_ms
    cpu_s = _phase(run).get("process_cpu_s")
    if cpu_s is None or timing.count <= 0:
        return None
    return float(cpu_s) * 1e3 / timing.count


def _threads_cpu_share(run: PhaseRun, timing: PhaseTiming | None) -> float | None:
    """The loader phase's read threads' share on a CPU: the process's CPU time per batch
    over the read threads' time per batch (``threads x`` the batch time: alone, the
    pipeline keeps its threads busy); None without the figures or the thread count."""
    record = run.record
    threads = record.grain.read_threads if record and record.grain else None
    cpu_ms = _cpu_ms_per_step(run, timing) if timing is not None else None
    thread_ms = threads * timing.mean_ms if threads and timing is not None else 0.0
    return min(1.0, cpu_ms / thread_ms) if cpu_ms is not None and thread_ms > 0 else None
